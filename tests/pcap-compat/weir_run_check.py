"""`weir run` with tcpdump on corpus traces: the same output as stock libpcap
(the same lines in any order with locality buffering, which reorders across
flows), and weir's counters, reported at exit, that add up to the packets
tcpdump printed. Then a SIGTERM sent to weir run alone must reach the program,
which stops as it chooses while weir run waits for it; and a pool larger than
the memory available is refused by the library with weir's message, which the
program reports, instead of an abort. Exit 1 on any difference."""
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SUITE = ROOT.parent / "shared" / "corpus" / "tcpdump-4.99.3"
WEIR = Path(os.environ.get("WEIR_BIN", ROOT / "target" / "release" / "weir"))
TRACES = ["ikev2four.pcap", "mpls-ldp-hello.pcap", "tcp_header_heapoverflow.pcap", "dhcpv6-ia-na.pcap", "isis-infinite-loop.pcap"]


def tcpdump(prefix, trace):
    p = subprocess.run([*prefix, "tcpdump", "-n", "-tt", "-r", str(SUITE / trace)], capture_output=True, text=True,
                       errors="replace", env={"TZ": "GMT0", "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"})
    return p.returncode, p.stdout.splitlines(), p.stderr


def sigterm_reaches_the_program():
    """A shell that says when it got SIGTERM and exits 3; SIGTERM goes to weir
    run's pid only (as from kill or a service manager)."""
    script = 'trap "echo got-term; exit 3" TERM; echo ready; while :; do sleep 0.05; done'
    p = subprocess.Popen([str(WEIR), "run", "--", "sh", "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    ready = p.stdout.readline().strip() == "ready"
    time.sleep(0.2)
    p.send_signal(signal.SIGTERM)
    try:
        out, err = p.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        # The shell too, or it holds the pipes open.
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        err += "\n(weir run still running 10 s after SIGTERM: killed)"
    ok = ready and p.returncode == 3 and "got-term" in out and "weir: the program opened no capture" in err
    print(f"{'ok  ' if ok else 'FAIL'} SIGTERM to weir run reaches the program: exit {p.returncode} (want 3), "
          f"program {'got' if 'got-term' in out else 'did not get'} it{'' if ok else '; ' + err.strip()[-200:]}")
    return ok


def a_pool_beyond_memory_is_refused():
    """WEIR_POOL (here through --pool) one chunk of 128 MiB more than what is
    available holds: pcap_open_offline fails with the memory budget's message,
    tcpdump prints it and exits 1. It used to abort the program (SIGABRT)."""
    avail = next(int(l.split()[1]) * 1024 for l in open("/proc/meminfo") if l.startswith("MemAvailable:"))
    pool = f"65536,{min(avail // (128 << 20) + 2, 1 << 20)}"
    rc, out, err = tcpdump([str(WEIR), "run", "--pool", pool, "--"], TRACES[0])
    ok = rc == 1 and "needs" in err and "available" in err and f"pool {pool}" in err and not out
    print(f"{'ok  ' if ok else 'FAIL'} a pool of {pool} is refused before it is allocated: exit {rc} (want 1)"
          f"{'' if ok else '; ' + err.strip()[-300:]}")
    return ok


def main():
    bad = 0
    for trace in TRACES:
        if not (SUITE / trace).exists():
            print(f"missing {trace}")
            bad += 1
            continue
        rc0, stock, _ = tcpdump([], trace)
        for extra in ([], ["--locality", "8"]):
            rc, out, err = tcpdump([str(WEIR), "run", *extra, "--"], trace)
            same = out == stock if not extra else sorted(out) == sorted(stock)
            total = re.search(r"weir:\s+total\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)", err)
            counted = total is not None and int(total.group(2)) == len(stock) and int(total.group(1)) == len(stock)
            ok = rc == rc0 and same and counted
            bad += not ok
            print(f"{'ok  ' if ok else 'FAIL'} {trace} {' '.join(extra) or 'in order'}: {len(out)} lines, stock {len(stock)}"
                  f"{'' if counted else ', counters: ' + (total.group(0) if total else 'none reported')}")
    bad += not sigterm_reaches_the_program()
    bad += not a_pool_beyond_memory_is_refused()
    print(f"weir run: {len(TRACES) * 2 + 2 - bad} of {len(TRACES) * 2 + 2} checks passed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
