"""The stream layer's cost over the packet path (issue 44), on the `make demo`
trace (`weir synth --packets 2000000 --flows 100000 --seed 1`, one queue):

- `weir count` (the packet path: read, steer, deliver, count), the bound;
- `weir flows -w /dev/null` (flow records, IPFIX-encoded, written nowhere);
- `weir streams --cutoff 0` (stream statistics, no payload);
- `weir streams --cutoff 0 --json` to /dev/null (the same, plus a JSON line
  per closed stream).

Then the queues: `weir streams --cutoff 0` and `weir flows -w /dev/null` on
TRACE@0-1, 2 queues (3 engine threads and the trace's populate thread on 2
CPUs) against 1 queue, in wall time. Each thread's CPU per packet comes from
`weir profile --json` runs of the same commands (its per-thread CPU clocks;
what no engine thread did, the main thread and flows' exporter, is "other").
On 2 CPUs no run can take less wall time than max(sum / 2, busiest thread)
of its threads' CPU: the bound. The speedup the bound allows is 1 queue's
bound over 2 queues', and reported beside the speedup measured (medians).

Also one queue with capture and worker on one thread (`--inline`: the
capture thread hands each chunk to the handler itself), and with both
threads on one CPU (`taskset -c 1`), where they take turns.

Each round runs every command once, in turn, RUNS rounds (5 by default); a
figure is the median of its runs. CPU is user + system time of the finished
process (its every thread), wall time beside it. Reported: CPU ns per packet,
its ratio to `weir count`'s (of the medians, and the median of each round's
ratio to the count run of the same threading, with the ns a packet added
over it), and the CPU of a JSON stream record: (CPU with
--json - CPU without) / streams closed, the two runs of a round paired.

The trace is read into the page cache before every round (the cache here is
reclaimed within minutes). Results: bench/results/lean.json.

usage: bench/lean.py [--runs N]
"""
import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import WEIR, WORK, log, machine, sh, timed, warm, write_result  # noqa: E402

RUNS = 5
SYNTH = ["--packets", "2000000", "--flows", "100000", "--seed", "1"]
PACKETS = 2_000_000


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=RUNS)
    args = ap.parse_args()
    if not WEIR.exists():
        sys.exit(f"bench/lean.py: {WEIR} is missing: build it (make build, or set CARGO_TARGET_DIR)")
    WORK.mkdir(parents=True, exist_ok=True)
    trace = WORK / "demo.pcap"
    if not trace.exists():
        log(f"synthesizing {trace}")
        sh([str(WEIR), "synth", "-o", str(trace), *SYNTH])
    stats = WORK / "lean-stats.json"
    t = str(trace)
    commands = {
        "count": [str(WEIR), "count", "--json", t],
        "flows": [str(WEIR), "flows", t, "-q", "-w", "/dev/null"],
        "streams": [str(WEIR), "streams", t, "--cutoff", "0", "-q", "--stats", str(stats)],
        "streams-json": ["sh", "-c", f'exec "$0" streams "$1" --cutoff 0 -q --json > /dev/null', str(WEIR), t],
        "streams-2q": [str(WEIR), "streams", f"{t}@0-1", "--cutoff", "0", "-q"],
        "flows-2q": [str(WEIR), "flows", f"{t}@0-1", "-q", "-w", "/dev/null"],
        # One queue with its capture thread, worker and the trace's helper
        # threads all on one CPU: the two take turns on the CPU instead of
        # running side by side.
        "streams-1cpu": ["taskset", "-c", "1", str(WEIR), "streams", t, "--cutoff", "0", "-q"],
        "flows-1cpu": ["taskset", "-c", "1", str(WEIR), "flows", t, "-q", "-w", "/dev/null"],
        # One queue with capture and worker on one thread (--inline): the
        # capture thread hands each chunk to the handler itself.
        "count-inline": [str(WEIR), "count", "--json", "--inline", t],
        "streams-inline": [str(WEIR), "streams", t, "--cutoff", "0", "-q", "--inline"],
        "flows-inline": [str(WEIR), "flows", t, "-q", "-w", "/dev/null", "--inline"],
    }
    # The runs whose threads are profiled, and the timed run each stands for.
    profiled = {
        "streams": ["streams", t, "--cutoff", "0", "-q"],
        "streams-2q": ["streams", f"{t}@0-1", "--cutoff", "0", "-q"],
        "flows": ["flows", t, "-q", "-w", "/dev/null"],
        "flows-2q": ["flows", f"{t}@0-1", "-q", "-w", "/dev/null"],
    }
    threads = {name: [] for name in profiled}
    runs = {name: [] for name in commands}
    streams_closed = None
    for r in range(args.runs):
        warm(trace)
        for name, cmd in commands.items():
            wall, cpu, _ = timed(cmd)
            runs[name].append({"wall_s": wall, "cpu_s": cpu})
            if name == "streams":
                streams_closed = json.loads(stats.read_text())["streams"]
        for name, cmd in profiled.items():
            threads[name].append(thread_cpu(cmd))
        log("  round %d: %s" % (r + 1, ", ".join(f"{n} {v[-1]['cpu_s']:.2f} s" for n, v in runs.items())))
    med = {n: {"cpu_s": statistics.median(x["cpu_s"] for x in v), "wall_s": statistics.median(x["wall_s"] for x in v)}
           for n, v in runs.items()}
    for n, m in med.items():
        m["cpu_ns_per_packet"] = m["cpu_s"] / PACKETS * 1e9
        m["cpu_over_count"] = m["cpu_s"] / med["count"]["cpu_s"]
        # Paired within each round, against the count run of the same
        # threading (count-inline for the inline runs): this host's speed
        # drifts by a third within minutes, and a round's runs share it.
        base = "count-inline" if n.endswith("-inline") else "count"
        pairs = list(zip(runs[n], runs[base]))
        m["cpu_over_count_paired"] = statistics.median(x["cpu_s"] / c["cpu_s"] for x, c in pairs)
        m["added_ns_per_packet_paired"] = statistics.median((x["cpu_s"] - c["cpu_s"]) / PACKETS * 1e9 for x, c in pairs)
    per_record = [(j["cpu_s"] - s["cpu_s"]) / streams_closed * 1e6 for j, s in zip(runs["streams-json"], runs["streams"])]
    # A run's threads depend on how the trace source chose to read (a
    # populate thread, or a walker): a thread a run did not have counts 0.
    split = {n: {k: statistics.median(x.get(k, 0.0) for x in v) for k in sorted(set().union(*v))} for n, v in threads.items()}
    queues = {}
    for layer in ("streams", "flows"):
        one, two = split[layer], split[f"{layer}-2q"]
        bound = one["bound_s"] / two["bound_s"]
        measured = med[layer]["wall_s"] / med[f"{layer}-2q"]["wall_s"]
        queues[layer] = {"threads_1q_ns_per_packet": {k: v / PACKETS * 1e9 for k, v in one.items()},
                         "threads_2q_ns_per_packet": {k: v / PACKETS * 1e9 for k, v in two.items()},
                         "speedup_bound": bound, "speedup_measured": measured, "share_of_bound": measured / bound}
    result = {"machine": machine(), "runs": args.runs, "trace": f"weir synth {' '.join(SYNTH)}", "packets": PACKETS,
              "streams_closed": streams_closed, "median": med, "runs_each": runs,
              "json_us_per_record": statistics.median(per_record), "json_us_per_record_each": per_record,
              "queues": queues, "threads_each": threads}
    write_result("lean", result)
    for n, m in med.items():
        log(f"{n:14} CPU {m['cpu_s']:.2f} s ({m['cpu_ns_per_packet']:.0f} ns/packet, {m['cpu_over_count']:.1f}x count; "
            f"paired {m['cpu_over_count_paired']:.2f}x, {m['added_ns_per_packet_paired']:.0f} ns/packet added), wall {m['wall_s']:.2f} s")
    log(f"a JSON stream record: {result['json_us_per_record']:.2f} us of CPU ({streams_closed} records)")
    for layer, q in queues.items():
        show = lambda d: ", ".join(f"{k} {v:.0f}" for k, v in d.items() if k != "bound_s")
        log(f"{layer}: 1 queue ns/packet {show(q['threads_1q_ns_per_packet'])}; 2 queues {show(q['threads_2q_ns_per_packet'])}")
        log(f"{layer}: 2 queues {q['speedup_measured']:.2f}x faster than 1 in wall time, the bound {q['speedup_bound']:.2f}x: "
            f"{100 * q['share_of_bound']:.0f}% of it")


def thread_cpu(cmd):
    """CPU seconds of each thread of `weir profile --json -- CMD`: capture,
    populate, the workers, and other (the rest of the process: main thread,
    exporter); and the bound on 2 CPUs, max(sum / 2, busiest)."""
    out = sh([str(WEIR), "profile", "--json", "--", *cmd]).stdout
    p = json.loads(out.strip().splitlines()[-1])
    cpu = {}
    for th in p["threads"]:
        name = th["thread"]
        key = "capture" if name.startswith("capture") else name
        cpu[key] = cpu.get(key, 0.0) + th["cpu_ns"] / 1e9
    total = p["total"]["ns_per_packet"] * p["packets"] / 1e9
    cpu["other"] = max(total - sum(cpu.values()), 0.0)
    cpu["bound_s"] = max(sum(cpu.values()) / 2, max(cpu.values()))
    return cpu


if __name__ == "__main__":
    main()
