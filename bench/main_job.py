"""weir's main job, timed as whole processes: `weir count --json TRACE` on a
synthesized 2-million-packet trace (about 600 bytes a packet, 100,000
concurrent flows), against a plain libpcap pcap_next_ex loop
(bench/peers/libpcap_count.c) and `dd` of the same file to /dev/null (the
floor of reading it at all), on both CPUs and pinned to one (taskset -c 1).

weir runs three times in each setting: with its default (`--trace-access
auto`: the trace mapped, its page tables filled ahead on a thread of their own
where there is a second CPU, and its records walked on a thread of their own
where there is one and the cache holds the trace in large folios), mapped and
walked on the capture thread (`map`), and reading the trace ahead with
read(2), so each step is measured side by side. Every round runs every
configuration once, in turn, with the trace read once beforehand so it sits
in the page cache; we report medians and the median of the per-round ratios.
Then `weir profile` of count, read, mapped and walked, on one CPU and on two:
the stage table of each and a stacked-bar PNG for each setting.

    python3 bench/main_job.py [--runs N] [--cache as-is|fresh|small]

How the page cache holds the trace changes every tool's time: read for the
first time, it sits in large folios (up to 2 MiB, which a mapping can map
whole); the cache here is reclaimed within minutes, and what is read back
later may come in single 4 KiB pages, which makes mapping (a page-table entry
each) and copying (dd, read(2): a folio at a time) dearer alike. --cache says
which state the rounds run in: as-is (default: the trace only read so it is
cached, in whatever state it is), fresh (dropped and read back in order before
each round: the first-read state) or small (dropped and read back 4 KiB at a
time with read-ahead off, once, about 20 s: the worst state; each round then
only reads back what reclaim took meanwhile).
"""
import argparse
import json
import os
import sys

from common import RESULTS, WEIR, WORK, build_peer, disk_free, gib, log, machine, median, sh, timed, warm, write_result

PACKETS = 2_000_000
FLOWS = 100_000
ONE_CPU = ["taskset", "-c", "1"]


def small_pages(path):
    """Put `path` in the page cache in single pages: drop it, then read it
    4 KiB at a time with the kernel's read-ahead off."""
    log(f"reading {path} back into the page cache 4 KiB at a time ...")
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
        while os.read(fd, 4096):
            pass
    finally:
        os.close(fd)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=9, help="rounds, every configuration once in each (default 9)")
    ap.add_argument("--cache", choices=("as-is", "fresh", "small"), default="as-is",
                    help="the page cache's state for the rounds: as found, freshly read (large folios), or in single pages")
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
            "weir (auto)": weir + [t],
            "weir --trace-access read": weir + ["--trace-access", "read", t],
            "weir --trace-access map": weir + ["--trace-access", "map", t],
            "libpcap": [str(peer), t],
            "dd": ["dd", f"if={t}", "of=/dev/null", "bs=1M"],
        },
        "one CPU": {
            "weir (auto)": ONE_CPU + weir + [t],
            "weir --trace-access read": ONE_CPU + weir + ["--trace-access", "read", t],
            "weir --trace-access map": ONE_CPU + weir + ["--trace-access", "map", t],
            "libpcap": ONE_CPU + [str(peer), t],
            "dd": ONE_CPU + ["dd", f"if={t}", "of=/dev/null", "bs=1M"],
        },
    }
    warm(trace)
    if args.cache == "small":
        small_pages(trace)
    fresh = args.cache == "fresh"
    raw = {s: {n: [] for n in c} for s, c in configs.items()}
    order = [(s, n, cmd) for s, c in configs.items() for n, cmd in c.items()]
    for i in range(args.runs):
        # The page cache here is reclaimed within minutes: read the trace again
        # before each round, so every round's runs find it in memory.
        warm(trace, fresh)
        # The first processes after the trace was dropped and read back run
        # slower, whichever they are (weir's first count after it took
        # 0.10-0.21 s where the next took 0.08-0.12; dd and libpcap show it
        # too): one count untimed, and each round starts one configuration
        # further on.
        if fresh:
            sh(weir + [t])
        for setting, name, cmd in order[i % len(order):] + order[:i % len(order)]:
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
            f"weir --trace-access map wall / weir wall": paired("weir --trace-access map", weir_default),
        }
        summary[setting] = s

    profiles = {}
    warm(trace, fresh)
    tag0 = "" if args.cache == "as-is" else f"-{args.cache}"
    for setting, prefix, tag in (("one CPU", ONE_CPU, tag0), ("two CPUs", [], f"{tag0}-2cpu")):
        for access in ("read", "map", "walk"):
            out = sh(prefix + [str(WEIR), "profile", "--json", "--", "count", "-q", "--trace-access", access, t]).stdout
            profiles.setdefault(setting, {})[access] = json.loads(out.strip().splitlines()[-1])
            (RESULTS / f"main-job-profile{tag}-{access}.json").write_text(json.dumps(profiles[setting][access]) + "\n")
            log(f"{setting}, --trace-access {access}:")
            log(sh(prefix + [str(WEIR), "profile", "--", "count", "-q", "--trace-access", access, t]).stdout)
        png = RESULTS / f"main-job-profile{tag}.png"
        sh([str(WEIR), "profile", "--compare"] + [str(RESULTS / f"main-job-profile{tag}-{a}.json") for a in ("read", "map", "walk")] + ["-o", str(png)])

    write_result(f"main-job{tag0}", {"trace": {"packets": PACKETS, "flows": FLOWS, "bytes": trace.stat().st_size}, "runs": args.runs, "cache": args.cache,
                              "machine": machine(), "summary": summary, "raw": raw,
                              "profile_ns_per_packet": {setting: {a: {st["stage"]: st["ns_per_packet"] for st in p["stages"]} | {"total": p["total"]["ns_per_packet"]}
                                                                    for a, p in ps.items()} for setting, ps in profiles.items()}})
    for setting, s in summary.items():
        print(f"\n{setting}")
        for name, v in s.items():
            if name != "ratios":
                print(f"  {name:28} {v['median_wall_s']:6.3f} s wall  {v['median_cpu_s']:6.3f} s CPU")
        for name, r in s["ratios"].items():
            print(f"  {name:48} {r:5.2f}")


if __name__ == "__main__":
    sys.exit(main())
