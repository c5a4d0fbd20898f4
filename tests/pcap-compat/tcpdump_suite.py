#!/usr/bin/env python3
"""Run tcpdump 4.99.3's own test suite (TESTLIST) against a chosen libpcap.

This mimics tcpdump's TESTrun closely enough that a stock libpcap passes the
same tests it passes upstream, so any new failure when --libdir points at
weir's libpcap-compatible build is a compatibility regression.

For every TESTLIST line `name input output options...` we run, from the suite
directory,   TZ=GMT0 tcpdump -# -n -r INPUT OPTIONS
and compare stdout byte for byte with the expected output file.

Standard library only; safe to run while other work is going on (-j bounds it).
"""
import argparse
import concurrent.futures
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

# repo_root/tests/pcap-compat/this_file -> repo_root/../shared/corpus/...
REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_SUITE = REPO_ROOT.parent / "shared" / "corpus" / "tcpdump-4.99.3"


def parse_testlist(path):
    """Yield (lineno, fields) for each test line.

    TESTrun hands the options to a shell, so quoted filter expressions such as
    "geneve && tcp" are one argument; shlex reproduces that.  Comment lines
    start with '#'; blank lines are ignored.  Tests that upstream keeps in
    *.tests files (crypto, smb, printf_z, ...) are not in TESTLIST at all.
    """
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            s = line.strip()
            if not s or s.startswith("#"):
                continue
            try:
                yield lineno, shlex.split(s)
            except ValueError as e:  # unbalanced quotes: report, don't crash
                yield lineno, [s.split()[0], None, None, str(e)]


def first_diff_line(expected, got):
    """1-based number of the first line where two byte strings differ."""
    exp, out = expected.split(b"\n"), got.split(b"\n")
    for i, (a, b) in enumerate(zip(exp, out), 1):
        if a != b:
            return i
    return min(len(exp), len(out)) + 1


def is_benign_stderr(line):
    # TESTrun drops blank lines and the "reading from file X, link-type Y,
    # snapshot length Z" banner; everything else it shows as "passed with
    # error messages" (without failing the test).
    return not line.strip() or line.startswith("reading from file ")


def run_test(test, args, env):
    name, inp, outp, opts = test["name"], test["input"], test["output"], test["options"]
    cmd = [args.tcpdump, "-#", "-n", "-r", inp] + opts
    res = {"name": name, "passed": False, "reason": "", "seconds": 0.0,
           "stderr": [], "command": " ".join(shlex.quote(c) for c in cmd)}
    start = time.monotonic()
    try:
        # cwd=suite so relative input names (and any file named in the
        # options) resolve as they do for TESTrun, and so the stderr banner
        # names the file the same way regardless of where we were started.
        p = subprocess.run(cmd, cwd=args.suite, env=env, stdin=subprocess.DEVNULL,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           timeout=args.timeout)
    except subprocess.TimeoutExpired:
        res["seconds"] = round(time.monotonic() - start, 3)
        res["reason"] = "timeout after %gs" % args.timeout
        return res
    res["seconds"] = round(time.monotonic() - start, 3)
    res["stderr"] = [l for l in p.stderr.decode("utf-8", "replace").splitlines()
                     if not is_benign_stderr(l)]

    reasons = []
    # TESTrun appends an "EXIT CODE ..." / signal trailer to the output of a
    # tcpdump that did not exit 0, so it can never match; no expected .out in
    # 4.99.3 contains such a trailer.  Hence: any non-zero exit is a failure.
    if p.returncode < 0:
        try:
            sig = signal.Signals(-p.returncode).name
        except ValueError:
            sig = str(-p.returncode)
        reasons.append("killed by signal %s" % sig)
    elif p.returncode != 0:
        reasons.append("exit code %d" % p.returncode)
    expected = (Path(args.suite) / outp).read_bytes()
    if p.stdout != expected:
        reasons.append("stdout differs at line %d (%d vs %d bytes expected)"
                       % (first_diff_line(expected, p.stdout), len(p.stdout), len(expected)))
    if res["stderr"] and (args.strict_stderr or reasons):
        # Show stderr as the reason only when it is failing the test or
        # helps explain another failure (e.g. a libpcap error message).
        reasons.append("stderr: %s" % res["stderr"][0][:160])
    strict_fail = bool(args.strict_stderr and res["stderr"])
    res["passed"] = p.returncode == 0 and p.stdout == expected and not strict_fail
    res["reason"] = "; ".join(reasons)
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--libdir", help="directory holding the libpcap to test "
                    "(prepended to LD_LIBRARY_PATH); omitted = system libpcap")
    ap.add_argument("--suite", default=str(DEFAULT_SUITE),
                    help="tcpdump test directory with TESTLIST (default: %(default)s)")
    ap.add_argument("--tcpdump", default="tcpdump", help="tcpdump binary (default: from PATH)")
    ap.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--timeout", type=float, default=30.0, help="seconds per test")
    ap.add_argument("--only", action="append", default=[], metavar="NAME",
                    help="run only this test; repeatable. A value that is not an "
                    "exact test name selects every test whose name contains it")
    ap.add_argument("--strict-stderr", action="store_true",
                    help="fail tests that print anything on stderr besides the "
                    "'reading from file' banner")
    ap.add_argument("--list-failures", action="store_true",
                    help="after the summary, print failing test names, one per line")
    ap.add_argument("--json", metavar="FILE", help="write per-test results to FILE")
    ap.add_argument("--baseline", metavar="FILE", help="JSON results of a stock run; "
                    "exit 1 only for tests it passes that fail now")
    args = ap.parse_args()

    suite = Path(args.suite)
    testlist = suite / "TESTLIST"
    if not testlist.is_file():
        sys.exit("error: tcpdump test suite not found: %s missing (use --suite DIR)" % testlist)
    tcpdump = shutil.which(args.tcpdump)
    if not tcpdump:
        sys.exit("error: tcpdump binary %r not found (install tcpdump or use --tcpdump)" % args.tcpdump)
    args.tcpdump, args.suite = tcpdump, str(suite.resolve())

    env = dict(os.environ)
    env["TZ"] = "GMT0"  # TESTrun sets this; expected timestamps are in GMT
    if args.libdir:
        libdir = Path(args.libdir).resolve()
        if not libdir.is_dir():
            sys.exit("error: --libdir %s is not a directory" % args.libdir)
        if not list(libdir.glob("libpcap.so*")):
            print("warning: no libpcap.so* in %s; tcpdump will use the system "
                  "libpcap" % libdir, file=sys.stderr)
        env["LD_LIBRARY_PATH"] = os.pathsep.join(
            p for p in (str(libdir), os.environ.get("LD_LIBRARY_PATH")) if p)

    # Print which libpcap tcpdump really loads: a mistyped --libdir or a
    # soname mismatch would otherwise silently test the stock library.
    ver = subprocess.run([tcpdump, "--version"], env=env, capture_output=True, text=True)
    lines = (ver.stdout + ver.stderr).splitlines()
    print("%s; %s" % (tcpdump, "; ".join(l for l in lines if "version" in l)))

    tests, skipped = [], []
    for lineno, f in parse_testlist(testlist):
        if len(f) < 3 or f[1] is None:
            skipped.append((f[0], "malformed TESTLIST line %d" % lineno))
            continue
        t = {"name": f[0], "input": f[1], "output": f[2], "options": f[3:]}
        tests.append(t)
    if args.only:
        names = {t["name"] for t in tests}
        exact = {o for o in args.only if o in names}
        subs = [o for o in args.only if o not in names]
        tests = [t for t in tests if t["name"] in exact or any(s in t["name"] for s in subs)]
        skipped = [s for s in skipped if any(o in s[0] for o in args.only)]
        if not tests:
            sys.exit("error: --only matched no test")
    runnable = []
    for t in tests:
        missing = [x for x in (t["input"], t["output"]) if not (suite / x).is_file()]
        if missing:
            skipped.append((t["name"], "missing file %s" % ", ".join(missing)))
        else:
            runnable.append(t)

    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as ex:
        results = list(ex.map(lambda t: run_test(t, args, env), runnable))
    results += [{"name": n, "passed": False, "skipped": True, "reason": r,
                 "seconds": 0.0} for n, r in skipped]

    failed = [r for r in results if not r["passed"] and not r.get("skipped")]
    npass = sum(r["passed"] for r in results)
    for r in results:
        if r.get("skipped"):
            print("SKIP %-40s %s" % (r["name"], r["reason"]))
        elif not r["passed"]:
            print("FAIL %-40s %s" % (r["name"], r["reason"]))
        elif r["stderr"]:  # TESTrun's "passed with error messages"
            print("PASS %-40s (stderr: %s)" % (r["name"], r["stderr"][0][:160]))
    print("%d passed, %d failed, %d skipped of %d"
          % (npass, len(failed), len(skipped), len(results)))
    if args.list_failures:
        for r in failed:
            print(r["name"])

    if args.json:
        with open(args.json, "w") as f:
            json.dump({"tcpdump": tcpdump, "libdir": args.libdir, "version": lines,
                       "strict_stderr": args.strict_stderr, "results": results}, f, indent=1)

    if args.baseline:
        with open(args.baseline) as f:
            base = json.load(f)
        base = base["results"] if isinstance(base, dict) else base
        stock_ok = {r["name"] for r in base if r.get("passed")}
        regressions = [r for r in failed if r["name"] in stock_ok]
        # A skip here of a test stock ran and passed hides a regression too.
        regressions += [r for r in results if r.get("skipped") and r["name"] in stock_ok]
        print("%d regression(s) against %s" % (len(regressions), args.baseline))
        for r in regressions:
            print("REGRESSION %-34s %s" % (r["name"], r["reason"]))
        return 1 if regressions else 0
    return 0 if not failed and not skipped else 1


if __name__ == "__main__":
    sys.exit(main())
