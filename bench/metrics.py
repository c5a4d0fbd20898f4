"""Does scraping `weir --metrics` slow the data path? Three engine commands
on a synthesized trace (1 million packets, 2 queues, read at top speed):
`weir count` (about 0.1 s here, too short for a 1 Hz scraper to see it twice),
`weir handle -x 300` (an application of known cost, about 2 s) and `weir
streams` (the stream layer, whose workers publish their counters when a
scrape asks). Each runs without --metrics, with --metrics and nobody
scraping, scraped 10 times a second (ten times what a Prometheus server
asks), and scraped back to back by a client that sends the next request as
soon as the last answer is in. Each configuration runs RUNS times,
interleaved, after the trace was read once into the page cache; we report
the median time of the run (the engine's own elapsed time) and ratios to the
same command without --metrics; for `weir handle` also the workers' CPU time
per packet (their thread CPU clocks), which other load on the machine
disturbs less than elapsed time.

A scrape reads counters weir's threads publish anyway (no lock, nothing the data
path waits for); what it costs is the CPU of the thread that answers, which on a
2-core machine the capture and worker threads share: the back-to-back client
shows that cost at its worst.
"""
import http.client
import json
import re
import subprocess
import sys
import threading
import time

from common import WEIR, WORK, log, machine, median, sh, warm, write_result

RUNS = 8
PACKETS = 1_000_000
FLOWS = 50_000


def scraper(addr, interval, stop, counts):
    """GET /metrics every `interval` seconds (0: back to back) until `stop`."""
    host, port = addr.rsplit(":", 1)
    n = 0
    while not stop.is_set():
        t0 = time.perf_counter()
        try:
            c = http.client.HTTPConnection(host, int(port), timeout=5)
            c.request("GET", "/metrics")
            body = c.getresponse().read()
            c.close()
        except OSError:
            break  # weir has exited
        assert b"weir_packets_received_total" in body
        n += 1
        if interval:
            stop.wait(max(0.0, interval - (time.perf_counter() - t0)))
    counts.append(n)


WORKLOADS = {
    "count": ["count", "--json"],
    "handle": ["handle", "-x", "300", "--json"],
    "streams": ["streams", "-q"],
}


def run(trace, workload, metrics, interval):
    cmd = [str(WEIR), *WORKLOADS[workload], f"{trace}@0-1"]
    if metrics:
        cmd += ["--metrics", "127.0.0.1:0"]
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stop, counts, t = threading.Event(), [], None
    if metrics:
        said = []
        while not (line := p.stderr.readline()).startswith("weir: metrics at http://"):
            assert line, f"{cmd} never said where its metrics are: {''.join(said)}"
            said.append(line)
        addr = line.split("http://", 1)[1].split("/metrics")[0]
        if interval is not None:
            t = threading.Thread(target=scraper, args=(addr, interval, stop, counts))
            t.start()
    out, err = p.communicate()
    wall = time.perf_counter() - t0
    stop.set()
    if t:
        t.join()
    if p.returncode != 0:
        raise RuntimeError(f"{cmd} failed: {err}")
    worker_ns = None
    if out.strip():
        r = json.loads(out)
        assert r["packets"] == PACKETS, r
        elapsed = r["elapsed_s"]
        # weir handle: the workers' CPU time per packet (thread CPU clocks).
        worker_ns = r.get("ns_per_packet")
    else:
        # weir streams: "weir streams: N packets (...) in S s: ..."
        m = re.search(r"weir streams: (\d+) packets \([^)]*\) in ([0-9.]+) s", err)
        assert m and int(m.group(1)) == PACKETS, err
        elapsed = float(m.group(2))
    return {"wall_s": wall, "elapsed_s": elapsed, "worker_ns_per_packet": worker_ns, "scrapes": counts[0] if counts else 0}


def main():
    WORK.mkdir(parents=True, exist_ok=True)
    trace = WORK / f"metrics-{PACKETS}.pcap"
    if not trace.exists():
        log(f"synthesizing {trace} ...")
        sh([str(WEIR), "synth", "-o", str(trace), "--packets", str(PACKETS), "--flows", str(FLOWS), "--seed", "3"])
    warm(trace)
    configs = {
        "no-metrics": (False, None),
        "metrics-unscraped": (True, None),
        "scraped-10hz": (True, 0.1),
        "scraped-back-to-back": (True, 0.0),
    }
    runs = {(w, k): [] for w in WORKLOADS for k in configs}
    names = list(configs)
    for i in range(RUNS):
        for w in WORKLOADS:
            # Each configuration takes each place in the order as often: the first
            # run after another command pays for memory that one left behind.
            for name in names[i % len(names):] + names[: i % len(names)]:
                metrics, interval = configs[name]
                r = run(trace, w, metrics, interval)
                runs[(w, name)].append(r)
                log(f"run {i + 1}/{RUNS} {w:8} {name:22} {r['elapsed_s']:7.3f} s  {r['scrapes']} scrapes")
    summary = {}
    for w in WORKLOADS:
        base = median([r["elapsed_s"] for r in runs[(w, "no-metrics")]])
        summary[w] = {}
        for name in configs:
            rs = runs[(w, name)]
            elapsed = median([r["elapsed_s"] for r in rs])
            summary[w][name] = {
                "median_elapsed_s": elapsed,
                "pps": PACKETS / elapsed,
                "elapsed_vs_no_metrics": elapsed / base,
                "median_scrapes_per_s": median([r["scrapes"] / r["elapsed_s"] for r in rs]),
            }
            if rs[0]["worker_ns_per_packet"] is not None:
                ns = median([r["worker_ns_per_packet"] for r in rs])
                base_ns = median([r["worker_ns_per_packet"] for r in runs[(w, "no-metrics")]])
                summary[w][name]["median_worker_cpu_ns_per_packet"] = ns
                summary[w][name]["worker_cpu_vs_no_metrics"] = ns / base_ns
            log(f"{w:8} {name:22} {elapsed:7.3f} s  x{elapsed / base:.3f}  {summary[w][name]['median_scrapes_per_s']:.0f} scrapes/s")
    write_result(
        "metrics",
        {"packets": PACKETS, "flows": FLOWS, "queues": 2, "runs": RUNS, "machine": machine(), "summary": summary,
         "runs_raw": {f"{w}/{k}": v for (w, k), v in runs.items()}},
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
