"""weir's main job, timed as whole processes: `weir count --json TRACE` on a
synthesized 2-million-packet trace (about 600 bytes a packet, 100,000
concurrent flows), against a plain libpcap pcap_next_ex loop
(bench/peers/libpcap_count.c) and `dd` of the same file to /dev/null (the
floor of reading it at all), on both CPUs and pinned to one (taskset -c 1).

weir runs twice in each setting: with its default (`--trace-access auto`:
read ahead on two CPUs, mapped on one) and with the other way of reading the
trace, so the gain of mapping on one CPU and its loss on two are measured
side by side. Every round runs every configuration once, in turn, with the
trace read once beforehand so it sits in the page cache; we report medians
and the median of the per-round ratios. Then `weir profile` of count on one
CPU, read ahead against mapped: the stage table of each and a stacked-bar PNG.

    python3 bench/main_job.py [--runs N]
"""
import argparse
import json
import sys

from common import RESULTS, WEIR, WORK, build_peer, disk_free, gib, log, machine, median, sh, timed, warm, write_result

PACKETS = 2_000_000
FLOWS = 100_000
ONE_CPU = ["taskset", "-c", "1"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=9, help="rounds, every configuration once in each (default 9)")
    args = ap.parse_args()
    WORK.mkdir(parents=True, exist_ok=True)
    trace = WORK / f"main-{PACKETS}.pcap"
    if not trace.exists():
        need = 1_400_000_000
        if disk_free(WORK) < 2 * need:
            sys.exit(f"main_job: {gib(disk_free(WORK))} free under {WORK}; the trace needs {gib(need)} and room beside it")
        log(f"synthesizing {trace} ...")
        sh([str(WEIR), "synth", "-o", str(trace), "--packets", str(PACKETS), "--flows", str(FLOWS), "--seed", "1"])
    peer = build_peer("libpcap_count", "libpcap_count.c")
    t = str(trace)
    weir = [str(WEIR), "count", "--json"]
    configs = {
        "two CPUs": {
            "weir (auto: read ahead)": weir + [t],
            "weir --trace-access map": weir + ["--trace-access", "map", t],
            "libpcap": [str(peer), t],
            "dd": ["dd", f"if={t}", "of=/dev/null", "bs=1M"],
        },
        "one CPU": {
            "weir (auto: mapped)": ONE_CPU + weir + [t],
            "weir --trace-access read": ONE_CPU + weir + ["--trace-access", "read", t],
            "libpcap": ONE_CPU + [str(peer), t],
            "dd": ONE_CPU + ["dd", f"if={t}", "of=/dev/null", "bs=1M"],
        },
    }
    warm(trace)
    raw = {s: {n: [] for n in c} for s, c in configs.items()}
    for i in range(args.runs):
        # The page cache here is reclaimed within minutes: read the trace again
        # before each round, so every round's runs find it in memory.
        warm(trace)
        for setting, cs in configs.items():
            for name, cmd in cs.items():
                wall, cpu, out = timed(cmd)
                if name != "dd":
                    got = json.loads(out)["packets"]
                    assert got == PACKETS, f"{setting} {name}: {got} packets, not {PACKETS}"
                raw[setting][name].append({"wall_s": wall, "cpu_s": cpu})
                log(f"round {i + 1}/{args.runs} {setting:8} {name:26} {wall:6.3f} s wall {cpu:6.3f} s CPU")

    summary = {}
    for setting, runs in raw.items():
        weir_default = next(n for n in runs if n.startswith("weir ("))
        weir_other = next(n for n in runs if n.startswith("weir --"))
        s = {n: {"median_wall_s": median([r["wall_s"] for r in rs]), "median_cpu_s": median([r["cpu_s"] for r in rs])} for n, rs in runs.items()}

        def paired(a, b):
            return median([x["wall_s"] / y["wall_s"] for x, y in zip(runs[a], runs[b])])

        s["ratios"] = {
            "libpcap wall / weir wall (x libpcap)": paired("libpcap", weir_default),
            "weir wall / dd wall (x the floor)": paired(weir_default, "dd"),
            f"{weir_other} wall / weir wall": paired(weir_other, weir_default),
            f"libpcap wall / {weir_other} wall": paired("libpcap", weir_other),
        }
        summary[setting] = s

    profiles = {}
    for access in ("read", "map"):
        out = sh(ONE_CPU + [str(WEIR), "profile", "--json", "--", "count", "-q", "--trace-access", access, t]).stdout
        profiles[access] = json.loads(out.strip().splitlines()[-1])
        (RESULTS / f"main-job-profile-{access}.json").write_text(json.dumps(profiles[access]) + "\n")
        log(sh(ONE_CPU + [str(WEIR), "profile", "--", "count", "-q", "--trace-access", access, t]).stdout)
    png = RESULTS / "main-job-profile.png"
    sh([str(WEIR), "profile", "--compare", str(RESULTS / "main-job-profile-read.json"), str(RESULTS / "main-job-profile-map.json"), "-o", str(png)])

    write_result("main-job", {"trace": {"packets": PACKETS, "flows": FLOWS, "bytes": trace.stat().st_size}, "runs": args.runs,
                              "machine": machine(), "summary": summary, "raw": raw,
                              "profile_one_cpu_ns_per_packet": {a: {st["stage"]: st["ns_per_packet"] for st in p["stages"]} | {"total": p["total"]["ns_per_packet"]}
                                                                for a, p in profiles.items()}})
    for setting, s in summary.items():
        print(f"\n{setting}")
        for name, v in s.items():
            if name != "ratios":
                print(f"  {name:28} {v['median_wall_s']:6.3f} s wall  {v['median_cpu_s']:6.3f} s CPU")
        for name, r in s["ratios"].items():
            print(f"  {name:48} {r:5.2f}")


if __name__ == "__main__":
    sys.exit(main())
