"""How long must runs of one service be for `weir inspect` to gain? The trace
sorted in windows of W packets, buffer off.

A trace sorted in windows of W packets (each window stably by min(src port,
dst port), keyless packets last) is what an ideal buffer of B = W would
deliver, with none of its costs: no index, no held chunks, packets contiguous
in memory. Against bench/locality.py's buffer at B = W it splits the buffer's
shortfall from the fully sorted trace into what the workload allows at that
batch size (the window) and what the stage costs (the rest).

Runs `weir inspect --group-rules 500` (as the sweep) on the original trace,
the windowed ones and the fully sorted one, in 3 rounds taken in turn; writes
bench/results/locality-window.json.
"""
import json
import os
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import locality  # noqa: E402
from common import RESULTS, log  # noqa: E402

WINDOWS = [int(w) for w in os.environ.get("LOCALITY_WINDOWS", "32000,512000").split(",")]
ROUNDS = int(os.environ.get("LOCALITY_WINDOW_ROUNDS", "3"))


def windowed(files, w):
    path = locality.WORK / f"{locality.STEM}-window{w}.pcap"
    if not path.exists():
        log(f"writing {path}")
        header, records = locality.read_pcap(files["original"])
        out = []
        for i in range(0, len(records), w):
            out.extend(locality.sort_records(records[i:i + w]))
        locality.write_pcap(path, header, out)
    return path


def main():
    files = locality.inputs()
    rules = ["--group-rules", str(locality.SWEEP_RULES)]
    configs = [("original", files["original"], rules)]
    configs += [(f"window{w}", windowed(files, w), rules) for w in WINDOWS]
    configs += [("sorted", files["sorted"], rules)]
    speeds = locality.speed_rounds(configs, ROUNDS)
    off = speeds["original"]
    rows = []
    for name, _, _ in configs:
        runs = speeds[name]
        ratio = statistics.median(x / y for x, y in zip(runs, off))
        rows.append({"trace": name, "pps": statistics.median(runs), "runs": runs, "ratio": ratio})
        print(f"{name:>14}: {statistics.median(runs):8.0f} packets/s, x{ratio:.3f} of the original (median of per-round ratios)")
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "locality-window.json").write_text(json.dumps({"group_rules": locality.SWEEP_RULES, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
