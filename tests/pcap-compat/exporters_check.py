"""Flow exporters on weir's libpcap, offline: softflowd -r exporting NetFlow v9
to nfcapd, and nfpcapd -r writing flow files itself, on corpus traces and a
synthesized one. Each must store the same flows (addresses, ports, protocol,
packets, bytes: nfdump's view) on weir as on the system libpcap, and so must
weir with locality buffering (WEIR_LOCALITY), which reorders packets across
flows but keeps each flow's order.

softflowd and nfcapd talk inside a network namespace of our own, on an
address of the benchmark range; so this needs root. Exit 1 on any difference.

    python3 tests/pcap-compat/exporters_check.py --libdir target/weir-pcap
"""
import argparse
import gzip
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import flows  # noqa: E402

ZEEK = flows.ROOT.parent / "shared" / "corpus" / "zeek-traces"
TRACES = ["smtp.pcap", "wikipedia.pcap", "var-services-std-ports.pcap", "nmap-vsn.pcap", "dns-edns-ecs.pcap",
          "irc-dcc-send.pcapng", "echo-connections.pcap.gz"]
COLLECTOR = "198.18.254.1"


def softflowd(ns, env, trace, port, work):
    """softflowd's flows as nfcapd stored them; run again (up to 3 times) when
    nfcapd lost export packets, which says nothing about the capture."""
    for _ in range(3):
        got, lost = softflowd_once(ns, env, trace, port, work)
        if not lost:
            return got
    raise RuntimeError(f"nfcapd lost {lost} export packets in each of 3 runs")


def softflowd_once(ns, env, trace, port, work):
    col = flows.Collector(ns.argv, COLLECTOR, port)
    # -c none: with a control socket, softflowd -r waits on it after the file ends.
    # -m: room for every flow, so that none is expired early for want of space
    # (which flow goes first then depends on the order of other flows' packets).
    p = subprocess.run(ns.argv(["env", *env, "softflowd", "-d", "-r", str(trace), "-m", "262144", "-v", "9",
                                "-n", f"{COLLECTOR}:{port}", "-c", "none", "-p", str(work / "sf.pid")]),
                       capture_output=True, text=True, timeout=300)
    got = col.flows()
    if p.returncode != 0:
        raise RuntimeError(f"softflowd exited {p.returncode}: {p.stderr.strip()[-300:]}")
    return got, col.lost


def nfpcapd(env, trace, work):
    out = Path(tempfile.mkdtemp(prefix="weir-nfpcapd-", dir=work))
    p = subprocess.run(["env", *env, "nfpcapd", "-r", str(trace), "-w", str(out)], capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        raise RuntimeError(f"nfpcapd exited {p.returncode}: {(p.stdout + p.stderr).strip()[-300:]}")
    return flows.read_flows(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--libdir", required=True, help="directory holding weir's libpcap.so.0.8")
    ap.add_argument("--synth-packets", type=int, default=100_000, help="packets of the synthesized trace [100000]")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("exporters: skipped, needs root (a network namespace for softflowd and nfcapd)")
        return 0
    for tool in ("softflowd", "nfcapd", "nfdump", "nfpcapd"):
        if shutil.which(tool) is None:
            print(f"exporters: {tool} is missing (scripts/setup installs softflowd and nfdump)")
            return 1
    lib = str(Path(args.libdir).resolve())
    configs = {"weir": [f"LD_LIBRARY_PATH={lib}"], "weir+locality": [f"LD_LIBRARY_PATH={lib}", "WEIR_LOCALITY=8000"]}
    work = Path(tempfile.mkdtemp(prefix="weir-exporters-"))
    ns = flows.Namespace(COLLECTOR)
    bad = checks = 0
    try:
        traces = []
        for name in TRACES:
            src = ZEEK / name
            if not src.exists():
                print(f"FAIL missing corpus trace {src}")
                bad += 1
                continue
            if name.endswith(".gz"):
                plain = work / name[:-3]
                plain.write_bytes(gzip.decompress(src.read_bytes()))
                src = plain
            traces.append(src)
        synth = work / "synth.pcap"
        flows.write_pcap(synth, flows.synth_frames(args.synth_packets, 3000))
        traces.append(synth)
        port = 9995
        for trace in traces:
            for tool in ("softflowd", "nfpcapd"):
                run = (lambda env: softflowd(ns, env, trace, port, work)) if tool == "softflowd" else (lambda env: nfpcapd(env, trace, work))
                stock = run([])
                for cfg, env in configs.items():
                    checks += 1
                    try:
                        got = run(env)
                    except (RuntimeError, subprocess.TimeoutExpired) as e:
                        bad += 1
                        print(f"FAIL {tool} {trace.name} {cfg}: {e}")
                        continue
                    same = got == stock
                    # With locality, idle timeouts compare non-monotonic timestamps:
                    # a flow may be cut at another packet, never lose or gain one.
                    totals = flows.flow_totals(got) == flows.flow_totals(stock)
                    ok = same or (cfg == "weir+locality" and totals)
                    bad += not ok
                    note = "" if same else (" (records split differently, per-flow totals equal)" if totals else "\n" + flows.describe(stock, got))
                    print(f"{'ok  ' if ok else 'FAIL'} {tool} {trace.name} {cfg}: {sum(got.values())} flow records, "
                          f"stock {sum(stock.values())}{note}")
    finally:
        ns.close()
        shutil.rmtree(work, ignore_errors=True)
    print(f"exporters: {checks - bad} of {checks} checks passed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
