"""Unmodified libpcap programs on weir's libpcap, live on the veth test bed.

Run it inside scripts/testbed (it reads the TB_* variables):

    scripts/testbed --queues 2 -- python3 tests/pcap-compat/live_check.py --libdir DIR --weir BIN

The sender replays a synthesized trace of marked UDP/TCP flows (to a MAC and
addresses nobody on the test bed owns, so nothing answers) at a rate every
tool keeps up with, while in the capturing namespace:
- tcpdump on weir writes what it captures with -w, next to stock tcpdump on
  the same interface: weir's must hold exactly the frames sent (as a
  multiset), and its "captured/received by filter/dropped by kernel" lines
  must say so too;
- the same through `weir run --locality 8000`, whose own per-queue counters
  must add up as well;
- refilter (pcap_setfilter while reading) on weir and stock side by side:
  after the switch exactly the packets the new filter passes arrive
- pollcap (a nonblocking poll(2) loop on pcap_get_selectable_fd) on weir
  must read every frame without spinning on an always-readable descriptor;
  and as a blocking loop (poll, then pcap_dispatch with no timeout, as
  softflowd reads) no read may wait for traffic still to come;
- softflowd and fprobe, each on stock libpcap and on weir at once, exporting
  to nfcapd: weir's flows (addresses, ports, protocol, packets, bytes) must
  be exactly those sent. Stock's are printed beside them: stock softflowd
  live leaves the last TPACKET_V3 block's packets unread until it stops, so
  it is short by a few hundred, which weir is not.
Exit 1 on any difference."""
import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import flows  # noqa: E402

ENV = {k: os.environ.get(k, "") for k in ("TB_TX_NS", "TB_RX_NS", "TB_TX_IF", "TB_RX_IF", "TB_RX_IP")}
PACKETS = 20_000
PPS = 10_000


def in_rx(argv, env=()):
    return ["ip", "netns", "exec", ENV["TB_RX_NS"], "env", *env, *argv]


class Capture:
    """A tool in the capturing namespace; its stderr is collected as it comes,
    so that we can wait for its banner."""

    def __init__(self, name, argv, ready=r"listening on|Exporting flows|Starting|pollcap: listening"):
        self.name, self.ready = name, re.compile(ready)
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        self.err = []
        self.reader = threading.Thread(target=lambda: self.err.extend(self.proc.stderr), daemon=True)
        self.reader.start()

    def wait_ready(self, seconds=10):
        """Wait for the banner, then a little: tools print it just before they open their socket."""
        until = time.time() + seconds
        while time.time() < until and not self.ready.search("".join(self.err)):
            if self.proc.poll() is not None:
                self.reader.join(5)
                raise RuntimeError(f"{self.name} exited {self.proc.returncode}: {''.join(self.err)[-400:]}")
            time.sleep(0.05)
        time.sleep(0.5)

    def stop(self, sig=signal.SIGINT, timeout=30):
        if sig is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, sig)
        note = ""
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            note = f"\n({self.name} did not stop within {timeout} s: killed)"
        self.reader.join(5)
        return self.proc.stdout.read(), "".join(self.err) + note


def send(path):
    argv = ["ip", "netns", "exec", ENV["TB_TX_NS"], "tcpreplay", "-q", f"--pps={PPS}", "-i", ENV["TB_TX_IF"], str(path)]
    p = subprocess.run(argv, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"tcpreplay: {p.stderr.strip()}")


def tcpdump_counts(err):
    def num(key):
        m = re.search(rf"^(\d+) packets? {key}", err, re.M)
        return int(m.group(1)) if m else None
    return num("captured"), num("received by filter"), num("dropped by kernel")


def check_tcpdump(name, err, written, sent, extra_ok=lambda: (True, "")):
    captured, received, dropped = tcpdump_counts(err)
    missing, extra = flows.multiset_diff(sent, flows.read_pcap(written)) if Path(written).exists() else (len(sent), 0)
    counts_ok = captured == len(sent) and received == len(sent) and dropped == 0
    ok2, note = extra_ok()
    ok = counts_ok and missing == 0 and extra == 0 and ok2
    print(f"{'ok  ' if ok else 'FAIL'} {name}: sent {len(sent)}, captured {captured}, received by filter {received}, "
          f"dropped {dropped}; -w file: {missing} missing, {extra} extra{note}")
    if not ok and not counts_ok:
        print("  " + err.strip().replace("\n", "\n  ")[-600:])
    return ok


def check_refilter(work, lib):
    """refilter.c live, stock and weir side by side: read 100 packets with
    "udp dst port 1000", switch to "udp dst port 2000", read 100 more. Each
    burst holds 100 frames to each port. The first burst's port-2000 frames were
    rejected by the first filter, so after the switch exactly the second
    burst's 100 port-2000 frames must arrive, and nothing for port 1000."""
    exe = work / "refilter"
    cc = subprocess.run(["cc", "-O2", "-o", str(exe), str(Path(__file__).with_name("refilter.c")), "-lpcap"], capture_output=True, text=True)
    if cc.returncode != 0:
        print(f"FAIL refilter: cannot build: {cc.stderr.strip()[-400:]}")
        return False
    src, dst = [198, 18, 0, 1], [198, 18, 0, 99]
    burst = [flows.frame(src, dst, 40000 + i, 1000 + 1000 * (i % 2), True, i, 64) for i in range(200)]
    flows.write_pcap(work / "burst.pcap", burst)
    argv = [str(exe), "-i", ENV["TB_RX_IF"], "udp dst port 1000", "100", "udp dst port 2000", "100"]
    caps = {"stock": Capture("refilter (stock)", in_rx(argv)), "weir": Capture("refilter (weir)", in_rx(argv, [lib]))}
    for c in caps.values():
        c.wait_ready()
    send(work / "burst.pcap")
    until = time.time() + 10
    while time.time() < until and not all("switched" in "".join(c.err) for c in caps.values()):
        time.sleep(0.05)
    send(work / "burst.pcap")
    ok = True
    for name, c in caps.items():
        out, err = c.stop(sig=None, timeout=30)
        ports = [[int(line.split()[4]) for line in out.splitlines() if line.startswith(f"{k} ")] for k in (1, 2)]
        good = ports[0] == [1000] * 100 and ports[1] == [2000] * 100 and c.proc.returncode == 0
        if name == "weir":
            ok = good
        print(f"{'ok  ' if good else 'FAIL' if name == 'weir' else '    '} refilter -i (pcap_setfilter while reading) on {name}: "
              f"before the switch {len(ports[0])} packets, to ports {sorted(set(ports[0]))}; after it {len(ports[1])}, to ports "
              f"{sorted(set(ports[1]))} (want 100 to port 1000, then 100 to port 2000){'' if good else '; ' + err.strip()[-200:]}")
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--libdir", required=True, help="directory holding weir's libpcap.so.0.8")
    ap.add_argument("--weir", required=True, help="the weir binary (for weir run)")
    args = ap.parse_args()
    if not all(ENV.values()):
        print("live: run me inside scripts/testbed (TB_* variables missing)")
        return 2
    lib = f"LD_LIBRARY_PATH={Path(args.libdir).resolve()}"
    rx = ENV["TB_RX_IF"]
    work = Path(tempfile.mkdtemp(prefix="weir-live-"))
    os.chmod(work, 0o777)  # tcpdump writes -w files after dropping root
    sent = flows.synth_frames(PACKETS, 200, seed=7)
    trace = work / "sent.pcap"
    flows.write_pcap(trace, sent)
    bad = checks = 0
    try:
        # tcpdump, stock and weir side by side.
        caps = {
            "stock": Capture("tcpdump (stock)", in_rx(["tcpdump", "-i", rx, "-n", "-w", str(work / "stock.pcap")])),
            "weir": Capture("tcpdump (weir)", in_rx(["tcpdump", "-i", rx, "-n", "-w", str(work / "weir.pcap")], [lib])),
        }
        for c in caps.values():
            c.wait_ready()
        send(trace)
        time.sleep(1.5)
        res = {k: c.stop() for k, c in caps.items()}
        s_cap, s_rec, s_drop = tcpdump_counts(res["stock"][1])
        print(f"     tcpdump (stock, same run): captured {s_cap}, received by filter {s_rec}, dropped {s_drop}")
        checks += 1
        bad += not check_tcpdump("tcpdump -i on weir", res["weir"][1], work / "weir.pcap", sent)

        # weir run with locality buffering: its own counters must agree.
        c = Capture("weir run tcpdump", in_rx([args.weir, "run", "--lib", str(Path(args.libdir).resolve()), "--locality", "8000", "--",
                                                "tcpdump", "-i", rx, "-n", "-w", str(work / "loc.pcap")]))
        c.wait_ready()
        send(trace)
        time.sleep(1.5)
        _, err = c.stop()

        def weir_total():
            m = re.search(r"weir:\s+total\s+(\d+)\s+(\d+)", err)
            got = m and int(m.group(1)) == len(sent) and int(m.group(2)) == len(sent)
            return bool(got), f"; weir's total: {m.group(0).split(None, 2)[2] if m else 'not reported'}"
        checks += 1
        bad += not check_tcpdump("weir run --locality 8000 -- tcpdump -i", err, work / "loc.pcap", sent, weir_total)

        # A nonblocking poll loop on the selectable descriptor.
        pollcap = work / "pollcap"
        cc = subprocess.run(["cc", "-O2", "-o", str(pollcap), str(Path(__file__).with_name("pollcap.c")), "-lpcap"], capture_output=True, text=True)
        checks += 1
        if cc.returncode != 0:
            print(f"FAIL pollcap: cannot build: {cc.stderr.strip()[-400:]}")
            bad += 1
        else:
            for extra in ([], ["WEIR_LOCALITY=8000"]):
                c = Capture("pollcap", in_rx([str(pollcap), rx, "6"], [lib, *extra]))
                c.wait_ready()
                send(trace)
                out, err = c.stop(sig=None, timeout=30)
                m = re.search(r"packets=(\d+) wakeups=(\d+) empty=(\d+) timeouts=(\d+)", out)
                # Our frames plus at most a few the kernel sends on its own.
                ok = bool(m) and int(m.group(1)) == len(sent) and int(m.group(3)) <= 200
                bad += not ok
                print(f"{'ok  ' if ok else 'FAIL'} pollcap (nonblocking poll loop) on weir {' '.join(extra)}: "
                      f"{out.strip() or err.strip()[-300:]} (sent {len(sent)}; a spinning loop counts millions of empty wake-ups)")
            checks += 1
            # Blocking reads after a readable poll, as softflowd does them: a
            # read must not wait for traffic that has not come yet. A wake-up
            # for packets already read (before the first send, or in the pause
            # between two) would leave it waiting; with no traffic after, for
            # ever.
            c = Capture("pollcap", in_rx([str(pollcap), rx, "12", "blocking"], [lib]))
            c.wait_ready()
            send(trace)
            time.sleep(3)
            send(trace)
            out, err = c.stop(sig=None, timeout=30)
            m = re.search(r"packets=(\d+) .*longest=(\d+)", out)
            ok = c.proc.returncode == 0 and bool(m) and int(m.group(1)) == 2 * len(sent) and int(m.group(2)) < 500
            bad += not ok
            print(f"{'ok  ' if ok else 'FAIL'} pollcap (poll, then a blocking pcap_dispatch with no timeout) on weir: "
                  f"{out.strip() or err.strip()[-300:]} (sent {2 * len(sent)} in two bursts; longest read in ms must stay under 500)")
            checks += 1

        checks += 1
        bad += not check_refilter(work, lib)

        # Flow exporters, stock and weir at once, each to its own collector.
        rx_ip = ENV["TB_RX_IP"]
        cols, exps = {}, {}
        for i, (tool, libname) in enumerate([(t, l) for t in ("softflowd", "fprobe") for l in ("stock", "weir")]):
            port = 9995 + i
            cols[(tool, libname)] = flows.Collector(in_rx, rx_ip, port)
            env = [lib] if libname == "weir" else []
            if tool == "softflowd":
                # -B: as fprobe's below, so that stock softflowd loses nothing either.
                argv = ["softflowd", "-d", "-i", rx, "-v", "9", "-m", "65536", "-B", "8388608", "-n", f"{rx_ip}:{port}",
                        "-c", str(work / f"sf-{libname}.ctl"), "-p", str(work / f"sf-{libname}.pid")]
            else:
                # -B, -q: a kernel buffer and a queue to the flow cache large enough
                # that fprobe itself loses nothing at this rate (with its defaults
                # two stock instances side by side disagree).
                argv = ["fprobe", "-l", "2", "-B", "8192", "-q", "10000", "-i", rx, f"{rx_ip}:{port}"]
            exps[(tool, libname)] = Capture(f"{tool} ({libname})", in_rx(argv, env))
        for e in exps.values():
            e.wait_ready(5)
        send(trace)
        time.sleep(2)
        for (tool, libname), e in exps.items():
            if tool == "softflowd":
                # Its loop sleeps in poll(2) until a packet or its control socket
                # wakes it; "shutdown" exports every flow and exits.
                try:
                    subprocess.run(in_rx(["softflowctl", "-c", str(work / f"sf-{libname}.ctl"), "shutdown"]), capture_output=True, timeout=30)
                except subprocess.TimeoutExpired:
                    print(f"     softflowctl shutdown ({libname}) did not answer within 30 s")
                e.stop(sig=None)
            else:
                # fprobe emits its whole flow cache on SIGTERM.
                e.stop(sig=signal.SIGTERM)
        time.sleep(0.5)
        got = {k: c.flows() for k, c in cols.items()}
        want = flows.truth(sent)
        for tool in ("softflowd", "fprobe"):
            stock, weir = got[(tool, "stock")], got[(tool, "weir")]
            count = lambda fl: sum(int(k[5]) * n for k, n in fl.items() if k[0].startswith("198.1"))
            # Only our frames: nothing else crosses the test bed, but be sure.
            ours = lambda fl: flows.Counter({k: n for k, n in flows.flow_totals(fl).items() if k[0].startswith("198.1")})
            exact = ours(weir) == want
            checks += 1
            bad += not exact
            same = "the same records as stock" if stock == weir else (
                f"stock {'also exact' if ours(stock) == want else 'short by ' + str(len(sent) - count(stock)) + ' packets'}")
            print(f"{'ok  ' if exact else 'FAIL'} {tool} -i live on weir: {sum(weir.values())} flow records of {count(weir)} packets, "
                  f"{'every flow exact' if exact else 'flows differ from those sent'}; {same} "
                  f"({sum(stock.values())} records of {count(stock)} packets, same run)")
            if not exact:
                print(flows.describe(stock, weir))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"live: {checks - bad} of {checks} checks passed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
