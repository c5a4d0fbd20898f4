"""`weir flows` live with the kernel cutoff on and off: CPU per packet.

Runs itself inside scripts/testbed (two namespaces joined by a 1-queue veth
pair). A synthesized trace (`weir synth`: complete TCP connections and UDP
flows, 198.18.0.0/15 only) is replayed with tcpreplay at one moderate rate
from the sending namespace while `weir flows` captures the other end on
afpacket and on afxdp, exporting IPFIX to a UDP socket of this script. For
each source and each setting of --kernel-cutoff, three runs; the figure is
the median of weir's CPU time (all threads, from schedstat, while the replay
runs) over the packets replayed, and the share of those packets that reached
weir's pool. Also weir's CPU time over as long with no traffic, the
per-packet figure above that, and the figure per thread (capture, worker,
exporter). The kernel's own work (the XDP program or socket filter, run in
softirq on the receiving CPU) is not charged to weir's process, and is not
in these figures.

    scripts/testbed --queues 1 -- python3 bench/kernel_cutoff.py
"""
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from common import WEIR, log, machine, write_result  # noqa: E402

BIN = Path(os.environ.get("WEIR_BIN", WEIR))
RUNS = 3
PACKETS = 200_000
KPPS = 50


def cpu_by_thread(pid):
    """CPU seconds of each thread of `pid` by name (threads of one name summed), from schedstat."""
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            name = (task / "comm").read_text().strip()
            out[name] = out.get(name, 0) + int((task / "schedstat").read_text().split()[0]) / 1e9
        except (OSError, IndexError, ValueError):
            pass
    return out


def run(source, cutoff, trace, sink_port, stats, idle=False):
    env = os.environ
    weir = subprocess.Popen(
        [str(BIN), "flows", f"{source}:{env['TB_RX_IF']}", "--netns", env["TB_RX_NS"], "--take-host-traffic", "-q", "-n", f"127.0.0.1:{sink_port}",
         "--kernel-cutoff", cutoff, "--stats", stats],
        stderr=subprocess.PIPE, text=True)
    for line in weir.stderr:
        if "listening on" in line:
            break
    else:
        raise RuntimeError(f"weir flows {source} did not start")
    before = cpu_by_thread(weir.pid)
    if idle:
        time.sleep(PACKETS / (KPPS * 1000) + 0.5)
    else:
        subprocess.run(["ip", "netns", "exec", env["TB_TX_NS"], "tcpreplay", "-q", "-i", env["TB_TX_IF"], "--pps", str(KPPS * 1000), trace],
                       check=True, capture_output=True)
        time.sleep(0.5)
    after = cpu_by_thread(weir.pid)
    threads = {name: after[name] - before.get(name, 0) for name in after}
    cpu = sum(threads.values())
    weir.send_signal(signal.SIGINT)
    rest = weir.stderr.read()
    if weir.wait() != 0:
        raise RuntimeError(f"weir flows failed: {rest}")
    s = json.loads(Path(stats).read_text())
    return {"cpu_s": cpu, "ns_per_packet": cpu * 1e9 / PACKETS, "threads_s": threads, "reached_weir": s["packets"],
            "kernel_dropped": s["kernel_cutoff"]["packets"], "records": s["export"]["exported"]}


def main():
    if "TB_RX_NS" not in os.environ:
        sys.exit("run inside scripts/testbed: scripts/testbed --queues 1 -- python3 bench/kernel_cutoff.py")
    work = Path(tempfile.mkdtemp(prefix="weir-kcut-"))
    trace = str(work / "t.pcap")
    subprocess.run([str(BIN), "synth", "-o", trace, "-n", str(PACKETS), "-c", "1000", "--mbps", "200"], check=True, capture_output=True)
    sink = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sink.bind(("127.0.0.1", 0))
    sink.setblocking(False)
    port = sink.getsockname()[1]
    results = {}
    for source in ["afpacket", "afxdp"]:
        # What weir's threads spend with no traffic over the same time: the
        # capture threads' polling, which does not depend on the packets.
        idle = [run(source, "on", trace, port, str(work / "stats.json"), idle=True)["cpu_s"] for _ in range(RUNS)]
        results[f"{source}-idle"] = {"cpu_s": idle, "median_cpu_s": statistics.median(idle)}
        log(f"{source} idle: {idle}")
        for cutoff in ["off", "on"]:
            runs = []
            for i in range(RUNS):
                r = run(source, cutoff, trace, port, str(work / "stats.json"))
                while True:
                    try:
                        sink.recv(65536)
                    except BlockingIOError:
                        break
                log(f"{source} kernel cutoff {cutoff} run {i + 1}: {r}")
                runs.append(r)
            med = statistics.median(r["ns_per_packet"] for r in runs)
            above_idle = statistics.median((r["cpu_s"] - results[f"{source}-idle"]["median_cpu_s"]) * 1e9 / PACKETS for r in runs)
            results[f"{source}-{cutoff}"] = {"runs": runs, "median_ns_per_packet": med, "median_ns_per_packet_above_idle": above_idle,
                                             "median_share_reaching_weir": statistics.median(r["reached_weir"] / PACKETS for r in runs)}
    for source in ["afpacket", "afxdp"]:
        for cutoff in ["off", "on"]:
            runs = results[f"{source}-{cutoff}"]["runs"]
            names = sorted({n for r in runs for n in r["threads_s"]})
            per = {n: statistics.median(r["threads_s"].get(n, 0) for r in runs) * 1e9 / PACKETS for n in names}
            results[f"{source}-{cutoff}"]["median_ns_per_packet_by_thread"] = per
            log(f"{source} {cutoff}: ns/packet by thread: " + ", ".join(f"{n} {v:.0f}" for n, v in per.items() if v >= 1))
    for source in ["afpacket", "afxdp"]:
        on, off = results[f"{source}-on"], results[f"{source}-off"]
        log(f"{source}: {off['median_ns_per_packet']:.0f} ns/packet off, {on['median_ns_per_packet']:.0f} on "
            f"({off['median_ns_per_packet'] / on['median_ns_per_packet']:.2f}x less CPU); above the idle polling "
            f"({results[source + '-idle']['median_cpu_s']:.3f} s): {off['median_ns_per_packet_above_idle']:.0f} off, "
            f"{on['median_ns_per_packet_above_idle']:.0f} on; "
            f"{on['median_share_reaching_weir'] * 100:.1f}% of the packets reached weir with it on")
    write_result("kernel-cutoff", {"machine": machine(), "packets": PACKETS, "kpps": KPPS, "runs": RUNS, "results": results})


if __name__ == "__main__":
    main()
