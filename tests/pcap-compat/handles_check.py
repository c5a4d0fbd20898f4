"""What weir's libpcap answers about a handle, against stock libpcap, call by
call (getters.c), on every kind of handle that needs no interface (the live
ones are in live_handles_check.py):

- every savefile of the corpus, opened by name and a few through a stream
  (pcap_fopen_offline): every getter and setter, with its error text
  (pcap_fileno is -1 on a savefile; pcap_setnonblock refuses one; the
  version, byte order and link type extension are the file's; ftell of
  pcap_file is where libpcap's stream stands, pcapng included);
- dead handles (pcap_open_dead, micro- and nanosecond) of several link types;
- every corpus file read to its end, and files damaged on purpose (missing,
  a directory, empty, cut inside each header, record and block kind): the
  open error or, packet by packet, the lengths, ftell(pcap_file) and
  pcap_bufsize, then how reading ends, with libpcap's error text;
- argus, which took weir's savefile descriptor for an interface's and gave
  the file up: the same flows as on stock (ra -n), for several traces;
- ettercap -T on pcapng traces, which compares ftell(pcap_file) with the file
  size to find the end: it must find it and exit, as on stock;
- the descriptors a savefile handle holds, read to its end with pcap_file and
  pcap_get_selectable_fd asked for (getters -n): stock holds the file's
  alone, which is also the selectable one; weir the same and at most one
  more, the eventfd its reads wait on (weir reads the file on a thread of its
  own; see crates/weir-pcap/src/handle.rs), and none after pcap_close.

    python3 tests/pcap-compat/handles_check.py --libdir DIR [-j N]

Exit 1 on any difference."""
import argparse
import concurrent.futures
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT.parent / "shared" / "corpus"
ARGUS_TRACES = ["zeek-traces/http/bro.org.pcap", "zeek-traces/dns53.pcap", "zeek-traces/ldap/missing_ldap_logs.pcapng",
                "tcpdump-4.99.3/ikev2four.pcap"]
# pcapng traces whose last packet block ends the file: ettercap finds their
# end (on stock) by ftell(pcap_file) reaching the file size after it.
ETTERCAP_TRACES = ["zeek-traces/ldap/missing_ldap_logs.pcapng", "zeek-traces/redis/django-cloud.pcapng",
                   "zeek-traces/smb/smb2-zero-byte-error-ioctl.pcapng", "tcpdump-4.99.3/of13_ericsson.pcapng"]
# What ettercap prints when ftell(pcap_file) reaches the file's size. (The
# rest of its closing words race its threads, on stock libpcap as well.)
ETTERCAP_END = "End of dump file..."
# The one descriptor a weir savefile handle may hold beyond stock's.
WEIR_OWN_FD = "anon_inode:[eventfd]"
# DLT_EN10MB, DLT_RAW, DLT_LINUX_SLL, DLT_IEEE802_11_RADIO.
DEAD_DLTS = [1, 12, 113, 127]


def traces():
    kinds = ("*.pcap", "*.pcapng", "*.cap", "*.gz")
    return sorted({p for k in kinds for p in CORPUS.rglob(k) if p.is_file()})


def damaged(work):
    """Files cut or changed where libpcap's open and read errors differ."""
    pcap = (CORPUS / "zeek-traces/http/bro.org.pcap").read_bytes()
    ng = (CORPUS / "zeek-traces/ldap/missing_ldap_logs.pcapng").read_bytes()
    cases = {
        "empty": b"", "two-bytes": pcap[:2], "not-a-trace": b"abcdefgh" * 4, "gzip": b"\x1f\x8b\x08\x00" + bytes(40),
        "pcap-header-cut": pcap[:20], "pcap-record-header-cut": pcap[:34], "pcap-record-cut": pcap[:1000],
        "pcapng-probe-cut": ng[:10], "pcapng-shb-cut": ng[:20], "pcapng-before-idb-cut": ng[:200],
        "pcapng-idb-cut": ng[:300], "pcapng-block-header-cut": ng[:345], "pcapng-block-cut": ng[:1000],
        "pcap-archaic": pcap[:4] + b"\x01\x00\x04\x00" + pcap[8:2000],
        "pcapng-trailer": ng[:336] + b"\xff\xff\xff\x7f" + ng[340:],
    }
    out = []
    for name, data in cases.items():
        path = work / f"{name}.trace"
        path.write_bytes(data)
        out.append(path)
    directory = work / "a-directory"
    directory.mkdir()
    return out + [directory, work / "missing.pcap"]


class Runner:
    def __init__(self, exe, lib):
        self.exe, self.lib = str(exe), str(lib)

    def both(self, args):
        """getters' output on stock and on weir."""
        def one(lib):
            env = {**os.environ, **({"LD_LIBRARY_PATH": lib} if lib else {})}
            p = subprocess.run([self.exe, *map(str, args)], capture_output=True, text=True, errors="replace", env=env, timeout=120)
            return p.returncode, p.stdout, p.stderr
        return one(None), one(self.lib)


def compare(runner, cases, jobs):
    """(case, stock, weir) for every case whose output differs."""
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        results = pool.map(lambda args: (args, *runner.both(args)), cases)
        return [(args, s, w) for args, s, w in results if s != w]


def show(differing, limit=5):
    for args, s, w in differing[:limit]:
        print(f"     {' '.join(map(str, args))}:")
        sl, wl = s[1].splitlines(), w[1].splitlines()
        line = next((i for i, (a, b) in enumerate(zip(sl, wl)) if a != b), min(len(sl), len(wl)))
        print(f"       stock: {sl[line] if line < len(sl) else '(no line)'} {s[2].strip()[-150:]}")
        print(f"       weir:  {wl[line] if line < len(wl) else '(no line)'} {w[2].strip()[-150:]}")


def run(argv, lib=None, **kw):
    env = {**os.environ, **({"LD_LIBRARY_PATH": str(lib)} if lib else {})}
    return subprocess.run([str(a) for a in argv], capture_output=True, text=True, errors="replace", env=env, **kw)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--libdir", required=True, help="directory holding weir's libpcap.so.0.8")
    ap.add_argument("-j", type=int, default=2, help="programs run at once")
    args = ap.parse_args()
    lib = Path(args.libdir).resolve()
    work = Path(tempfile.mkdtemp(prefix="weir-handles-"))
    exe = work / "getters"
    cc = subprocess.run(["cc", "-O2", "-Wall", "-o", str(exe), str(Path(__file__).with_name("getters.c")), "-lpcap"],
                        capture_output=True, text=True)
    if cc.returncode != 0:
        sys.exit(f"getters: cannot build: {cc.stderr.strip()[-400:]}")
    runner = Runner(exe, lib)
    files = traces()
    bad = 0

    def report(ok, what):
        nonlocal bad
        bad += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {what}")

    opened = [("-r", f) for f in files] + [("-f", f) for f in files[::50]]
    diff = compare(runner, opened, args.j)
    report(not diff, f"getters on {len(opened)} savefiles ({len(files)} corpus files, {len(files[::50])} also through a stream): "
           f"{len(diff)} differ")
    show(diff)
    dead = [(flag, dlt) for flag in ("-d", "-D") for dlt in DEAD_DLTS]
    diff = compare(runner, dead, args.j)
    report(not diff, f"getters on {len(dead)} dead handles: {len(diff)} differ")
    show(diff)
    broken = damaged(work)
    read = [("-e", f) for f in files + broken]
    diff = compare(runner, read, args.j)
    report(not diff, f"{len(files)} corpus files and {len(broken)} damaged ones read to the end (open error, then per packet "
           f"ftell(pcap_file) and pcap_bufsize, then the end and its error): {len(diff)} differ")
    show(diff)

    def held(out):
        """getters -n: (the other lines, {when: [kinds]})."""
        lines, fds = [], {}
        for line in out.splitlines():
            if line.startswith("descriptors "):
                when, _, listed = line.partition(": ")
                fds[when] = listed.partition(":")[2].split()
            else:
                lines.append(line)
        return lines, fds

    def extra(fds):
        """What the handle holds: its descriptors' kinds less those before the open."""
        kinds = list(fds.get("descriptors with the handle", []))
        for k in fds.get("descriptors before the open", []):
            if k in kinds:
                kinds.remove(k)
        return sorted(kinds)

    counted = [("-n", f) for f in files[::50]]
    wrong = []
    for args, s, w in ((args, *runner.both(args)) for args in counted):
        (slines, sfds), (wlines, wfds) = held(s[1]), held(w[1])
        sx, wx = extra(sfds), extra(wfds)
        beyond = list(wx)
        for k in sx:
            if k in beyond:
                beyond.remove(k)
        closed = wfds.get("descriptors after pcap_close") == wfds.get("descriptors before the open")
        if s[0] != 0 or w[0] != 0 or slines != wlines or not set(sx) <= set(wx) or beyond not in ([], [WEIR_OWN_FD]) or not closed:
            wrong.append((args, sx, wx, slines, wlines))
    report(not wrong, f"descriptors of {len(counted)} savefile handles read to the end: the same selectable one (the "
           f"file's) and at most one more ({WEIR_OWN_FD}) than stock's, none after pcap_close: {len(wrong)} differ")
    for args, sx, wx, slines, wlines in wrong[:3]:
        print(f"     {args[1]}: stock holds {sx}, weir {wx}; stock says {slines}, weir {wlines}")

    for trace in ARGUS_TRACES:
        flows = {}
        for name, l in (("stock", None), ("weir", lib)):
            out = work / f"{name}.argus"
            out.unlink(missing_ok=True)
            a = run(["argus", "-r", CORPUS / trace, "-w", out], l, timeout=60)
            # Without argus's management records, which carry the time of the run.
            flows[name] = run(["ra", "-n", "-r", out, "-", "not", "man"], timeout=60).stdout if a.returncode == 0 and out.exists() else None
        s, w = flows["stock"], flows["weir"]
        report(s is not None and s == w, f"argus -r {trace}: {len(s.splitlines()) - 1 if s else 0} flows on stock, "
               f"{'the same' if s == w else (str(len(w.splitlines()) - 1) + ' flows' if w else 'none')} on weir")

    def ettercap(trace, l):
        try:
            e = run(["ettercap", "-T", "-q", "-r", CORPUS / trace], l, timeout=30)
            return e.returncode, ETTERCAP_END in e.stdout
        except subprocess.TimeoutExpired:
            return "no end within 30 s", False

    for trace in ETTERCAP_TRACES:
        outs, hung = {}, []
        for name, l in (("stock", None), ("weir", lib)):
            outs[name] = ettercap(trace, l)
            if outs[name][0] == "no end within 30 s":
                # ettercap cancels its threads asynchronously at the end of
                # the file, and about 1 run in 5000 hangs at exit on stock
                # libpcap as on weir's (a thread cancelled inside malloc or
                # stdio, or under ettercap's UI lock: teardown_check.py). One
                # such hang is run again; two in a row fail.
                hung.append(name)
                outs[name] = ettercap(trace, l)
        s, w = outs["stock"], outs["weir"]
        report(s == w == (0, True), f"ettercap -T -r {trace} finds the end: stock exit {s[0]}, weir {w[0]}; "
               f"{ETTERCAP_END!r} said by stock: {s[1]}, by weir: {w[1]}"
               + (f" (run again after a hang on {' and '.join(hung)})" if hung else ""))
    print(f"handles: {'all passed' if not bad else f'{bad} failed'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
