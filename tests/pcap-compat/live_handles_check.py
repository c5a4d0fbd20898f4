"""Live handles on weir's libpcap against stock, on the veth test bed (run it
inside scripts/testbed; it reads the TB_* variables):

- getters.c on a handle from pcap_create, not activated, and on an activated
  one: every getter and setter, with its error text, the same on both, but
  for one difference weir makes on purpose: pcap_fileno of an activated
  handle is weir's ready eventfd, not the AF_PACKET socket libpcap reads
  (weir's own threads read the interface; see crates/weir-pcap/src/getters.rs);
- iftop -t -s 2, which at exit cancels its capture thread while it waits in
  pcap_loop: it must exit within a few seconds of its 2, as on stock (with
  pings flowing: iftop's clock ticks on packets);
- the first pcap_next_ex on a handle opened with to_ms 0, as urlsnarf reads
  (firstread.c), with traffic starting 2 s after the open: it must wait for
  it and return 1, as on stock (a ping flood: stock hands over a block only
  once it is full when to_ms is 0).

    scripts/testbed --queues 2 -- python3 tests/pcap-compat/live_handles_check.py --libdir DIR

Exit 1 on any difference."""
import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ENV = {k: os.environ.get(k, "") for k in ("TB_TX_NS", "TB_RX_NS", "TB_RX_IF", "TB_RX_IP")}
# The one line weir answers otherwise, by design.
LIVE_FILENO = ("pcap_fileno = socket:", "pcap_fileno = anon_inode:[eventfd]")
IFTOP_SECONDS = 2
# How long after the open the first packet comes, for firstread.
FIRST_PACKET_AFTER = 2.0


def in_rx(argv, lib=None):
    return ["ip", "netns", "exec", ENV["TB_RX_NS"], "env", *([f"LD_LIBRARY_PATH={lib}"] if lib else []), *map(str, argv)]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--libdir", required=True, help="directory holding weir's libpcap.so.0.8")
    args = ap.parse_args()
    if not all(ENV.values()):
        print("live handles: run me inside scripts/testbed (TB_* variables missing)")
        return 2
    lib = Path(args.libdir).resolve()
    work = Path(tempfile.mkdtemp(prefix="weir-live-handles-"))
    exe = work / "getters"
    cc = subprocess.run(["cc", "-O2", "-Wall", "-o", str(exe), str(Path(__file__).with_name("getters.c")), "-lpcap"],
                        capture_output=True, text=True)
    if cc.returncode != 0:
        sys.exit(f"getters: cannot build: {cc.stderr.strip()[-400:]}")
    bad = 0
    rx = ENV["TB_RX_IF"]
    for flag, what in (("-c", "created, not activated"), ("-i", "activated")):
        stock = subprocess.run(in_rx([exe, flag, rx]), capture_output=True, text=True)
        weir = subprocess.run(in_rx([exe, flag, rx], lib), capture_output=True, text=True)
        s, w = stock.stdout.splitlines(), weir.stdout.splitlines()
        differ = [(a, b) for a, b in zip(s, w) if a != b and (a, b) != LIVE_FILENO]
        ok = stock.returncode == weir.returncode == 0 and len(s) == len(w) and not differ
        bad += not ok
        print(f"{'ok  ' if ok else 'FAIL'} getters on a live handle, {what}: {len(s)} calls"
              + ("" if ok else f"; first difference {differ[:1]} {weir.stderr.strip()[-200:]}"))

    for name, l in (("stock", None), ("weir", lib)):
        # iftop's clock ticks on packets (no packet, no exit, on stock too):
        # traffic flows for the whole run.
        ping = subprocess.Popen(["ip", "netns", "exec", ENV["TB_TX_NS"], "ping", "-i", "0.1", ENV["TB_RX_IP"]],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        start = time.monotonic()
        try:
            p = subprocess.run(in_rx(["iftop", "-t", "-s", IFTOP_SECONDS, "-n", "-N", "-P", "-i", rx], l),
                               capture_output=True, text=True, timeout=IFTOP_SECONDS + 15)
            rc, took = p.returncode, time.monotonic() - start
        except subprocess.TimeoutExpired:
            rc, took = "no exit", time.monotonic() - start
        finally:
            ping.terminate()
            ping.wait()
        ok = rc == 0 and took < IFTOP_SECONDS + 5
        bad += not ok
        print(f"{'ok  ' if ok else 'FAIL'} iftop -t -s {IFTOP_SECONDS} on {name}: exit {rc} after {took:.1f} s")
    first = work / "firstread"
    cc = subprocess.run(["cc", "-O2", "-Wall", "-o", str(first), str(Path(__file__).with_name("firstread.c")), "-lpcap"],
                        capture_output=True, text=True)
    if cc.returncode != 0:
        sys.exit(f"firstread: cannot build: {cc.stderr.strip()[-400:]}")
    for name, l in (("stock", None), ("weir", lib)):
        p = subprocess.Popen(in_rx([first, rx], l), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        ping = None
        try:
            opened = p.stdout.readline().strip() == "open"
            if opened:
                time.sleep(FIRST_PACKET_AFTER)
                # A flood of large pings: stock's TPACKET_V3 block with to_ms 0
                # is handed over only once it is full.
                ping = subprocess.Popen(["ip", "netns", "exec", ENV["TB_TX_NS"], "ping", "-f", "-s", "1400", "-w", "15",
                                         ENV["TB_RX_IP"]], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            out, err = p.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
            out += " (no return within 15 s)"
        finally:
            if ping:
                ping.terminate()
                ping.wait()
        said = out.strip()
        waited = said.startswith("pcap_next_ex = 1 after ") and float(said.split()[4]) >= FIRST_PACKET_AFTER / 2
        bad += not waited
        print(f"{'ok  ' if waited else 'FAIL'} first pcap_next_ex with to_ms 0 on {name}, the first packet "
              f"{FIRST_PACKET_AFTER:.0f} s after the open: {said or 'nothing'} {err.strip()[-200:]}")
    print(f"live handles: {'all passed' if not bad else f'{bad} failed'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
