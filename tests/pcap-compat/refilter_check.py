"""A filter replaced while a file is read (refilter.c): on weir the packets
printed before and after pcap_setfilter must be exactly stock libpcap's, and
weir's counters must put the records the filter rejected under "filtered".
Exit 1 on any difference.

    python3 tests/pcap-compat/refilter_check.py --libdir DIR"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import flows  # noqa: E402

SUITE = flows.ROOT.parent / "shared" / "corpus" / "tcpdump-4.99.3"
# (trace, filter before, packets read with it, filter after)
CASES = [
    ("synth", "tcp", 50, "udp"),
    ("synth", "udp", 10, "tcp or udp port 53"),
    ("synth", "ip", 0, "tcp dst port 443"),
    ("synth", "udp dst port 53", 5, "ip"),
    ("ikev2four.pcap", "udp", 3, "udp and greater 300"),
    ("dhcpv6-ia-na.pcap", "ip6", 1, "not udp port 547"),
]


def build(work):
    exe = work / "refilter"
    cc = subprocess.run(["cc", "-O2", "-o", str(exe), str(Path(__file__).with_name("refilter.c")), "-lpcap"], capture_output=True, text=True)
    if cc.returncode != 0:
        sys.exit(f"refilter: cannot build: {cc.stderr.strip()[-400:]}")
    return exe


def records(path):
    return len(flows.read_pcap(path))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--libdir", required=True, help="directory holding weir's libpcap.so.0.8")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="weir-refilter-"))
    exe = build(work)
    synth = work / "synth.pcap"
    flows.write_pcap(synth, flows.synth_frames(3000, 40, seed=3))
    lib = str(Path(args.libdir).resolve())
    bad = 0
    for trace, before, n, after in CASES:
        path = synth if trace == "synth" else SUITE / trace
        argv = [str(exe), "-r", str(path), before, str(n), after]
        stock = subprocess.run(argv, capture_output=True, text=True)
        stats = work / "stats.jsonl"
        stats.unlink(missing_ok=True)
        env = {**os.environ, "LD_LIBRARY_PATH": lib, "WEIR_STATS_FILE": str(stats)}
        weir = subprocess.run(argv, capture_output=True, text=True, env=env)
        same = stock.returncode == weir.returncode == 0 and stock.stdout == weir.stdout
        # Every record was read; those not printed were filtered, here or in the engine.
        total = next((json.loads(line) for line in stats.read_text().splitlines() if '"total"' in line), None) if stats.exists() else None
        printed = len(weir.stdout.splitlines())
        counted = total is not None and total["received"] == records(path) and total["delivered"] == printed \
            and total["filtered"] == records(path) - printed
        ok = same and counted
        bad += not ok
        phases = [sum(1 for line in stock.stdout.splitlines() if line.startswith(f"{k} ")) for k in (1, 2)]
        print(f"{'ok  ' if ok else 'FAIL'} refilter {trace}: {before!r} for {n}, then {after!r}: stock {phases[0]} + {phases[1]} packets, "
              f"weir {'the same' if same else 'differs'}; weir's counters "
              + (f"received {total['received']}, delivered {total['delivered']}, filtered {total['filtered']}" if total else "not reported"))
        if not same:
            print(f"  stock rc {stock.returncode} {stock.stderr.strip()[-200:]}\n  weir rc {weir.returncode} {weir.stderr.strip()[-200:]}")
    print(f"refilter: {len(CASES) - bad} of {len(CASES)} checks passed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
