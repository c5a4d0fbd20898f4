"""What a packet timestamp costs (issue 22): nanoseconds per read of each clock
weir can stamp packets with, from crates/weir/examples/clock_cost.rs.

- tsc_clock: weir's TSC clock (`--timestamps tsc`, afxdp's default where the
  TSC is invariant): rdtsc, a multiply and a shift per packet, and a resync
  check once per batch.
- clock_gettime_realtime: CLOCK_REALTIME through the vDSO (`--timestamps
  clock` on afxdp reads it once per batch of up to 64 packets, which share it).
- rdtsc: the bare instruction under both (in a VM, its own cost is the host's).
- kernel: afpacket's packets carry the time the kernel took in its receive
  path (one CLOCK_REALTIME read per packet in softirq, for every packet
  socket); it is not charged to weir's threads and cannot be timed from user
  space, so it is listed without a figure.

    python3 bench/clock.py          results in bench/results/clock.json
"""
import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from common import ROOT, log, machine, write_result  # noqa: E402


def main():
    p = subprocess.run(["cargo", "run", "-q", "--release", "-p", "weir", "--example", "clock_cost"], cwd=ROOT,
                       capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"clock_cost failed: {p.stderr.strip()[-400:]}")
    r = json.loads(p.stdout.strip().splitlines()[-1])
    ns = r["ns_per_read"]
    rows = [("tsc_clock (per packet)", ns["tsc_clock"]), ("clock_gettime REALTIME, vDSO (per batch)", ns["clock_gettime_realtime"]),
            ("rdtsc alone", ns["rdtsc"]), ("kernel (afpacket, in softirq)", None)]
    print(f"{'clock':44} ns/read")
    for name, v in rows:
        print(f"{name:44} {'-' if v is None else f'{v:.1f}'}")
    if ns["tsc_clock"]:
        log(f"the TSC clock costs {ns['clock_gettime_realtime'] / ns['tsc_clock']:.2f}x less than clock_gettime here")
    write_result("clock", {"machine": machine(), **r, "kernel": "per packet in the kernel's receive path; not charged to weir"})


if __name__ == "__main__":
    main()
