"""The stream layer (issue 20): `weir streams` against libnids.

libnids is driven by bench/peers/nids_streams.c (modes `stats` and `data`, `-n`
its table size; one JSON object {"packets","streams","bytes","sum",
"elapsed_s","cpu_s"}). Every configuration of a part runs once per round, RUNS
rounds, each round starting one configuration later (the shared machine's speed
drifts over minutes); a figure is the median of its runs. Each trace is read
once beforehand so that it sits in the page cache. Times are whole processes
from outside (start-up included); CPU time is the kernel's accounting of the
finished child (os.wait4: user + system of all its threads), peak RSS its
ru_maxrss as GNU time reports it (/usr/bin/time -f %M; without it, wait4's,
which cannot read below this script's own RSS).

1. Flow statistics: `weir streams --cutoff 0 --stats F TRACE` (1 queue, and 2
   queues as TRACE@0-1) against `nids_streams stats TRACE`: packets/s and CPU
   ns per packet. Also `weir count --json TRACE@0-1`, weir's packet path
   without the stream layer: the bound for any stream layer on that path here. TRACE is `weir synth --packets 2000000 --flows 100000
   --seed 1` (about 98,000 flows open at the peak, 154,000 in all).
2. Stream delivery: `weir streams --stats F TRACE` (every byte, 16 KiB pieces,
   summed so nothing is optimised away) against `nids_streams data TRACE`, same
   figures, plus the bytes each delivered.
3. Concurrency: N = 10^2 ... 10^7 TCP connections open at once, from
   bench/peers/gen_concurrent.c (N handshakes, then one 64-byte segment each
   way, then the FIN exchanges, 8 packets per connection, every round touching
   all N). Below 10^6, the N connections are repeated in epochs to 10^6
   connections (8 million packets), so every N has the same packet mix and
   enough packets to time. Each N runs weir with its defaults (statistics with
   --cutoff 0, and delivery) and libnids with its table raised to hold N
   (`-n` 4N/3 + 16: libnids keeps at most 3/4 of its table), in stats and in
   data mode. Reported: packets/s, CPU ns per packet, peak RSS, `evicted`
   (weir's from --stats; for libnids, established connections its table limit
   closed, NIDS_TIMED_OUT, which nids_streams reports as timed_out), and for
   both the connections and payload bytes missing from what the trace holds
   ("streams lost", "bytes lost"), and the records past the trace's
   connections ("split": a connection weir's full table evicted comes back
   as a new record when it sends again; its bytes are all counted, in two
   records). The last is the measure for libnids: a full
   table evicts its oldest connection, here a half-open one (every SYN comes
   first), which it drops without a word. libnids data mode gives
   every collecting direction a 4 KiB buffer at its first byte, so it needs
   about 8 KiB per open connection: where that does not fit in MemAvailable it
   is skipped, and the reason recorded. A trace that does not fit on the disk
   (with a margin) is not written: the generator feeds the tool through a pipe
   instead (`weir streams -`, libnids reading /dev/stdin), marked "pipe" in the results; the generator's CPU is then not in the tool's CPU figure, but it
   shares the 2 cores, so its wall time is pessimistic.
4. `weir inspect --streams` (the rules matched on each direction's
   reassembled bytes, one alert per match) with a 10 KiB cutoff and without
   one, on the trace of 1 and 2 and on a trace of as many packets with 50
   times fewer flows open at once (`--flows 2000`: long transfers, whose
   bytes past the cutoff are most of the traffic, as in the traffic Scap
   measured), with the locality benchmark's rule set
   (`--group-rules 500`, 25,500 strings in 516 MiB of DFAs; the default 80
   with --quick), per-packet `weir inspect` beside them for reference, and the
   same command on a trace of no packets ("start-up": building the automata),
   all in the same rounds. Reported: median CPU (total, and ns per packet,
   each also net of start-up), the CPU the cutoff saves, the share of stream
   bytes it discards and the share of alerts it keeps (alerts with the cutoff
   / alerts without), next to Scap's 97.6% discarded and 83.6% of matches
   kept (skipped, with a message, when `weir inspect --help` has no
   --streams).

Before every trace, the free disk is checked, and before every run the memory
it is expected to need against MemAvailable; what does not fit is refused with
a message. Results go to bench/results/streams.json (streams-quick.json with
--quick: small sizes, one run, to check the script) and a table is printed.

Until `weir streams` exists (issue 20, branch h20-reasm), the weir side of every
part is reported missing and the script exits 1 after running libnids' side.
WEIR_BIN=path picks the weir binary; NIDS_STREAMS=path a prebuilt libnids peer.
"""
import argparse
import json
import math
import os
import struct
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from common import (RESULTS, ROOT, WEIR, WORK, build_peer, disk_free, gib, log, machine, median,  # noqa: E402
                    mem_available, sh, warm, write_result)
from locality import SWEEP_RULES  # noqa: E402

WEIR = Path(os.environ.get("WEIR_BIN", WEIR))
TIME = Path("/usr/bin/time")
SYNTH_PACKETS, SYNTH_FLOWS = 2_000_000, 100_000
CUTOFF_INSPECT = 10 * 1024
# Part 4 also runs on a trace with as many packets and 50 times fewer flows
# open at once: each flow then sends long enough for synth's heavy-tailed
# sizes to show (long transfers, as in the traffic Scap measured).
LONG_FLOWS = SYNTH_FLOWS // 50
INSPECT_GROUP_RULES = SWEEP_RULES    # the locality benchmark's rule set: 25,500 strings, 516 MiB of DFAs
DFA_PER_GROUP_RULE = 11 << 17        # 1.1 MiB of DFAs per --group-rules step (86 MiB at 80, 516 at 500)
PAYLOAD, SEGMENTS = 64, 1            # gen_concurrent: bytes per segment, segments per direction
PKTS_PER_FLOW = 6 + 2 * SEGMENTS
DISK_MARGIN = 4 << 30                # left free after writing a trace
MEM_MARGIN = 2 << 30                 # left free after a run's expected peak
# What a run is expected to need at most, per open stream, for the memory check:
# libnids: a table slot (4/3 pointers), a struct tcp_stream (288 bytes) and the
# peer's own record of the connection, and in
# data mode 2 x 4 KiB of buffer; weir: a guess, generous (its table and the
# reassembly arena, 1 GiB per queue by default, are bounded by its options).
NIDS_STATS_PER_STREAM = 400
NIDS_DATA_PER_STREAM = 400 + 2 * 4096 + 64
WEIR_PER_STREAM = 1024
WEIR_FIXED = 1 << 30


class Missing(Exception):
    """A tool of the benchmark is not there; the message says which and why."""


def weir_streams_help():
    p = subprocess.run([str(WEIR), "streams", "--help"], capture_output=True, text=True)
    return p.stdout if p.returncode == 0 else None


def weir_inspect_has_streams():
    p = subprocess.run([str(WEIR), "inspect", "--help"], capture_output=True, text=True)
    return p.returncode == 0 and "--streams" in p.stdout


def nids_peer():
    if os.environ.get("NIDS_STREAMS"):
        return Path(os.environ["NIDS_STREAMS"])
    src = ROOT / "bench" / "peers" / "nids_streams.c"
    if not src.exists():
        raise Missing(f"{src.relative_to(ROOT)} is missing (it comes from branch h20-oracle)")
    return build_peer("nids_streams", "nids_streams.c", libs=("-lnids", "-lpcap"))


def nids_table(n):
    """libnids' -n for n connections at once: it keeps at most 3/4 of its table."""
    return 4 * n // 3 + 16


def run(cmd, feed=None, stats=None):
    """Run `cmd` (stdin from the command `feed` through a pipe, if given). Returns
    wall seconds, the child's CPU seconds and peak RSS (from wait4), its stdout
    parsed as JSON if it is any, and the --stats file parsed if `stats` names one."""
    if stats:
        stats.unlink(missing_ok=True)
    out_path, err_path = WORK / "streams-run.out", WORK / "streams-run.err"
    rss_path = WORK / "streams-run.rss"
    rss_path.unlink(missing_ok=True)
    # The peak RSS the kernel reports for a child is never below its parent's at the
    # fork (Linux carries it across exec): under Python that floor is ~30 MiB. GNU
    # time forks the command from a small process and reports its peak (%M, KiB).
    if TIME.exists():
        cmd = [str(TIME), "-o", str(rss_path), "-f", "%M", *cmd]
    gen = None
    with open(out_path, "w") as out, open(err_path, "w") as err:
        t0 = time.perf_counter()
        if feed:
            gen = subprocess.Popen(feed, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
            p = subprocess.Popen(cmd, stdin=gen.stdout, stdout=out, stderr=err)
            gen.stdout.close()
        else:
            p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=err)
        _, status, ru = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        p.returncode = os.waitstatus_to_exitcode(status)
    if gen:
        gen.wait()
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))} failed ({p.returncode}): {err_path.read_text().strip()[-2000:]}")
    rss = ru.ru_maxrss * 1024
    if rss_path.exists():
        rss = int(rss_path.read_text().split()[-1]) * 1024
    text = out_path.read_text().strip()
    try:
        report = json.loads(text.splitlines()[-1]) if text else {}
    except json.JSONDecodeError:
        report = {}
    return {
        "wall_s": wall,
        "cpu_s": ru.ru_utime + ru.ru_stime,
        "maxrss_bytes": rss,
        "report": report,
        "stats": json.loads(stats.read_text()) if stats else None,
    }


def rounds(configs, n_rounds, label, failed=None):
    """Run every config of {name: (cmd, feed, stats)} once per round, rotating the
    order; returns {name: [run, ...]}. With a dict `failed`, a config that fails is
    recorded there (name: message) and dropped; without, its failure is raised."""
    names = list(configs)
    out = {n: [] for n in names}
    for r in range(n_rounds):
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:
            if failed is not None and name in failed:
                continue
            cmd, feed, stats = configs[name]
            try:
                res = run(cmd, feed, stats)
            except RuntimeError as e:
                if failed is None:
                    raise
                failed[name] = str(e)
                log(f"{label} {name} failed: {e}")
                out.pop(name, None)
                continue
            out[name].append(res)
            log(f"{label} round {r + 1}/{n_rounds} {name:22} {res['wall_s']:8.3f} s  "
                f"cpu {res['cpu_s']:7.3f} s  rss {res['maxrss_bytes'] / 2**20:8.1f} MiB")
    return out


def summarise(rs, packets):
    wall = median([r["wall_s"] for r in rs])
    cpu = median([r["cpu_s"] for r in rs])
    s = {
        "median_wall_s": wall,
        "pps": packets / wall,
        "cpu_ns_per_packet": cpu / packets * 1e9,
        "peak_rss_bytes": median([r["maxrss_bytes"] for r in rs]),
    }
    last = rs[-1]
    if last["stats"] is not None:           # weir's --stats
        st = last["stats"]
        s.update({k: st.get(k) for k in ("packets", "evicted", "delivered_bytes", "discarded_bytes",
                                          "dropped_bytes", "gap_bytes")})
        # weir counts a stream per direction; libnids counts connections.
        s["streams"] = st.get("connections")
        s["directions"] = st.get("streams")
        s["self_elapsed_s"] = median([r["stats"].get("elapsed_s", 0) for r in rs])
    else:                                   # nids_streams' JSON
        rep = last["report"]
        s.update({"packets": rep.get("packets"), "streams": rep.get("streams"), "evicted": rep.get("timed_out"),
                  "delivered_bytes": rep.get("bytes"), "sum": rep.get("sum")})
        s["self_elapsed_s"] = median([r["report"].get("elapsed_s", 0) for r in rs])
    return s


def check_memory(need, what):
    avail = mem_available()
    if avail < need + MEM_MARGIN:
        return f"{what} needs about {gib(need)} and MemAvailable is {gib(avail)} (margin {gib(MEM_MARGIN)})"
    return None


def synth_trace(quick, flows=None):
    packets, default_flows = (200_000, 10_000) if quick else (SYNTH_PACKETS, SYNTH_FLOWS)
    flows = flows or default_flows
    trace = WORK / f"streams-synth-{packets}-{flows}.pcap"
    if not trace.exists():
        need = packets * 700          # synth averages ~610 bytes a packet at the default rate
        if disk_free(WORK) < need + DISK_MARGIN:
            sys.exit(f"streams: {trace} needs about {gib(need)} of disk and {gib(disk_free(WORK))} is free")
        log(f"synthesizing {trace}")
        sh([str(WEIR), "synth", "-o", str(trace), "--packets", str(packets), "--flows", str(flows), "--seed", "1"])
    return trace, packets, flows


def part_synth(part, trace, packets, nids, weir_ok, n_rounds):
    """Parts 1 (statistics) and 2 (delivery) on the synth trace."""
    stats = WORK / "streams-stats.json"
    table = nids_table(2 * SYNTH_FLOWS)
    configs = {}
    if nids:
        if part == "stats":
            configs["libnids"] = ([str(nids), "stats", str(trace), "-n", str(table)], None, None)
        else:
            why = check_memory(2 << 30, "libnids data mode on the synth trace")
            if why:
                log(f"skipped libnids data: {why}")
            else:
                configs["libnids"] = ([str(nids), "data", str(trace), "-n", str(table)], None, None)
    if weir_ok:
        why = check_memory(WEIR_FIXED * 2 + SYNTH_FLOWS * 2 * WEIR_PER_STREAM, "weir streams on the synth trace")
        if why:
            log(f"skipped weir: {why}")
        else:
            cut = ["--cutoff", "0"] if part == "stats" else []
            # weir's defaults: --prealloc at libnids' pool (200,000 connections) made
            # these runs slower, not faster (1.45x / 1.92x against 1.74x / 2.41x the run
            # before): it touches more memory at start than the trace's 153,968
            # connections use, and the time of a trace run counts the start.
            for name, src in (("weir-1q", str(trace)), ("weir-2q", f"{trace}@0-1")):
                configs[name] = ([str(WEIR), "streams", *cut, "--stats", str(stats), src], None, stats)
            if part == "stats":
                # weir's packet path without the stream layer (read, steer, deliver, count): the
                # fastest any stream layer on that path could go on this machine.
                configs["weir-count-2q"] = ([str(WEIR), "count", "--json", f"{trace}@0-1"], None, None)
    warm(trace)
    raw = rounds(configs, n_rounds, part)
    summary = {name: summarise(rs, packets) for name, rs in raw.items()}
    if "libnids" in summary:
        for name, s in summary.items():
            s["ratio_pps_to_libnids"] = s["pps"] / summary["libnids"]["pps"]
    return {"commands": {k: [str(a) for a in v[0]] for k, v in configs.items()}, "summary": summary,
            "raw": strip_raw(raw)}


def strip_raw(raw):
    return {k: [{x: r[x] for x in ("wall_s", "cpu_s", "maxrss_bytes")} for r in rs] for k, rs in raw.items()}


def gen_size(flows_total):
    per_flow = (PKTS_PER_FLOW - 2 * SEGMENTS) * (16 + 54) + 2 * SEGMENTS * (16 + 54 + PAYLOAD)
    return 24 + flows_total * per_flow


def part_concurrency(sizes, min_flows, nids, weir_ok, n_rounds, gen, pipe):
    rows = {}
    stats = WORK / "streams-stats.json"
    for n in sizes:
        epochs = max(1, math.ceil(min_flows / n))
        total_flows = n * epochs
        packets = total_flows * PKTS_PER_FLOW
        payload = total_flows * SEGMENTS * PAYLOAD * 2
        size = gen_size(total_flows)
        gen_cmd = [str(gen), "-n", str(n), "-e", str(epochs), "-s", str(SEGMENTS), "-p", str(PAYLOAD)]
        trace = WORK / f"streams-conc-{n}x{epochs}.pcap"
        row = {"concurrent": n, "epochs": epochs, "connections": total_flows, "packets": packets,
               "payload_bytes": payload, "trace_bytes": size, "skipped": {}}
        free = disk_free(WORK)
        if free >= size + DISK_MARGIN and not pipe:
            row["source"] = "file"
            log(f"N={n}: writing {trace} ({gib(size)}, {gib(free)} free)")
            t0 = time.perf_counter()
            sh([*gen_cmd, "-o", str(trace)])
            row["gen_s"] = time.perf_counter() - t0
            feed, nids_src, weir_src = None, str(trace), str(trace)
        else:
            row["source"] = "pipe"
            log(f"N={n}: the generator feeds the tools through a pipe" + ("" if pipe else
                f" (a {gib(size)} trace does not fit in {gib(free)} free, margin {gib(DISK_MARGIN)})"))
            feed, nids_src, weir_src = gen_cmd, "/dev/stdin", "-"
        configs = {}
        if weir_ok:
            why = check_memory(WEIR_FIXED + n * WEIR_PER_STREAM, f"weir streams with {n} streams")
            if why:
                row["skipped"]["weir"] = why
            else:
                configs["weir-stats"] = ([str(WEIR), "streams", "--cutoff", "0", "--stats", str(stats), weir_src],
                                         feed, stats)
                configs["weir-data"] = ([str(WEIR), "streams", "--stats", str(stats), weir_src], feed, stats)
        if nids:
            for mode, per in (("stats", NIDS_STATS_PER_STREAM), ("data", NIDS_DATA_PER_STREAM)):
                why = check_memory(n * per, f"libnids {mode} mode with {n} streams")
                if why:
                    row["skipped"][f"libnids-{mode}"] = why
                else:
                    configs[f"libnids-{mode}"] = ([str(nids), mode, nids_src, "-n", str(nids_table(n))], feed, None)
        for k, why in row["skipped"].items():
            log(f"N={n}: skipped {k}: {why}")
        try:
            if feed is None:
                warm(trace)
            row["failed"] = {}
            raw = rounds(configs, n_rounds, f"N={n}", row["failed"])
        finally:
            trace.unlink(missing_ok=True)
        row["commands"] = {k: [str(a) for a in v[0]] for k, v in configs.items()}
        row["summary"] = {}
        for name, rs in raw.items():
            s = summarise(rs, packets)
            # A connection the table evicted and that sends again comes back
            # as a new record: records past the trace's count are splits, not
            # streams found.
            seen = s.get("streams") or 0
            s["streams_missing"] = max(0, total_flows - seen)
            s["streams_split"] = max(0, seen - total_flows)
            if name.endswith("data"):
                s["payload_missing"] = payload - (s.get("delivered_bytes") or 0)
            row["summary"][name] = s
        row["raw"] = strip_raw(raw)
        rows[str(n)] = row
    return rows


def empty_trace():
    """A pcap of no packets: a run on it costs what every run costs before its
    first packet (building the automata, setting up), which part 4 takes off."""
    path = WORK / "streams-empty.pcap"
    path.write_bytes(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
    return path


def part_inspect(trace, packets, flows, weir_ok, n_rounds, quick):
    """Part 4: `weir inspect --streams` with a 10 KiB cutoff and without, the
    locality benchmark's rules (--group-rules 500; 80, the default, with --quick),
    and per-packet `weir inspect` beside them for reference. CPU is also given
    net of start-up: the median CPU of the same command on a trace of no packets
    (building 516 MiB of DFAs is seconds of CPU that no cutoff can save)."""
    if not weir_ok:
        return {"skipped": "weir streams is missing"}
    if not weir_inspect_has_streams():
        return {"skipped": "weir inspect has no --streams (weir inspect --help): part 4 skipped"}
    group_rules = 80 if quick else INSPECT_GROUP_RULES
    need = group_rules * DFA_PER_GROUP_RULE + WEIR_FIXED + 2 * flows * WEIR_PER_STREAM
    why = check_memory(need, f"weir inspect --streams with --group-rules {group_rules}")
    if why:
        log(f"skipped part 4: {why}")
        return {"skipped": why}
    empty = empty_trace()
    base = [str(WEIR), "inspect", "-q", "--json", "-o", "/dev/null", "--group-rules", str(group_rules)]
    configs = {
        "start-up": [*base, "--streams", str(empty)],
        "streams": [*base, "--streams", str(trace)],
        "streams-cutoff-10k": [*base, "--streams", "--cutoff", str(CUTOFF_INSPECT), str(trace)],
        "packets": [*base, str(trace)],
    }
    warm(trace)
    raw = rounds({k: (v, None, None) for k, v in configs.items()}, n_rounds, "inspect")
    start_cpu = median([r["cpu_s"] for r in raw["start-up"]])
    summary = {}
    for name, rs in raw.items():
        if name == "start-up":
            continue
        rep = rs[-1]["report"]
        wall, cpu = median([r["wall_s"] for r in rs]), median([r["cpu_s"] for r in rs])
        s = {"median_wall_s": wall, "pps": packets / wall, "cpu_ns_per_packet": cpu / packets * 1e9,
             "peak_rss_bytes": median([r["maxrss_bytes"] for r in rs])}
        s.update({"median_cpu_s": cpu, "net_cpu_s": cpu - start_cpu,
                  "net_cpu_ns_per_packet": (cpu - start_cpu) / packets * 1e9,
                  "packets": rep.get("packets"), "alerts": rep.get("alerts"),
                  "self_elapsed_s": median([r["report"].get("elapsed_s", 0) for r in rs])})
        if rep.get("mode") == "streams":
            total = rep["stream_bytes"]
            s.update({"stream_bytes": total, "delivered_bytes": rep["delivered_bytes"],
                      "discarded_bytes": rep["discarded_bytes"],
                      "discarded_share": rep["discarded_bytes"] / total if total else 0.0,
                      "streams": rep["stream_layer"]["streams"], "pieces": rep["stream_layer"]["pieces"]})
        summary[name] = s
    whole, cut = summary["streams"], summary["streams-cutoff-10k"]
    effect = {
        "cutoff_bytes": CUTOFF_INSPECT,
        "cpu_saved_share": 1 - cut["median_cpu_s"] / whole["median_cpu_s"],
        "net_cpu_saved_share": 1 - cut["net_cpu_s"] / whole["net_cpu_s"] if whole["net_cpu_s"] > 0 else None,
        "bytes_discarded_share": cut["discarded_share"],
        "alerts_kept_share": cut["alerts"] / whole["alerts"] if whole["alerts"] else None,
        "scap": {"bytes_discarded_share": 0.976, "matches_kept_share": 0.836},
    }
    return {"commands": configs, "group_rules": group_rules, "start_up_cpu_s": start_cpu,
            "summary": summary, "cutoff_effect": effect, "raw": strip_raw(raw)}


def inspect_table(res, label):
    print(f"\n4. weir inspect on streams, {label}, 10 KiB cutoff and none (--group-rules {res['group_rules']}; "
          f"start-up {res['start_up_cpu_s']:.2f} s of CPU, taken off in 'net')")
    print(f"{'config':20} {'CPU s':>7} {'net CPU s':>9} {'CPU ns/pkt':>10} {'net ns/pkt':>10} "
          f"{'alerts':>9} {'discarded':>9}")
    for name, s in res["summary"].items():
        share = s.get("discarded_share")
        print(f"{name:20} {s['median_cpu_s']:7.2f} {s['net_cpu_s']:9.2f} {s['cpu_ns_per_packet']:10.1f} "
              f"{s['net_cpu_ns_per_packet']:10.1f} {s['alerts']:>9} {'-' if share is None else f'{share:.1%}':>9}")
    e = res["cutoff_effect"]
    pct = lambda v: "-" if v is None else f"{v:.1%}"  # noqa: E731
    print(f"cutoff {e['cutoff_bytes']} bytes: CPU saved {pct(e['cpu_saved_share'])} "
          f"(net of start-up {pct(e['net_cpu_saved_share'])}), stream bytes discarded "
          f"{pct(e['bytes_discarded_share'])}, alerts kept {pct(e['alerts_kept_share'])} "
          f"(Scap: 97.6% discarded, 83.6% of matches kept)")


def table(title, summary, extra=()):
    print(f"\n{title}")
    head = f"{'config':28} {'Mpps':>7} {'CPU ns/pkt':>10} {'peak RSS MiB':>12}"
    for label, _ in extra:
        head += f" {label:>14}"
    print(head)
    for name, s in summary.items():
        line = f"{name:28} {s['pps'] / 1e6:7.2f} {s['cpu_ns_per_packet']:10.1f} {s['peak_rss_bytes'] / 2**20:12.1f}"
        for _, key in extra:
            v = s.get(key)
            line += f" {'-' if v is None else (f'{v:.2f}' if isinstance(v, float) else v):>14}"
        print(line)


# Each part's key in the results.
PART_KEYS = {"stats": ["flow_stats"], "data": ["delivery"], "concurrency": ["concurrency"], "inspect": ["inspect", "inspect_long"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes and one run, to check the script")
    ap.add_argument("--runs", type=int, help="rounds per part (default 5, 1 with --quick)")
    ap.add_argument("--parts", default="stats,data,concurrency,inspect",
                    help="comma-separated subset of stats,data,concurrency,inspect")
    ap.add_argument("--sizes", help="comma-separated concurrencies for part 3 (default 10^2 .. 10^7)")
    ap.add_argument("--pipe", action="store_true",
                    help="part 3: feed every tool from the generator through a pipe, no trace on disk")
    args = ap.parse_args()
    os.nice(10)
    quick = args.quick
    n_rounds = args.runs or (1 if quick else 5)
    parts = args.parts.split(",")
    sizes = [int(float(x)) for x in args.sizes.split(",")] if args.sizes else (
        [100, 1000, 10_000] if quick else [10 ** k for k in range(2, 8)])
    min_flows = 10_000 if quick else 1_000_000
    WORK.mkdir(parents=True, exist_ok=True)

    problems = []
    if not WEIR.exists():
        sys.exit(f"streams: {WEIR} is missing: build it (make build, or set WEIR_BIN)")
    weir_ok = weir_streams_help() is not None
    if not weir_ok:
        problems.append(f"`{WEIR} streams` does not exist: build weir from a branch with issue 20's "
                        "`weir streams` (h20-reasm); the weir side of every part is missing")
    try:
        nids = nids_peer()
    except Missing as e:
        nids = None
        problems.append(f"libnids side missing: {e}")
    for p in problems:
        log(f"streams: {p}")
    if not weir_ok and not nids:
        return 1

    result = {"machine": machine(), "runs": n_rounds, "quick": quick, "weir": str(WEIR),
              "problems": problems}
    trace, packets, flows = synth_trace(quick)
    result["synth_trace"] = {"packets": packets, "flows": flows, "seed": 1, "bytes": trace.stat().st_size}
    if "stats" in parts:
        result["flow_stats"] = part_synth("stats", trace, packets, nids, weir_ok, n_rounds)
        table("1. flow statistics (weir --cutoff 0 / libnids stats)", result["flow_stats"]["summary"],
              [("streams", "streams"), ("x libnids", "ratio_pps_to_libnids")])
    if "data" in parts:
        result["delivery"] = part_synth("data", trace, packets, nids, weir_ok, n_rounds)
        table("2. stream delivery (weir all data / libnids data)", result["delivery"]["summary"],
              [("bytes", "delivered_bytes"), ("x libnids", "ratio_pps_to_libnids")])
    if "concurrency" in parts:
        gen = build_peer("gen_concurrent", "gen_concurrent.c", libs=())
        result["concurrency"] = part_concurrency(sizes, min_flows, nids, weir_ok, n_rounds, gen, args.pipe)
        print("\n3. concurrency (gen_concurrent; 8 packets per connection)")
        print(f"{'N':>9} {'config':14} {'source':6} {'Mpps':>7} {'CPU ns/pkt':>10} {'peak RSS MiB':>12} "
              f"{'evicted':>9} {'streams lost':>12} {'split':>9} {'bytes lost':>11}")
        for n, row in result["concurrency"].items():
            for name, s in row["summary"].items():
                print(f"{n:>9} {name:14} {row['source']:6} {s['pps'] / 1e6:7.2f} {s['cpu_ns_per_packet']:10.1f} "
                      f"{s['peak_rss_bytes'] / 2**20:12.1f} {str(s.get('evicted', '-')):>9} "
                      f"{s['streams_missing']:>12} {s.get('streams_split', 0):>9} {str(s.get('payload_missing', '-')):>11}")
            for name, why in row["skipped"].items():
                print(f"{n:>9} {name:14} skipped: {why}")
            for name, why in row["failed"].items():
                print(f"{n:>9} {name:14} FAILED: {why[-300:]}")
    if "inspect" in parts:
        long_trace, _, long_flows = synth_trace(quick, LONG_FLOWS // (50 if quick else 1))
        for key, (t, f, label) in {"inspect": (trace, flows, f"{flows} flows open"),
                                   "inspect_long": (long_trace, long_flows, f"{long_flows} flows open (long transfers)")}.items():
            result[key] = part_inspect(t, packets, f, weir_ok, n_rounds, quick)
            result[key]["trace"] = {"packets": packets, "flows": f, "seed": 1}
            if "summary" in result[key]:
                inspect_table(result[key], label)
            else:
                print(f"\n4. weir inspect on streams, {label}: {result[key]['skipped']}")
    name = "streams-quick" if quick else "streams"
    # A run of some parts keeps the other parts' figures from the last run
    # (named in "kept_from_earlier_run"), so parts can be measured again alone.
    earlier = RESULTS / f"{name}.json"
    if earlier.exists():
        prev = json.loads(earlier.read_text())
        for part, keys in PART_KEYS.items():
            for key in keys:
                if part not in parts and key in prev:
                    result[key] = prev[key]
                    result.setdefault("kept_from_earlier_run", []).append(key)
    write_result(name, result)
    for p in problems:
        print(f"streams: {p}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
