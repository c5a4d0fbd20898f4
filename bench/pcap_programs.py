"""Unmodified libpcap programs on weir's libpcap against the system libpcap,
reading a synthesized trace: tcpdump (decoding every packet to text) and
softflowd -r (a flow exporter, NetFlow v9 to nfcapd inside a namespace of our
own). Each runs on stock libpcap, on weir, and on weir with locality
buffering (WEIR_LOCALITY=8000); configurations are taken in turn, RUNS times,
and the medians of CPU seconds (user + system, every thread) and wall seconds
are reported, with CPU per packet as a ratio to stock.

    make pcap-lib && python3 bench/pcap_programs.py [--packets N] [--flows F]

Writes bench/results/pcap-programs.json. The live loss-free rate of tcpdump on
weir is bench/live.py's `tcpdump-on-weir` and `tcpdump-on-weir-locality`.
"""
import argparse
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests" / "pcap-compat"))
from common import WEIR, WORK, log, machine, median, sh, timed, warm, write_result  # noqa: E402
import flows  # noqa: E402

RUNS = 5
PCAP_LIB = WEIR.parent.parent / "weir-pcap"
CONFIGS = {"stock": [], "weir": [f"LD_LIBRARY_PATH={PCAP_LIB}"], "weir+locality": [f"LD_LIBRARY_PATH={PCAP_LIB}", "WEIR_LOCALITY=8000"]}
COLLECTOR = "198.18.254.1"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--packets", type=int, default=1_000_000)
    ap.add_argument("--flows", type=int, default=20_000)
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench/pcap_programs.py needs root (a namespace for softflowd's collector)")
    if not (PCAP_LIB / "libpcap.so.0.8").exists():
        sys.exit(f"no {PCAP_LIB}/libpcap.so.0.8: run make pcap-lib")
    WORK.mkdir(parents=True, exist_ok=True)
    trace = WORK / f"programs-{args.packets}-{args.flows}.pcap"
    if not trace.exists():
        log(f"synthesizing {trace.name}")
        sh([str(WEIR), "synth", "-o", str(trace), "--packets", str(args.packets), "--flows", str(args.flows), "--seed", "1"])
    warm(trace)
    ns = flows.Namespace(COLLECTOR)
    programs = {
        "tcpdump": lambda env: ns.argv(["env", *env, "tcpdump", "-n", "-r", str(trace)]),
        "softflowd": lambda env: ns.argv(["env", *env, "softflowd", "-d", "-r", str(trace), "-m", "262144", "-v", "9",
                                          "-n", f"{COLLECTOR}:9995", "-c", "none", "-p", str(WORK / "sf.pid")]),
    }
    results = {}
    try:
        col = flows.Collector(ns.argv, COLLECTOR, 9995)
        for prog, argv in programs.items():
            samples = {c: [] for c in CONFIGS}
            for run in range(RUNS):
                for cfg, env in CONFIGS.items():
                    wall, cpu, _ = timed(argv(env))
                    samples[cfg].append((wall, cpu))
                    log(f"{prog} {cfg} run {run + 1}: {wall:.2f} s wall, {cpu:.2f} s CPU")
            res = {}
            for cfg, xs in samples.items():
                res[cfg] = {"wall_s": median([w for w, _ in xs]), "cpu_s": median([c for _, c in xs]),
                            "cpu_ns_per_packet": median([c for _, c in xs]) / args.packets * 1e9}
            for cfg in CONFIGS:
                res[cfg]["cpu_vs_stock"] = res[cfg]["cpu_s"] / res["stock"]["cpu_s"]
                res[cfg]["wall_vs_stock"] = res[cfg]["wall_s"] / res["stock"]["wall_s"]
            results[prog] = res
        col.flows()
    finally:
        ns.close()
    for prog, res in results.items():
        for cfg, r in res.items():
            log(f"{prog:10} {cfg:14} CPU {r['cpu_ns_per_packet']:7.0f} ns/packet (x{r['cpu_vs_stock']:.2f} of stock), "
                f"wall {r['wall_s']:.2f} s (x{r['wall_vs_stock']:.2f})")
    write_result("pcap-programs", {"machine": machine(), "trace": trace.name, "packets": args.packets, "flows": args.flows,
                                   "runs": RUNS, "results": results})


if __name__ == "__main__":
    main()
