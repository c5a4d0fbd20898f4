"""The rolling buffer under a long paced run: `weir record --budget` must never
let its files exceed the budget, and the newest files must be whole.

A trace from `weir synth` is fed to `weir record -` on standard input, looped
with its timestamps shifted forward on each pass (so packet time keeps going
up, as on a live link), and weir paces it itself (`--mbps`). weir records it
with size rotation (`-C`) under a byte budget (200 MiB by default) for
`--minutes` (10 by default). Every 0.5 s this script lists the output directory
and sums the lengths of its files (what the budget counts; allocated blocks are
reported beside, for information); the largest sum must stay within the budget.
Every 30 s, and at the end, the newest closed files are read to their end with
`weir count` (and `tcpdump -r` when installed): each must read without error.
At the end, the deletions weir said on standard error must match its summary.

    python3 bench/record_budget.py --minutes 1 --weir /work/target-b/debug/weir

With --sensor the recorder is `weir sensor` with the same settings in its
[capture] and [record] tables (the sensor's rolling buffer is the same
code, and says its deletions in the same lines); the result then goes to
bench/results/record-budget-sensor.json.

The result goes to bench/results/record-budget.json. Disk space is checked
first: the budget, the trace and a margin must be free, or the run is refused.
A run that passes removes its files; one that fails leaves them to look at.
"""
import argparse
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

from common import WEIR, WORK, disk_free, gib, log, machine, mem_available, sh, write_result

MIB = 1 << 20


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--minutes", type=float, default=10.0, help="how long to record (default 10)")
    p.add_argument("--budget-mib", type=float, default=200.0, help="the byte budget in MiB (default 200)")
    p.add_argument("--file-mb", type=float, default=20.0, help="-C: each file's size limit in millions of bytes (default 20)")
    p.add_argument("--mbps", type=float, default=64.0, help="pacing of the source in Mbit/s (default 64: 8 MB/s)")
    p.add_argument("--packets", type=int, default=100_000, help="packets in the looped trace (default 100,000)")
    p.add_argument("--interval", type=float, default=0.5, help="seconds between samples of the directory (default 0.5)")
    p.add_argument("--weir", default=str(WEIR), help=f"the weir binary (default {WEIR})")
    p.add_argument("--work", default=str(WORK / "record_budget"), help="where the trace and the files go")
    p.add_argument("--sensor", action="store_true", help="record with weir sensor's [record] instead of weir record")
    return p.parse_args()


def pcap_records(data):
    """The (offset, length) of each record of a pcap file read whole, and its byte order."""
    magic = data[:4]
    if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1"):
        order = "<"
    elif magic in (b"\xa1\xb2\xc3\xd4", b"\xa1\xb2\x3c\x4d"):
        order = ">"
    else:
        raise SystemExit("record_budget: the synthesized trace is not a pcap file")
    out, off = [], 24
    while off + 16 <= len(data):
        incl = struct.unpack_from(order + "I", data, off + 8)[0]
        out.append((off, 16 + incl))
        off += 16 + incl
    return order, out


def feed(trace, pipe, deadline, stats):
    """Write the trace's header once, then its records again and again, each pass
    shifted forward by the trace's span plus a second, until `deadline`."""
    data = bytearray(trace.read_bytes())
    order, records = pcap_records(data)
    first = struct.unpack_from(order + "I", data, records[0][0])[0]
    last = struct.unpack_from(order + "I", data, records[-1][0])[0]
    span = last - first + 1
    try:
        pipe.write(bytes(data[:24]))
        passes = 0
        while time.monotonic() < deadline:
            shift = passes * span
            buf = bytearray()
            for off, length in records:
                rec = bytearray(data[off : off + length])
                sec = struct.unpack_from(order + "I", rec, 0)[0]
                struct.pack_into(order + "I", rec, 0, (sec + shift) & 0xFFFFFFFF)
                buf += rec
                if len(buf) >= 1 << 20:
                    pipe.write(bytes(buf))
                    stats["bytes"] += len(buf)
                    buf.clear()
                    if time.monotonic() >= deadline:
                        break
            if buf and time.monotonic() < deadline:
                pipe.write(bytes(buf))
                stats["bytes"] += len(buf)
            passes += 1
            stats["passes"] = passes
    except BrokenPipeError:
        stats["broken"] = True
    finally:
        try:
            pipe.close()
        except BrokenPipeError:
            pass


def sample(out):
    """(sum of file lengths, sum of allocated bytes, files) of the directory now.
    The listing is one getdents: a set of files that existed together."""
    size = alloc = n = 0
    for e in os.scandir(out):
        try:
            st = e.stat(follow_symlinks=False)
        except FileNotFoundError:  # deleted since the listing
            continue
        size += st.st_size
        alloc += st.st_blocks * 512
        n += 1
    return size, alloc, n


def by_seq(out):
    """The files rec.N.pcap in `out`, oldest first."""
    files = []
    for p in out.iterdir():
        m = re.fullmatch(r"rec\.(\d+)\.pcap", p.name)
        if m:
            files.append((int(m.group(1)), p))
    return [p for _, p in sorted(files)]


def intact(weir, path):
    """None if `path` reads to its end (weir count, and tcpdump -r when there is one),
    else why not; "gone" if it was deleted meanwhile."""
    p = subprocess.run([weir, "count", "--json", str(path)], capture_output=True, text=True)
    if p.returncode != 0:
        return "gone" if not path.exists() else f"weir count: {p.stderr.strip()}"
    report = json.loads(p.stdout)
    if report.get("error"):
        return f"weir count: {report['error']}"
    packets = report["packets"]
    if packets == 0:
        return "no packets"
    if shutil.which("tcpdump"):
        t = subprocess.run(["tcpdump", "-nr", str(path)], capture_output=True, text=True)
        if t.returncode != 0 or "truncated" in t.stderr:
            return "gone" if not path.exists() else f"tcpdump -r: {t.stderr.strip()}"
        lines = t.stdout.count("\n")
        if lines != packets:
            return f"tcpdump read {lines} packets, weir count {packets}"
    return None


def main():
    a = parse_args()
    weir = a.weir
    if not Path(weir).exists():
        raise SystemExit(f"record_budget: no weir binary at {weir} (build it, or name one with --weir)")
    budget = int(a.budget_mib * MIB)
    file_bytes = int(a.file_mb * 1e6)
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    out = work / "out"
    if out.exists():
        shutil.rmtree(out)
    out.mkdir()
    trace = work / "loop.pcap"

    # The trace (about 750 bytes a packet), the budget and 1 GiB to spare.
    need = a.packets * 750 + budget + (1 << 30)
    free = disk_free(work)
    if free < need:
        raise SystemExit(f"record_budget: {gib(free)} free on the disk of {work}, {gib(need)} needed: refused")
    if mem_available() < 4 * a.packets * 750 + (512 << 20):
        raise SystemExit("record_budget: not enough memory available to hold the looped trace: refused")

    log(f"synthesizing {a.packets} packets into {trace}")
    sh([weir, "synth", "-o", str(trace), "--packets", str(a.packets), "--flows", "2000", "--seed", "42"])

    seconds = a.minutes * 60
    mb = f"{budget / 1e6:.6f}"
    if a.sensor:
        config = work / "sensor.toml"
        config.write_text(
            f'[sensor]\nname = "budget"\nstatus-interval = 0\n\n[capture]\nsource = "-"\nmbps = {a.mbps}\n\n'
            f'[record]\nwrite = "{out / "rec.pcap"}"\nfile-size = {a.file_mb}\nbudget = {mb}\n'
        )
        cmd = [weir, "sensor", str(config)]
    else:
        cmd = [weir, "record", "-q", "--mbps", str(a.mbps), "-", "-w", str(out / "rec.pcap"), "-C", str(a.file_mb), "--budget", mb]
    log(f"recording for {a.minutes} min at {a.mbps} Mbit/s: {' '.join(cmd)}")
    weir_proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stderr=subprocess.PIPE, text=False)
    stderr_lines = []
    reader = threading.Thread(target=lambda: stderr_lines.extend(weir_proc.stderr.read().decode(errors="replace").splitlines()))
    reader.start()
    started = time.monotonic()
    fed = {"bytes": 0, "passes": 0}
    feeder = threading.Thread(target=feed, args=(trace, weir_proc.stdin, started + seconds, fed))
    feeder.start()

    samples, over, worst, worst_alloc, checks, damaged = 0, [], 0, 0, 0, []
    next_check = started + 30
    while weir_proc.poll() is None:
        size, alloc, n = sample(out)
        samples += 1
        worst = max(worst, size)
        worst_alloc = max(worst_alloc, alloc)
        if size > budget:
            over.append((round(time.monotonic() - started, 1), size, n))
            log(f"OVER BUDGET: {size} bytes in {n} files")
        if time.monotonic() >= next_check:
            next_check += 30
            closed = by_seq(out)[:-1]
            for f in closed[-2:]:
                why = intact(weir, f)
                if why == "gone":
                    continue
                checks += 1
                if why:
                    damaged.append((f.name, why))
            log(f"[{time.monotonic() - started:6.0f}s] {size / MIB:7.1f} MiB in {n} files (most {worst / MIB:.1f} MiB), fed {fed['bytes'] / 1e6:.0f} MB")
        time.sleep(a.interval)
        if time.monotonic() > started + seconds + 120:
            weir_proc.send_signal(signal.SIGINT)
            raise SystemExit("record_budget: weir record did not end two minutes after its input did")
    feeder.join()
    reader.join()
    code = weir_proc.returncode
    elapsed = time.monotonic() - started
    final = by_seq(out)
    size, alloc, n = sample(out)
    worst = max(worst, size)
    for f in final[-3:]:
        why = intact(weir, f)
        checks += 1
        if why:
            damaged.append((f.name, why))

    deleted = [l for l in stderr_lines if re.match(r"weir record: budget: deleted ", l)]
    failed = [l for l in stderr_lines if "cannot delete" in l]
    said_bytes = sum(int(re.search(r"\((\d+) bytes", l).group(1)) for l in deleted)
    said = r"(?:weir record:|weir sensor budget: \[record\]) deleted"
    summary = next((l for l in stderr_lines if re.match(said + r" \d+ files", l)), "")
    m = re.match(said + r" (\d+) files \((\d+) bytes\)", summary)
    # weir record's "N packets from ..." line, or the sensor's "[record] N packets ...: W written" one.
    written = next((l for l in stderr_lines if " packets from " in l or ("[record]" in l and " written" in l)), "")
    # Said only when something was filtered or dropped (a paced source drops what finds no free cell).
    drops = next((l for l in stderr_lines if " capture drops, " in l), "")
    totals_agree = bool(m) and int(m.group(1)) == len(deleted) and int(m.group(2)) == said_bytes

    result = {
        "machine": machine(),
        "weir": weir,
        "minutes": a.minutes,
        "elapsed_s": round(elapsed, 1),
        "mbps": a.mbps,
        "budget_bytes": budget,
        "file_bytes": file_bytes,
        "fed_bytes": fed["bytes"],
        "trace_passes": fed["passes"],
        "samples": samples,
        "largest_total_bytes": worst,
        "largest_allocated_bytes": worst_alloc,
        "over_budget_samples": over,
        "final_files": n,
        "final_total_bytes": size,
        "files_deleted": len(deleted),
        "bytes_deleted": said_bytes,
        "deletions_failed": len(failed),
        "summary_agrees_with_log": totals_agree,
        "integrity_checks": checks,
        "damaged": damaged,
        "exit_code": code,
        "record_summary": written,
        "record_drops": drops,
        # Every byte written is either deleted or still there.
        "bytes_written": said_bytes + size,
    }
    result["recorder"] = "weir sensor [record]" if a.sensor else "weir record"
    write_result("record-budget-sensor" if a.sensor else "record-budget", result)
    log(
        f"{elapsed:.0f} s, {fed['bytes'] / 1e6:.0f} MB fed, {samples} samples: largest total {worst} bytes "
        f"({worst / MIB:.2f} MiB) of a {budget} byte budget ({a.budget_mib:g} MiB), allocated at most {worst_alloc / MIB:.2f} MiB; "
        f"{len(deleted)} files deleted ({said_bytes / 1e6:.0f} MB), {len(failed)} failed; {checks} integrity checks, "
        f"{len(damaged)} damaged; weir exited {code}"
    )
    problems = []
    if code != 0:
        problems.append(f"{cmd[1]} exited {code}: {stderr_lines[-5:]}")
    if over:
        problems.append(f"the budget was exceeded in {len(over)} samples, first {over[0]}")
    if damaged:
        problems.append(f"damaged files: {damaged}")
    if failed:
        problems.append(f"deletions failed: {failed[:3]}")
    if not deleted:
        problems.append("nothing was deleted: the run was too short or too slow to fill the budget")
    if not totals_agree:
        problems.append(f"the summary ({summary!r}) does not match the {len(deleted)} deletions said ({said_bytes} bytes)")
    for p in problems:
        log(f"FAIL: {p}")
    if problems:
        log(f"the files are left in {out} to look at")
        return 1
    # A passing run leaves nothing on the shared disk.
    shutil.rmtree(out)
    trace.unlink()
    return 0


if __name__ == "__main__":
    sys.exit(main())
