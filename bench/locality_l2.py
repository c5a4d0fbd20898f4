"""Locality buffering seen at the L2: cachegrind with its last level set to
this machine's L2 (read from sysfs; 1 MiB, 16-way, 64-byte lines here) instead
of the 32 MiB L3.

bench/locality.py showed that `weir inspect`'s hot automaton states fit the
L3, so "LL misses" there are start-up noise and cannot show what order saves.
The paper's figure is L2 misses; this runs the same steady-state measurement
((run on the 150k-packet prefix - run on 50k) / 100k) with `--LL=L2` for the
buffer off, the buffer at 16k and 8k, and the fully sorted trace, at both rule
set sizes. Writes bench/results/locality-l2.json.
"""
import json
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import locality  # noqa: E402
from common import RESULTS, log  # noqa: E402



def machine_l2():
    """size,ways,line of cpu0's L2 as cachegrind's --LL takes it."""
    base = Path("/sys/devices/system/cpu/cpu0/cache")
    for d in sorted(base.glob("index*")):
        if (d / "level").read_text().strip() == "2":
            size = (d / "size").read_text().strip()
            n = int(size.rstrip("KMG")) * {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(size[-1], 1)
            return f"{n},{(d / 'ways_of_associativity').read_text().strip()},{(d / 'coherency_line_size').read_text().strip()}"
    raise SystemExit("no L2 in /sys/devices/system/cpu/cpu0/cache: set LOCALITY_L2=size,ways,line")


L2 = os.environ.get("LOCALITY_L2") or machine_l2()


def with_l2(cmd_for):
    # cachegrind_raw puts the command after its own options, so a leading option
    # here is still cachegrind's, not the program's.
    return lambda t: [f"--LL={L2}", *cmd_for(t)]


def main():
    files = locality.inputs()
    rows = []
    jobs = []
    with ThreadPoolExecutor(max_workers=int(os.environ.get("LOCALITY_JOBS", "2"))) as pool:
        for g in locality.GROUP_RULES:
            rules = ["--group-rules", str(g)]
            for name, extra, sorted_ in [("off", [], False), ("8000", locality.sweep_extra(8000), False),
                                         ("16000", locality.sweep_extra(16000), False), ("sorted", [], True)]:
                cmd_for = with_l2(lambda t, e=rules + extra: locality.inspect_cmd(t, e))
                row = {"group_rules": g, "config": name}
                rows.append(row)
                jobs.append((row, pool.submit(locality.cachegrind, cmd_for, files, sorted_)))
        for row, job in jobs:
            row.update(job.result())
            log(f"L2 cachegrind: {row}")
    out = {"l2": L2, "cachegrind_packets": [locality.CG_SHORT, locality.CG_LONG], "rows": rows}
    (RESULTS / "locality-l2.json").write_text(json.dumps(out, indent=2) + "\n")
    for r in rows:
        print(f"{r['group_rules']:>5} {r['config']:>7}  instr {r['instr']:9.0f}  L1d {r['l1d']:7.1f}  L2 {r['ll']:7.2f}")


if __name__ == "__main__":
    main()
