"""Savefile packets are writable on weir's libpcap, as on stock (writable.c):
every pcap and pcapng trace of the corpus is read through pcap_loop and
pcap_next_ex by a program that writes into every byte of every packet, and
by two handles in step, the first writing before the second reads. The
output (packet counts, hashes of the packets before and after the writes, how
reading ended) must be the same on both libraries, and no trace may change
on disk (weir maps a trace private and copy-on-write).

    python3 tests/pcap-compat/savefile_write_check.py --libdir DIR [-j N]

Exit 1 on any difference."""
import argparse
import concurrent.futures
import hashlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT.parent / "shared" / "corpus"
# Traces per run of the program.
BATCH = 60


def traces():
    kinds = ("*.pcap", "*.pcapng", "*.cap")
    return sorted({p for k in kinds for p in CORPUS.rglob(k) if p.is_file()})


def digest(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def run(exe, files, lib):
    env = {**os.environ, **({"LD_LIBRARY_PATH": str(lib)} if lib else {})}
    p = subprocess.run([str(exe), *map(str, files)], capture_output=True, text=True, errors="replace", env=env, timeout=600)
    return p.returncode, p.stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--libdir", required=True, help="directory holding weir's libpcap.so.0.8")
    ap.add_argument("-j", type=int, default=2, help="programs run at once")
    args = ap.parse_args()
    lib = Path(args.libdir).resolve()
    work = Path(tempfile.mkdtemp(prefix="weir-writable-"))
    exe = work / "writable"
    cc = subprocess.run(["cc", "-O2", "-Wall", "-o", str(exe), str(Path(__file__).with_name("writable.c")), "-lpcap"],
                        capture_output=True, text=True)
    if cc.returncode != 0:
        sys.exit(f"writable: cannot build: {cc.stderr.strip()[-400:]}")
    files = traces()
    before = {f: digest(f) for f in files}
    batches = [files[i:i + BATCH] for i in range(0, len(files), BATCH)]
    with concurrent.futures.ThreadPoolExecutor(args.j) as pool:
        results = list(pool.map(lambda b: (b, run(exe, b, None), run(exe, b, lib)), batches))
    bad = 0
    differing = []
    packets = 0
    for batch, (src, sout), (wrc, wout) in results:
        packets += sum(int(line.split()[1]) for line in sout.splitlines() if line.startswith("  loop: "))
        if (src, sout) != (wrc, wout):
            differing.append((batch, src, sout, wrc, wout))
    for batch, src, sout, wrc, wout in differing[:5]:
        sl, wl = sout.splitlines(), wout.splitlines()
        i = next((i for i, (a, b) in enumerate(zip(sl, wl)) if a != b), min(len(sl), len(wl)))
        trace = next((line for line in reversed(sl[:i + 1]) if not line.startswith(" ")), "?")
        print(f"     {trace}: stock (exit {src}): {sl[i] if i < len(sl) else '(nothing more)'}")
        print(f"     {' ' * len(trace)}  weir  (exit {wrc}): {wl[i] if i < len(wl) else '(nothing more)'}")
    ok = not differing and packets > 0
    bad += not ok
    print(f"{'ok  ' if ok else 'FAIL'} {len(files)} traces written into, packet by packet ({packets} packets), through "
          f"pcap_loop, pcap_next_ex and two handles in step: {len(differing)} of {len(batches)} runs differ from stock")
    changed = [f for f in files if digest(f) != before[f]]
    bad += bool(changed)
    print(f"{'ok  ' if not changed else 'FAIL'} no trace changed on disk: {len(changed)} changed"
          f"{' (' + ', '.join(str(f.relative_to(CORPUS)) for f in changed[:3]) + ')' if changed else ''}")
    print(f"savefile writes: {'all passed' if not bad else f'{bad} failed'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
