"""Does a larger rule set make order matter at the last level? Cachegrind's
steady-state misses per packet (as bench/locality.py measures them) of
`weir inspect` on the original and the fully sorted trace, with the last level
modelled as this machine's L3 (32 MiB) and as its L2 (read from sysfs), for
rule sets beyond the sweep's: --group-rules 1000 (51,000 strings, 1 GiB of
DFAs) and 2000 (102,000 strings, 2 GiB).

bench/locality.py finds the L3 misses of the sweep's rule sets (80 and 500)
about the same in any order: what the traffic touches of the automata fits the
L3. If it still fits at 2 GiB of DFAs, the size of the tables is not what
decides it, but how deep into them the traffic walks. Writes
bench/results/locality-rules.json.
"""
import json
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import locality  # noqa: E402
import locality_l2  # noqa: E402
from common import RESULTS, log  # noqa: E402

RULES = [int(g) for g in os.environ.get("LOCALITY_RULES", "2000").split(",")]


def main():
    files = locality.inputs()
    rows, jobs = [], []
    with ThreadPoolExecutor(max_workers=int(os.environ.get("LOCALITY_JOBS", "2"))) as pool:
        for g in RULES:
            for level in ("L3", "L2"):
                for name in ("original", "sorted"):
                    cmd_for = lambda t, g=g: locality.inspect_cmd(t, ["--group-rules", str(g)])  # noqa: E731
                    if level == "L2":
                        cmd_for = locality_l2.with_l2(cmd_for)
                    row = {"group_rules": g, "level": level, "trace": name}
                    rows.append(row)
                    jobs.append((row, pool.submit(locality.cachegrind, cmd_for, files, name == "sorted")))
        for row, job in jobs:
            row.update(job.result())
            log(f"cachegrind: {row}")
    out = {"l2": locality_l2.L2, "cachegrind_packets": [locality.CG_SHORT, locality.CG_LONG], "rows": rows}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "locality-rules.json").write_text(json.dumps(out, indent=1) + "\n")
    for r in rows:
        print(f"{r['group_rules']:>5} {r['level']} {r['trace']:>8}  instr {r['instr']:8.0f}  L1d {r['l1d']:6.1f}  LL {r['ll']:6.2f}")


if __name__ == "__main__":
    main()
