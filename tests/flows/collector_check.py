"""Every record `weir flows` says it exported is stored by the collector.

The `make demo` trace (2 million packets, about 100,000 flows open at once)
is read at top speed by the release build, with one queue and with two, and
exported over UDP to an nfcapd on 127.0.0.1 started as an operator starts it
(`nfcapd -l DIR -p PORT`: its socket buffer the system's default). The end
of the trace closes every open flow at once; weir paces its datagrams so
that nfcapd keeps up. Checked: nfdump reads back exactly the records weir
counted as exported, nfcapd's socket dropped no datagram (/proc/net/udp),
and nfcapd saw no sequence error.

Then, for the record, the same run unpaced (--export-rate 0): what nfcapd
stored of it is printed, not checked (it depends on how busy the machine is).

    python3 tests/flows/collector_check.py --weir target/release/weir
"""
import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DEMO = ["--packets", "2000000", "--flows", "100000", "--seed", "1"]
# The demo trace's size, with room to spare.
TRACE_BYTES = 1_400_000_000


def udp_socket(port):
    """(bytes queued, datagrams dropped) of the UDP socket bound to
    127.0.0.1:port, or None."""
    local = f"0100007F:{port:04X}"
    for line in Path("/proc/net/udp").read_text().splitlines()[1:]:
        f = line.split()
        if f[1] == local:
            return int(f[4].split(":")[1], 16), int(f[-1])
    return None


class Nfcapd:
    def __init__(self, work):
        self.dir = Path(tempfile.mkdtemp(prefix="nfcapd-", dir=work))
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.proc = subprocess.Popen(["nfcapd", "-l", str(self.dir), "-b", "127.0.0.1", "-p", str(self.port)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env={**os.environ, "TZ": "UTC"})
        deadline = time.monotonic() + 10
        while udp_socket(self.port) is None:
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError(f"nfcapd did not bind 127.0.0.1:{self.port}")
            time.sleep(0.02)

    def stop(self):
        """Waits until nfcapd has read every datagram queued, stops it, and
        returns (records stored, datagrams its socket dropped, its report)."""
        deadline = time.monotonic() + 30
        while True:
            queued, drops = udp_socket(self.port)
            if queued == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.02)
        time.sleep(0.2)
        self.proc.send_signal(signal.SIGTERM)
        report = self.proc.communicate(timeout=30)[1]
        out = subprocess.run(["nfdump", "-q", "-6", "-R", str(self.dir), "-o", "fmt:%pr"], capture_output=True, text=True,
                             env={**os.environ, "TZ": "UTC"})
        if out.returncode != 0 and "Empty file list" not in out.stdout + out.stderr:
            raise RuntimeError(f"nfdump -R {self.dir}: {out.stderr.strip()}")
        stored = sum(1 for line in out.stdout.splitlines() if line.strip() and "No matching" not in line)
        return stored, drops, report


def export(weir, source, work, extra):
    """Runs weir flows into a fresh nfcapd: (exported, stored, dropped, report, seconds)."""
    col = Nfcapd(work)
    stats = Path(work) / "stats.json"
    t = time.monotonic()
    p = subprocess.run([weir, "flows", source, "-q", "-n", f"127.0.0.1:{col.port}", "--stats", str(stats), *extra],
                       capture_output=True, text=True, timeout=600)
    seconds = time.monotonic() - t
    stored, drops, report = col.stop()
    shutil.rmtree(col.dir, ignore_errors=True)
    if p.returncode != 0:
        raise RuntimeError(f"weir flows {source} {' '.join(extra)} exited {p.returncode}: {p.stderr.strip()[-500:]}")
    j = json.loads(stats.read_text())
    return j["export"]["exported"], stored, drops, report, seconds, p.stderr.splitlines()[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--weir", required=True, help="the weir binary (a release build: the trace is read at top speed)")
    ap.add_argument("--work", default=None, help="folder for the trace (default: a temporary one)")
    a = ap.parse_args()
    for tool in ("nfcapd", "nfdump"):
        if shutil.which(tool) is None and not Path("/usr/sbin", tool).exists():
            sys.exit(f"collector_check: needs {tool} (Debian's nfdump package; scripts/setup installs it)")
    work = tempfile.mkdtemp(prefix="weir-collector-", dir=a.work)
    try:
        free = shutil.disk_usage(work).free
        if free < 2 * TRACE_BYTES:
            sys.exit(f"collector_check: {work} has {free >> 20} MiB free; the demo trace needs {TRACE_BYTES >> 20} MiB and room")
        trace = Path(work) / "demo.pcap"
        subprocess.run([a.weir, "synth", "-o", str(trace), *DEMO], check=True, capture_output=True)
        # Warm the trace: the run is read at top speed, not at the disk's.
        subprocess.run([a.weir, "count", str(trace)], check=True, capture_output=True)
        passed, failed = 0, 0
        for queues in ["", "@0-1"]:
            source = f"{trace}{queues}"
            exported, stored, drops, report, seconds, line = export(a.weir, source, work, [])
            ok = stored == exported and drops == 0 and "Sequence Errors: 0" in report
            print(f"{'ok  ' if ok else 'FAIL'} {queues or '1 queue'}: weir exported {exported} records in {seconds:.1f} s, "
                  f"nfcapd stored {stored}, its socket dropped {drops} datagrams")
            if not ok:
                print(f"     weir: {line}\n     nfcapd: {report.strip()[-300:]}")
            passed, failed = passed + ok, failed + (not ok)
        exported, stored, drops, _, seconds, _ = export(a.weir, f"{trace}@0-1", work, ["--export-rate", "0"])
        print(f"for the record, unpaced (--export-rate 0): weir exported {exported} records in {seconds:.1f} s, "
              f"nfcapd stored {stored} ({100 * stored / max(exported, 1):.1f}%), its socket dropped {drops} datagrams")
        print(f"collector_check: {passed} passed, {failed} failed")
        sys.exit(1 if failed else 0)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
