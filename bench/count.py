"""`weir count` against a plain libpcap pcap_next_ex loop on one trace file.

The trace is synthesized (5 million packets, 100,000 concurrent flows, the
built-in traffic model) and read once beforehand so it sits in the page cache.
Each configuration runs RUNS times, interleaved, and we report the median wall
time, packets/s and CPU time per packet, and ratios to libpcap. The filtered
variant uses a 21-instruction expression in both.
"""
import json
import sys

from common import WEIR, WORK, build_peer, log, machine, median, sh, timed, warm, write_result

RUNS = 5
PACKETS = 5_000_000
FLOWS = 100_000
FILTER = "icmp or tcp port 443"  # 21 cBPF instructions (tcpdump -d)


def main():
    WORK.mkdir(parents=True, exist_ok=True)
    trace = WORK / f"count-{PACKETS}.pcap"
    if not trace.exists():
        log(f"synthesizing {trace} ...")
        sh([str(WEIR), "synth", "-o", str(trace), "--packets", str(PACKETS), "--flows", str(FLOWS), "--seed", "7"])
    peer = build_peer("libpcap_count", "libpcap_count.c")
    warm(trace)

    configs = {
        "libpcap": [str(peer), str(trace)],
        "weir-1q": [str(WEIR), "count", "--json", str(trace)],
        "weir-2q": [str(WEIR), "count", "--json", f"{trace}@0-1"],
        "libpcap-filter": [str(peer), str(trace), FILTER],
        "weir-1q-filter": [str(WEIR), "count", "--json", "-f", FILTER, str(trace)],
        "weir-2q-filter": [str(WEIR), "count", "--json", "-f", FILTER, f"{trace}@0-1"],
    }
    runs = {k: [] for k in configs}
    for i in range(RUNS):
        for name, cmd in configs.items():
            wall, cpu, out = timed(cmd)
            r = json.loads(out)
            # The peer reports every packet read and, separately, those its filter matched.
            delivered = r.get("matched", r["packets"])
            runs[name].append({"wall_s": wall, "cpu_s": cpu, "packets": delivered})
            log(f"run {i + 1}/{RUNS} {name:16} {wall:7.3f} s  {r['packets']} packets")

    # Both sides must have seen the same packets, or the comparison means nothing.
    assert {r["packets"] for r in runs["libpcap"]} == {r["packets"] for r in runs["weir-1q"]} == {PACKETS}
    matched = {r["packets"] for r in runs["libpcap-filter"]}
    assert matched == {r["packets"] for r in runs["weir-1q-filter"]} == {r["packets"] for r in runs["weir-2q-filter"]}, matched

    summary = {}
    for name, rs in runs.items():
        wall = median([r["wall_s"] for r in rs])
        cpu = median([r["cpu_s"] for r in rs])
        summary[name] = {
            "median_wall_s": wall,
            "pps": PACKETS / wall,
            "cpu_ns_per_packet": cpu / PACKETS * 1e9,
            "delivered": rs[0]["packets"],
        }
    for name in summary:
        base = "libpcap-filter" if name.endswith("filter") else "libpcap"
        summary[name]["ratio_to_libpcap"] = summary[name]["pps"] / summary[base]["pps"]
    bpf_len = len(sh(["tcpdump", "-d", FILTER]).stdout.strip().splitlines())
    write_result("count", {"trace": {"packets": PACKETS, "flows": FLOWS, "bytes": trace.stat().st_size},
                           "filter": FILTER, "filter_instructions": bpf_len, "runs": RUNS,
                           "machine": machine(), "summary": summary, "raw": runs})
    print(f"{'config':16} {'Mpps':>7} {'x libpcap':>9} {'CPU ns/pkt':>10}")
    for name, s in summary.items():
        print(f"{name:16} {s['pps'] / 1e6:7.2f} {s['ratio_to_libpcap']:9.2f} {s['cpu_ns_per_packet']:10.1f}")


if __name__ == "__main__":
    sys.exit(main())
