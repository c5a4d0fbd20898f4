"""Locality buffering on a cache-hungry workload (`weir inspect`), after
Papadogiannakis et al.'s Table 1 and Figures 3 and 4.

Input: `weir synth` trace of 2,000,000 packets with 100,000 concurrent flows
(bench/work/locality-2m.pcap), and the same trace fully sorted by
min(src port, dst port), stably, packets without ports last (what one locality
batch of the whole trace would deliver).

1. The sorted trace: `weir inspect` on the original and on the sorted trace,
   buffer off. Packets/s (weir's own timing of the capture, which leaves out
   building the automata), and from cachegrind instructions, L1 data misses
   and last-level misses per packet.
2. The buffer-size sweep: B = 100 ... 32k on the original trace, the same
   metrics, plus the double-buffered variant at 8k.

   Speed of 1 and 2 is taken in 5 rounds, each running every configuration
   once, in turn: the machine's neighbours share its L3, and its speed drifts
   by 20% and more over minutes, which sequential medians mistook for effects
   of B. Each configuration's figure is the median of its 5 runs, and its
   ratio to the buffer off is the median of the 5 per-round ratios.
3. Overhead: `weir count` on the original trace with and without the buffer
   (median of 15 runs taken in turn, wall time and CPU time of all threads;
   cachegrind instructions per packet).

Cachegrind runs ~50 times slower than the machine, so it measures prefixes of
the trace rather than all 2 million packets, and reports the steady state:
per packet, (run on the first CG_LONG packets - run on the first CG_SHORT) /
(CG_LONG - CG_SHORT). The difference cancels start-up (building the automata,
writing the output) and the compulsory misses of the first touch of every
automaton, which in a short prefix are most of the misses and are the same in
any order. The sorted trace's prefixes are each sorted alone. Its instruction
count is the one callgrind reports (both count executed instructions); its
last level is this machine's 32 MiB L3.

`weir inspect` runs its defaults: one Aho-Corasick DFA per service, holding the
service's rules and the `any` rules (as Snort does unless told to split-any-any),
so every packet is scanned once with a large table of its own service. The
workload's size is set with `--group-rules N` (strings per port group, 49
groups and an `any` group of 2N): it is run at 80 (the default: 4,080 strings,
86 MiB of DFAs) and 500 (25,500 strings, 516 MiB), the sweep at 500. Writes
bench/results/locality.json, locality.csv and locality.png.
"""
import csv
import json
import os
import re
import statistics
import struct
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from common import RESULTS, WEIR, WORK, log, sh, timed, warm  # noqa: E402

# LOCALITY_QUICK=1: a small trace and one run per point, to check the script.
QUICK = os.environ.get("LOCALITY_QUICK") == "1"
PACKETS = 20_000 if QUICK else 2_000_000
FLOWS = 2_000 if QUICK else 100_000
CG_SHORT = 2_000 if QUICK else 50_000
CG_LONG = 6_000 if QUICK else 150_000
RUNS_COUNT = 3 if QUICK else 15
SWEEP = [100, 1000] if QUICK else [100, 500, 1000, 2000, 4000, 8000, 16000, 32000]
GROUP_RULES = [80, 500]
SWEEP_RULES = 500
# Speed runs come in rounds, every configuration once per round, so that the
# machine's drift (its neighbours share the L3) falls on all of them alike.
ROUNDS = 1 if QUICK else 5
# A locality timeout no run reaches (an hour, the most the option takes): under
# cachegrind the capture thread is slow, and batches must fill as they would at
# full speed.
NEVER_MS = "3600000"
STEM = "locality-quick" if QUICK else "locality-2m"


def key(frame):
    """min(sport, dport) of an Ethernet IPv4/IPv6 TCP/UDP frame; None otherwise."""
    if len(frame) < 14:
        return None
    et = struct.unpack_from("!H", frame, 12)[0]
    off = 14
    if et == 0x8100 and len(frame) >= 18:
        et = struct.unpack_from("!H", frame, 16)[0]
        off = 18
    if et == 0x0800 and len(frame) >= off + 20:
        ihl = (frame[off] & 0x0F) * 4
        proto = frame[off + 9]
        frag = struct.unpack_from("!H", frame, off + 6)[0] & 0x1FFF
        if frag:
            return None
        l4 = off + ihl
    elif et == 0x86DD and len(frame) >= off + 40:
        proto = frame[off + 6]
        l4 = off + 40
    else:
        return None
    if proto not in (6, 17) or len(frame) < l4 + 4:
        return None
    s, d = struct.unpack_from("!HH", frame, l4)
    return min(s, d)


def read_pcap(path, limit=None):
    with open(path, "rb") as f:
        header = f.read(24)
        endian = "<" if header[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
        records = []
        while limit is None or len(records) < limit:
            h = f.read(16)
            if len(h) < 16:
                break
            incl = struct.unpack(endian + "IIII", h)[2]
            records.append((h, f.read(incl)))
    return header, records


def write_pcap(path, header, records):
    with open(path, "wb") as f:
        f.write(header)
        for h, data in records:
            f.write(h)
            f.write(data)


def sort_records(records):
    return sorted(records, key=lambda r: (1, 0) if (k := key(r[1])) is None else (0, k))


def inputs():
    WORK.mkdir(parents=True, exist_ok=True)
    trace = WORK / f"{STEM}.pcap"
    if not trace.exists():
        log(f"synthesizing {trace}")
        sh([str(WEIR), "synth", "-o", str(trace), "-n", str(PACKETS), "-c", str(FLOWS)])
    files = {"original": trace}
    prefixes = [("sorted", None)] + [(f"{n}{s}", n) for n in (CG_SHORT, CG_LONG) for s in ("", "-sorted")]
    for name, limit in prefixes:
        path = WORK / f"{STEM}-{name}.pcap"
        files[name] = path
        if path.exists():
            continue
        log(f"writing {path}")
        header, records = read_pcap(trace, limit)
        write_pcap(path, header, sort_records(records) if name.endswith("sorted") else records)
    return files


def inspect_secs(trace, extra):
    p = sh([str(WEIR), "inspect", "-q", str(trace), "-o", "/dev/null", *extra])
    m = re.search(r"(\d+) packets in ([0-9.]+) s", p.stderr)
    return int(m.group(1)), float(m.group(2))


def speed_rounds(configs, rounds):
    """packets/s of every (name, trace, extra) in `configs`, run in turn `rounds`
    times, each round starting one configuration later. Returns {name: [pps per round]}."""
    for t in {t for _, t, _ in configs}:
        warm(t)
    out = {name: [0.0] * rounds for name, _, _ in configs}
    for r in range(rounds):
        shift = r % len(configs)
        for name, trace, extra in configs[shift:] + configs[:shift]:
            n, secs = inspect_secs(trace, extra)
            out[name][r] = n / secs
            log(f"round {r + 1}/{rounds} {name}: {n / secs:.0f} packets/s")
    return out


def cachegrind_raw(cmd):
    p = subprocess.run(["valgrind", "--tool=cachegrind", "--cache-sim=yes", "--cachegrind-out-file=/dev/null", *cmd],
                       text=True, capture_output=True)
    if p.returncode != 0:
        raise RuntimeError(f"cachegrind {cmd}: {p.stderr[-2000:]}")

    def count(label):
        m = re.search(label + r":\s+([0-9,]+)", p.stderr)
        return int(m.group(1).replace(",", ""))
    return {"instr": count(r"I\s+refs"), "l1d": count(r"D1\s+misses"), "ll": count(r"LL misses")}


def cachegrind(cmd_for, files, sorted_=False):
    """Steady-state counts per packet: the run on CG_LONG packets less the run
    on CG_SHORT, over the packets between. `cmd_for(trace)` builds the command."""
    suffix = "-sorted" if sorted_ else ""
    short = cachegrind_raw(cmd_for(files[f"{CG_SHORT}{suffix}"]))
    long_ = cachegrind_raw(cmd_for(files[f"{CG_LONG}{suffix}"]))
    return {k: (long_[k] - short[k]) / (CG_LONG - CG_SHORT) for k in long_}


def with_timeout(extra):
    return [*extra, "--locality-timeout-ms", NEVER_MS] if "--locality" in extra else extra


def inspect_cmd(trace, extra):
    return [str(WEIR), "inspect", "-q", str(trace), "-o", "/dev/null", *with_timeout(extra)]


def count_cmd(trace, extra):
    return [str(WEIR), "count", "-q", str(trace), *with_timeout(extra)]


def sweep_extra(b):
    if b is None:
        return []
    if b == "8000-double":
        return ["--locality", "8000", "--locality-double"]
    return ["--locality", str(b)]


def main():
    from concurrent.futures import ThreadPoolExecutor
    files = inputs()
    out = {"packets": PACKETS, "flows": FLOWS, "cachegrind_packets": [CG_SHORT, CG_LONG], "sorted": {}, "sweep": [], "count": {}}
    # Speed first, one run at a time: nothing else may run on the two cores.
    configs = []
    for g in GROUP_RULES:
        for name in ("original", "sorted"):
            configs.append((f"g{g}-{name}", files[name], ["--group-rules", str(g)]))
    rules = ["--group-rules", str(SWEEP_RULES)]
    sweep = [None, *SWEEP, "8000-double"]
    for b in sweep[1:]:
        configs.append((f"B{b}", files["original"], rules + sweep_extra(b)))
    speeds = speed_rounds(configs, ROUNDS)
    # The sweep's "off" is the original trace at the sweep's rule count.
    off_name = f"g{SWEEP_RULES}-original"
    off = speeds[off_name]
    for g in GROUP_RULES:
        out["sorted"][g] = {}
        for name in ("original", "sorted"):
            runs = speeds[f"g{g}-{name}"]
            out["sorted"][g][name] = {"pps": statistics.median(runs), "runs": runs}
        o, so = out["sorted"][g]["original"]["runs"], out["sorted"][g]["sorted"]["runs"]
        out["sorted"][g]["ratio"] = statistics.median(b / a for a, b in zip(o, so))
        log(f"B1 group-rules {g}: original {statistics.median(o):.0f}, sorted {statistics.median(so):.0f} packets/s, "
            f"median of per-round ratios x{out['sorted'][g]['ratio']:.3f}")
    for b in sweep:
        runs = speeds[off_name if b is None else f"B{b}"]
        ratio = statistics.median(x / y for x, y in zip(runs, off))
        out["sweep"].append({"batch": b or 0, "pps": statistics.median(runs), "runs": runs, "ratio": ratio})
        log(f"B2 B={b}: {statistics.median(runs):.0f} packets/s {runs}, median of per-round ratios to off x{ratio:.3f}")
    counts = (("off", []), ("8000", ["--locality", "8000"]), ("32000", ["--locality", "32000"]))
    warm(files["original"])
    for name, _ in counts:
        out["count"][name] = {"walls": [], "cpus": []}
    # In turn, so drift of the machine's speed falls on every configuration alike.
    for _ in range(RUNS_COUNT):
        for name, extra in counts:
            wall, cpu, _ = timed(count_cmd(files["original"], extra))
            out["count"][name]["walls"].append(wall)
            out["count"][name]["cpus"].append(cpu)
    for name, _ in counts:
        c = out["count"][name]
        c["wall"], c["cpu"] = statistics.median(c["walls"]), statistics.median(c["cpus"])
        log(f"B3 count {name}: wall {c['wall']:.4f} s, cpu {c['cpu']:.4f} s")
    # Then cachegrind, two at a time: its counts do not depend on what else runs.
    with ThreadPoolExecutor(max_workers=2) as pool:
        jobs = []
        for g in GROUP_RULES:
            for name in ("original", "sorted"):
                cmd_for = lambda t, g=g: inspect_cmd(t, ["--group-rules", str(g)])  # noqa: E731
                jobs.append((out["sorted"][g][name], pool.submit(cachegrind, cmd_for, files, name == "sorted")))
        for row in out["sweep"]:
            b = row["batch"] or None
            cmd_for = lambda t, b=b: inspect_cmd(t, rules + sweep_extra(b))  # noqa: E731
            jobs.append((row, pool.submit(cachegrind, cmd_for, files)))
        for name, extra in counts:
            cmd_for = lambda t, extra=extra: count_cmd(t, extra)  # noqa: E731
            jobs.append((out["count"][name], pool.submit(cachegrind, cmd_for, files)))
        for row, f in jobs:
            row.update(f.result())
            log(f"cachegrind: {row}")
    if QUICK:
        summary(out)
        return
    write_results(out)
    summary(out)


def write_results(out):
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "locality.json").write_text(json.dumps(out, indent=1))
    with open(RESULTS / "locality.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["batch", "pps", "instr_per_packet", "l1d_misses_per_packet", "ll_misses_per_packet"])
        for r in out["sweep"]:
            cg = [round(r["instr"]), round(r["l1d"], 2), round(r["ll"], 3)] if "instr" in r else ["", "", ""]
            w.writerow([r["batch"], round(r["pps"]), *cg])
    plot(out)


def plot(out):
    try:
        import matplotlib
    except ImportError:
        log("installing matplotlib for the plot")
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "matplotlib"], check=True)
        import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    off = out["sweep"][0]
    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    for ax, field, label in zip(axes, ("pps", "l1d", "ll"), ("packets/s", "L1d misses / packet", "LL misses / packet")):
        rows = [r for r in out["sweep"] if isinstance(r["batch"], int) and r["batch"] > 0 and field in r]
        ax.plot([r["batch"] for r in rows], [r[field] for r in rows], "o-", label="locality buffer")
        ax.axhline(off[field], color="gray", ls="--", label="buffer off")
        full = out["sorted"].get(SWEEP_RULES, out["sorted"].get(str(SWEEP_RULES), {})).get("sorted", {})
        if field in full:
            ax.axhline(full[field], color="green", ls=":", label="trace fully sorted")
        ax.set_xscale("log")
        ax.set_xlabel("batch size B (packets)")
        ax.set_ylabel(label)
        ax.legend()
    fig.suptitle(f"weir inspect, {SWEEP_RULES * 51:,} strings in 50 port groups, 2M packets, 100k concurrent flows")
    fig.tight_layout()
    fig.savefig(RESULTS / "locality.png", dpi=110)
    log(f"wrote {RESULTS / 'locality.png'}")


def summary(out):
    for g, row in out["sorted"].items():
        o, s = row["original"], row["sorted"]
        print(f"group-rules {g}: sorted/original speed x{row['ratio']:.3f} (median of per-round ratios); instr {o['instr']:.0f} -> {s['instr']:.0f}; "
              f"L1d {o['l1d']:.1f} -> {s['l1d']:.1f}; LL {o['ll']:.2f} -> {s['ll']:.2f} per packet")
    off = out["sweep"][0]
    for r in out["sweep"][1:]:
        cg = f", L1d {r['l1d']:.1f} (off {off['l1d']:.1f}), LL {r['ll']:.2f} (off {off['ll']:.2f})" if "ll" in r else ""
        print(f"B={r['batch']}: speed x{r['ratio']:.3f} (median of per-round ratios){cg}")
    c = out["count"]
    for name in ("8000", "32000"):
        print(f"count overhead at B={name}: wall {100 * (c[name]['wall'] / c['off']['wall'] - 1):+.1f}%, "
              f"cpu {100 * (c[name]['cpu'] / c['off']['cpu'] - 1):+.1f}%, "
              f"instructions {100 * (c[name]['instr'] / c['off']['instr'] - 1):+.1f}%")


if __name__ == "__main__":
    main()
