"""weir's libpcap exports what the system's libpcap.so.0.8 exports, and the
programs that failed on the symbols it lacked run on it as on stock:

- every dynamic symbol the system library defines is defined by weir's, of
  the same kind (function or data), and data symbols of the same size
  (`nm -D`);
- namedb.c prints the data symbols (pcap_version, eproto_db), the name
  lookups weir passes to the system library, and bpf_validate/bpf_filter on
  a compiled program over a corpus trace: the same lines on both;
- tcpprep and tcprewrite (which died on "undefined symbol: pcap_version")
  write the same cache file and the same rewritten trace on both, and
  tcpreplay starts;
- Python's pcapy (which could not be imported: bpf_filter) reads a corpus
  trace through a filter and counts the same packets on both;
- pmacctd with a pre_tag_map of filters (bpf_filter on every packet; it died
  at its first packet) tags exactly the packets tcpdump's filters select.
  Stock pmacctd is no oracle on a file: its plugin process's exit moves the
  file offset it shares with the core's stdio stream, and stock libpcap then
  stops after 12 packets with "invalid packet capture length"; weir reads
  the file on a descriptor of its own;
- argus and pmacctd start under LD_BIND_NOW=1, where every symbol they
  import must resolve at once.

    python3 tests/pcap-compat/symbols_check.py --libdir DIR

Exit 1 on any difference."""
import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT.parent / "shared" / "corpus"
TRACE = CORPUS / "zeek-traces" / "http" / "bro.org.pcap"
SYSTEM_LIB = Path("/usr/lib/x86_64-linux-gnu/libpcap.so.0.8")
# The Python that Debian's python3-pcapy is installed for.
PYTHON = "/usr/bin/python3"
# pmacctd's tags and the filters that give them (first match wins).
TAGS = {1: "tcp and src host 10.0.2.15", 2: "tcp and dst host 10.0.2.15"}


class Checks:
    def __init__(self):
        self.failed = 0

    def report(self, ok, what, detail=""):
        self.failed += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {what}" + (f": {detail}" if detail else ""))


def symbols(lib):
    """name -> (kind, size) of the library's defined dynamic symbols."""
    out = subprocess.run(["nm", "-D", "--defined-only", "-S", str(lib)], capture_output=True, text=True, check=True).stdout
    table = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 4:
            _, size, kind, name = parts
            table[name] = (kind, int(size, 16))
        elif len(parts) == 3:
            _, kind, name = parts
            table[name] = (kind, None)
    return table


def check_symbols(checks, lib):
    stock, weir = symbols(SYSTEM_LIB), symbols(lib / "libpcap.so.0.8")
    missing = sorted(n for n in stock if n not in weir)
    checks.report(not missing, f"every one of the {len(stock)} symbols of {SYSTEM_LIB.name} is exported", ", ".join(missing))
    data = {n: v for n, v in stock.items() if v[0] in "DBR"}
    for name, (kind, size) in sorted(data.items()):
        ours = weir.get(name)
        ok = ours is not None and ours[0] in "DBR" and ours[1] == size
        checks.report(ok, f"data symbol {name}: {kind}, {size} bytes", f"weir's is {ours}")
    wrong_kind = sorted(n for n, (k, _) in stock.items() if n in weir and (k == "T") != (weir[n][0] == "T"))
    checks.report(not wrong_kind, "functions are functions and data is data", ", ".join(wrong_kind))


def run(argv, lib, **kw):
    env = {**os.environ, **kw.pop("env", {})}
    if lib:
        env["LD_LIBRARY_PATH"] = str(lib)
    return subprocess.run([str(a) for a in argv], capture_output=True, text=True, env=env, timeout=120, **kw)


def build(work, name):
    exe = work / name
    src = Path(__file__).with_name(f"{name}.c")
    cc = subprocess.run(["cc", "-O2", "-Wall", "-o", str(exe), str(src), "-lpcap"], capture_output=True, text=True)
    if cc.returncode != 0:
        sys.exit(f"{name}: cannot build: {cc.stderr.strip()[-400:]}")
    return exe


def check_namedb(checks, work, lib):
    exe = build(work, "namedb")
    ethers = work / "ethers"
    ethers.write_text("02:77:65:69:72:01 weir-ethers-test\n# a comment\n02:00:00:00:00:02 second-host\n")
    stock, weir = run([exe, TRACE, ethers], None), run([exe, TRACE, ethers], lib)
    same = stock.returncode == weir.returncode == 0 and stock.stdout == weir.stdout
    lines = len(stock.stdout.splitlines())
    detail = f"{lines} lines" if same else f"stock rc {stock.returncode}, weir rc {weir.returncode}: {weir.stderr.strip()[-300:]}"
    checks.report(same, "namedb: data symbols, name lookups, bpf_validate and bpf_filter", detail)


def check_tcpreplay_tools(checks, work, lib):
    outputs = {}
    # tcpprep writes its command line, the cache file's name included, into the cache.
    cache = work / "tcpprep.cache"
    for name, l in (("stock", None), ("weir", lib)):
        cache.unlink(missing_ok=True)
        rewritten = work / f"rewritten.{name}.pcap"
        prep = run(["tcpprep", "--auto=bridge", f"--pcap={TRACE}", f"--cachefile={cache}"], l)
        rewrite = run(["tcprewrite", f"--infile={TRACE}", f"--outfile={rewritten}", "--dstipmap=0.0.0.0/0:198.18.0.0/16"], l)
        replay = run(["tcpreplay", "--version"], l)
        outputs[name] = (prep.returncode, rewrite.returncode, replay.returncode,
                         cache.read_bytes() if cache.exists() else None, rewritten.read_bytes() if rewritten.exists() else None,
                         (prep.stderr + rewrite.stderr + replay.stderr).strip()[-200:])
    s, w = outputs["stock"], outputs["weir"]
    checks.report(s[:3] == w[:3] == (0, 0, 0), "tcpprep, tcprewrite and tcpreplay run",
                  "" if w[:3] == (0, 0, 0) else f"weir exit codes {w[:3]}: {w[5]}")
    checks.report(s[3] is not None and s[3] == w[3], "tcpprep writes the same cache file")
    checks.report(s[4] is not None and s[4] == w[4], "tcprewrite writes the same trace", f"{len(s[4] or b'')} bytes")


PCAPY = """
import sys, pcapy
r = pcapy.open_offline(sys.argv[1])
r.setfilter(sys.argv[2])
n = 0
while True:
    h, d = r.next()
    if h is None:
        break
    n += 1
print(n, r.datalink())
"""


def check_pcapy(checks, lib):
    stock = run([PYTHON, "-c", PCAPY, TRACE, "tcp and greater 200"], None)
    if stock.returncode != 0:
        checks.report(False, "pcapy on stock libpcap", f"{stock.stderr.strip()[-200:]} (install python3-pcapy: scripts/setup)")
        return
    weir = run([PYTHON, "-c", PCAPY, TRACE, "tcp and greater 200"], lib)
    ok = weir.returncode == 0 and weir.stdout == stock.stdout
    checks.report(ok, "pcapy imports and reads through a filter", f"stock {stock.stdout.strip()}, weir {weir.stdout.strip() or weir.stderr.strip()[-200:]}")


def tcpdump_count(expr):
    out = run(["tcpdump", "-n", "-r", TRACE, expr], None)
    return len(out.stdout.splitlines())


def check_pmacctd(checks, work, lib):
    tagmap = work / "pretag.map"
    tagmap.write_text("".join(f"set_tag={tag} filter='{expr}'\n" for tag, expr in TAGS.items()))
    csv = work / "pmacct.csv"
    conf = work / "pmacctd.conf"
    conf.write_text(f"daemonize: false\npcap_savefile: {TRACE}\npcap_savefile_wait: false\npre_tag_map: {tagmap}\n"
                    f"plugins: print\nprint_output: csv\nprint_output_file: {csv}\nprint_output_file_append: true\n"
                    "print_refresh_time: 1\naggregate: tag\n")
    csv.unlink(missing_ok=True)
    p = run(["pmacctd", "-f", conf], lib)
    counted = {}
    if csv.exists():
        for line in csv.read_text().splitlines()[1:]:
            tag, packets, _bytes = line.split(",")
            counted[int(tag)] = counted.get(int(tag), 0) + int(packets)
    expected = {}
    remaining = None
    for tag, expr in TAGS.items():
        # First match wins: a packet counts for the first filter it passes.
        clause = expr if remaining is None else f"({expr}) and not ({remaining})"
        expected[tag] = tcpdump_count(clause)
        remaining = expr if remaining is None else f"({remaining}) or ({expr})"
    expected = {t: n for t, n in expected.items() if n}
    counted.pop(0, None)
    ok = p.returncode == 0 and counted == expected
    checks.report(ok, "pmacctd tags with a pre_tag_map of filters", f"tcpdump's filters select {expected}, pmacctd on weir tagged {counted}"
                  + ("" if p.returncode == 0 else f", exit {p.returncode}: {(p.stderr + p.stdout).strip()[-200:]}"))


def check_bind_now(checks, work, lib):
    argus = run(["argus", "-r", TRACE, "-w", work / "bindnow.argus"], lib, env={"LD_BIND_NOW": "1"})
    checks.report(argus.returncode == 0, "argus starts under LD_BIND_NOW=1", f"exit {argus.returncode} {argus.stderr.strip()[-200:]}")
    conf = work / "bindnow.conf"
    conf.write_text(f"daemonize: false\npcap_savefile: {TRACE}\npcap_savefile_wait: false\nplugins: print\n"
                    f"print_output_file: {work / 'bindnow.txt'}\naggregate: proto\n")
    pm = run(["pmacctd", "-f", conf], lib, env={"LD_BIND_NOW": "1"})
    unresolved = [line for line in pm.stderr.splitlines() if "symbol lookup error" in line]
    checks.report(pm.returncode == 0 and not unresolved, "pmacctd starts under LD_BIND_NOW=1",
                  f"exit {pm.returncode} {' '.join(unresolved)[-200:]}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--libdir", required=True, help="directory holding weir's libpcap.so.0.8")
    args = ap.parse_args()
    lib = Path(args.libdir).resolve()
    work = Path(tempfile.mkdtemp(prefix="weir-symbols-"))
    checks = Checks()
    check_symbols(checks, lib)
    check_namedb(checks, work, lib)
    check_tcpreplay_tools(checks, work, lib)
    check_pcapy(checks, lib)
    check_pmacctd(checks, work, lib)
    check_bind_now(checks, work, lib)
    print(f"symbols: {'all passed' if not checks.failed else f'{checks.failed} failed'}")
    return 1 if checks.failed else 0


if __name__ == "__main__":
    sys.exit(main())
