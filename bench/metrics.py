"""Does scraping `weir --metrics` slow the data path? `weir count` on a
synthesized trace (1 million packets, 2 queues, read at top speed) without
--metrics, with --metrics and nobody scraping, scraped 10 times a second (ten
times what a Prometheus server asks), and scraped back to back by a client that
sends the next request as soon as the last answer is in. Each configuration runs
RUNS times, interleaved, after the trace was read once into the page cache; we
report the median wall time and ratios to the run without --metrics.

A scrape reads counters weir's threads publish anyway (no lock, nothing the data
path waits for); what it costs is the CPU of the thread that answers, which on a
2-core machine the capture and worker threads share: the back-to-back client
shows that cost at its worst.
"""
import http.client
import json
import subprocess
import sys
import threading
import time

from common import WEIR, WORK, log, machine, median, sh, warm, write_result

RUNS = 7
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


def run(trace, metrics, interval):
    cmd = [str(WEIR), "count", "--json", f"{trace}@0-1"]
    if metrics:
        cmd += ["--metrics", "127.0.0.1:0"]
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stop, counts, t = threading.Event(), [], None
    if metrics:
        line = p.stderr.readline()
        assert line.startswith("weir: metrics at http://"), line
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
    r = json.loads(out)
    assert r["packets"] == PACKETS, r
    return {"wall_s": wall, "weir_elapsed_s": r["elapsed_s"], "scrapes": counts[0] if counts else 0}


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
    runs = {k: [] for k in configs}
    for i in range(RUNS):
        for name, (metrics, interval) in configs.items():
            r = run(trace, metrics, interval)
            runs[name].append(r)
            log(f"run {i + 1}/{RUNS} {name:22} {r['weir_elapsed_s']:7.3f} s  {r['scrapes']} scrapes")
    base = median([r["weir_elapsed_s"] for r in runs["no-metrics"]])
    summary = {}
    for name, rs in runs.items():
        elapsed = median([r["weir_elapsed_s"] for r in rs])
        summary[name] = {
            "median_elapsed_s": elapsed,
            "pps": PACKETS / elapsed,
            "elapsed_vs_no_metrics": elapsed / base,
            "median_scrapes_per_s": median([r["scrapes"] / r["weir_elapsed_s"] for r in rs]),
        }
        log(f"{name:22} {elapsed:7.3f} s  x{elapsed / base:.3f}  {summary[name]['median_scrapes_per_s']:.0f} scrapes/s")
    write_result(
        "metrics",
        {"packets": PACKETS, "flows": FLOWS, "queues": 2, "runs": RUNS, "machine": machine(), "summary": summary, "runs_raw": runs},
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
