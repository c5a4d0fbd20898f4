"""One `weir sensor` against the four single-purpose commands side by side
(issue 42): `weir record`, `weir flows`, `weir streams` and `weir inspect
--streams`, each with its own afpacket capture of the same interface (where
four captures can run together: each joins its own fanout group), against one
sensor whose single capture feeds the same four outputs.

Runs itself inside scripts/testbed (two namespaces, a 2-queue veth pair), as
bench/flows_live.py does. The traffic is a `weir synth` trace (TCP and UDP
sessions with payloads the built-in rules match, so the stream layer and the
rules have work) replayed by `weir replay --xdp` from the sending namespace
on CPU 0 at a fixed rate (an XDP program that passes everything sits on the
capturing end, as veth needs to take XDP-sent frames).

The four commands share between them the kernel ring memory the sensor's
one capture has (16 blocks each, against its 64): the loss-free rate then
says what each side sustains, not how long its rings can hide a backlog.

Per rate step, RUNS runs of each side: the packets sent, the packets each
tool delivered to its outputs (the sensor once for all four; for the four
commands the fewest any of them got), and the CPU time of every thread of
every process of the side (schedstat) per packet sent, counted until every
tool has worked off its backlog. A step is loss-free
when every output got every packet; the loss-free rate is the highest such
step (medians). The ratios reported are the sensor's CPU per packet over the
four commands', at the highest rate both held without loss: the processes'
own CPU, and that plus the machine's softirq time (where the kernel copies
each packet into every capture's ring).

Where the receivers run: by default both sides' processes are pinned to
CPU 1 (`--receiver-cpus 1`), the sender alone on CPU 0. The XDP sender keeps
its CPU busy while it paces (it runs its program until a frame is due), and
unpinned, the receivers' threads share that CPU with it by the scheduler's
fairness, which gives each runnable thread an equal share: four processes'
twenty threads then take more of it from the sender than the sensor's few,
and the loss-free rate measures their number, not their work. Pinned, each
side has the same one CPU, and the kernel's receive work (softirq) is on the
sender's. `--receiver-cpus all` leaves them unpinned (the earlier runs;
results then in bench/results/sensor-shared-cpu.json).

The two sides alternate run by run within a rate step, so a change of the
machine's speed during the bench falls on both.

Outputs are written to a tmpfs directory (packet files, stream files, IPFIX
files, events), emptied after every run; the memory it may take is checked
against MemAvailable first.

Results: bench/results/sensor.json.
"""
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import live  # noqa: E402
from common import ROOT, WEIR, WORK, log, machine, mem_available, sh, write_result  # noqa: E402

ENV = os.environ
RUNS = 5
SECONDS_PER_STEP = 3.0
# At most this many packets a run (a shorter step at high rates): every
# packet is kept twice per side (packet files, stream files) in /dev/shm.
MAX_PACKETS_PER_RUN = 1_200_000
RATES_KPPS = [10, 20, 40, 60, 80, 100, 130, 160]
LOSSY_STEPS_TO_STOP = 2
# taskset's CPU list for both sides' processes; "all": not pinned.
RECEIVER_CPUS = "1"
TRACE = WORK / "sensor-trace.pcap"
# weir replay --xdp holds the trace in kernel memory: at most 65,536 packets.
TRACE_PACKETS = 60_000


def trace():
    if not TRACE.exists():
        WORK.mkdir(parents=True, exist_ok=True)
        sh([str(WEIR), "synth", "-o", str(TRACE), "--packets", str(TRACE_PACKETS), "--flows", "600", "--seed", "5"])
    return TRACE


def send(packets, kpps):
    """`weir replay --xdp` of the trace, looped, at `kpps`; returns the packets sent."""
    argv = ["taskset", "-c", "0", str(WEIR), "replay", "--json", "--netns", ENV["TB_TX_NS"], "--xdp", ENV["TB_TX_IF"],
            "--loop", "0", "-c", str(packets), "--pps", str(kpps * 1000), str(trace())]
    v = json.loads(sh(argv).stdout)
    if v["packets"] != packets:
        raise RuntimeError(f"weir replay --xdp sent {v['packets']} of {packets}: {v['error']}")
    return packets


class Proc:
    """One capture process in the capturing namespace."""

    def __init__(self, name, argv, out):
        self.name, self.out = name, out
        pin = [] if RECEIVER_CPUS == "all" else ["taskset", "-c", RECEIVER_CPUS]
        self.proc = subprocess.Popen(live.ns("RX") + pin + argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def wait_listening(self):
        deadline = time.time() + 30
        said = []
        while time.time() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                raise RuntimeError(f"{self.name} exited at start: {''.join(said)}")
            said.append(line)
            if "listening on" in line:
                return
        raise RuntimeError(f"{self.name} did not start listening: {''.join(said)}")

    def pids(self):
        return live.descendants(self.proc.pid)

    def cpu(self):
        return sum(live.cpu_seconds(p) for p in self.pids())

    def stop(self):
        for p in self.pids():
            try:
                os.kill(p, signal.SIGINT)
            except ProcessLookupError:
                pass
        out, err = self.proc.communicate(timeout=60)
        if self.proc.returncode != 0:
            raise RuntimeError(f"{self.name} failed ({self.proc.returncode}): {err.strip()[-500:]}")
        return out, err


def softirq_seconds():
    """Softirq time of both CPUs (/proc/stat), where the kernel copies each
    packet into every capture's ring: four captures pay it four times, and
    none of it shows in the tools' own CPU time."""
    f = open("/proc/stat").readline().split()
    return int(f[7]) / os.sysconf("SC_CLK_TCK")


def number_before(text, word):
    """The number just before `word` in `text` (`20000 delivered`)."""
    head = text.split(word)[0].split()
    return int(head[-1])


def commands(rx, d):
    # The same kernel ring memory as the sensor's one capture (64 blocks of
    # 1 MiB a queue, the default), shared out: 16 blocks each. With 64 each
    # the four would hold four times the packets the sensor can while behind.
    src = f"afpacket:{rx}@0-1"
    ring = ["--blocks", "16"]
    return [
        ("record", [str(WEIR), "record", src, *ring, "-q", "-w", f"{d}/rec.pcap"],
         lambda out, err: number_before(err.split("weir record:")[1], "packets")),
        ("flows", [str(WEIR), "flows", src, *ring, "-q", "--kernel-cutoff", "off", "-w", f"{d}/f.ipfix", "--stats", f"{d}/flows.json"],
         lambda out, err: json.load(open(f"{d}/flows.json"))["packets"]),
        ("streams", [str(WEIR), "streams", src, *ring, "-q", "--kernel-cutoff", "off", "-o", f"{d}/streams", "--stats", f"{d}/streams.json"],
         lambda out, err: json.load(open(f"{d}/streams.json"))["packets"]),
        ("inspect", [str(WEIR), "inspect", src, *ring, "-q", "--streams", "--kernel-cutoff", "off", "-o", f"{d}/alerts.json", "--json"],
         lambda out, err: json.loads(out.strip().splitlines()[-1])["packets"]),
    ]


def sensor_config(rx, d):
    return (f"[sensor]\nstatus-interval = 0\n[capture]\nsource = \"afpacket:{rx}@0-1\"\n"
            f"[record]\nwrite = \"{d}/rec.pcap\"\n[flows]\nwrite = \"{d}/f.ipfix\"\n[streams]\noutput = \"{d}/streams\"\n"
            f"[inspect]\n[events]\npath = \"{d}/eve.json\"\ntypes = [\"alert\"]\n")


def run_once(side, kpps, base):
    """One run of `side` (sensor or commands) at `kpps`: sent, delivered (the
    fewest of any output), CPU seconds."""
    n = min(int(kpps * 1000 * SECONDS_PER_STEP), MAX_PACKETS_PER_RUN)
    d = Path(tempfile.mkdtemp(dir=base))
    rx = ENV["TB_RX_IF"]
    if side == "sensor":
        (d / "s.toml").write_text(sensor_config(rx, d))
        procs = [(Proc("sensor", [str(WEIR), "sensor", str(d / "s.toml")], None),
                  lambda out, err: number_before(err.split("packets received in")[1], "delivered"))]
    else:
        procs = [(Proc(name, argv, None), parse) for name, argv, parse in commands(rx, d)]
    for p, _ in procs:
        p.wait_listening()
    time.sleep(0.3)
    c0, irq0 = sum(p.cpu() for p, _ in procs), softirq_seconds()
    send(n, kpps)
    # Until every tool has worked off what its rings held: a tool behind
    # the rate catches up after the sender stops, and that work is counted.
    c1 = sum(p.cpu() for p, _ in procs)
    for _ in range(100):
        time.sleep(0.3)
        c = sum(p.cpu() for p, _ in procs)
        if c - c1 < 0.01 * len(procs):
            break
        c1 = c
    c1, irq1 = sum(p.cpu() for p, _ in procs), softirq_seconds()
    got = []
    for p, parse in procs:
        out, err = p.stop()
        got.append(parse(out, err))
    sh(["rm", "-rf", str(d)])
    return {"sent": n, "delivered": min(got), "each": got, "lost": max(n - min(got), 0), "cpu_s": c1 - c0,
            "cpu_ns_per_packet": (c1 - c0) / n * 1e9, "softirq_ns_per_packet": (irq1 - irq0) / n * 1e9,
            "total_ns_per_packet": (c1 - c0 + irq1 - irq0) / n * 1e9}


def inner(runs):
    rates = RATES_KPPS
    # Packet files and stream files of one run, both sides: about twice the
    # trace's bytes per packet sent, for each of the two copies a side makes.
    per_packet = TRACE.stat().st_size / TRACE_PACKETS if TRACE.exists() else 1000
    need = int(min(max(rates) * 1000 * SECONDS_PER_STEP, MAX_PACKETS_PER_RUN) * per_packet * 3)
    if mem_available() < 4 * need:
        sys.exit(f"bench/sensor.py: a run may put {need >> 20} MiB in /dev/shm; MemAvailable is {mem_available() >> 20} MiB")
    src = WORK / "live-xdp-pass.c"
    src.write_text(live.PASS_C)
    sh(["clang", "-O2", "-target", "bpf", "-I", f"/usr/include/{os.uname().machine}-linux-gnu", "-c", str(src), "-o", str(live.PASS_OBJ)])
    live.pass_program(True)
    base = tempfile.mkdtemp(prefix="weir-bench-sensor-", dir="/dev/shm")
    result = {"machine": machine(), "queues": 2, "runs_per_step": runs, "seconds_per_step": SECONDS_PER_STEP,
              "trace_packets": TRACE_PACKETS, "receiver_cpus": RECEIVER_CPUS, "sender_cpu": 0,
              "sides": {"sensor": {"steps": []}, "commands": {"steps": []}}}
    name = "sensor" if RECEIVER_CPUS != "all" else "sensor-shared-cpu"
    sides = ("sensor", "commands")
    lossy = {side: 0 for side in sides}
    try:
        for kpps in rates:
            going = [side for side in sides if lossy[side] < LOSSY_STEPS_TO_STOP]
            if not going:
                break
            rs = {side: [] for side in going}
            for _ in range(runs):
                for side in going:
                    rs[side].append(run_once(side, kpps, base))
            for side in going:
                med = {k: statistics.median(r[k] for r in rs[side])
                       for k in ("sent", "delivered", "lost", "cpu_s", "cpu_ns_per_packet", "softirq_ns_per_packet", "total_ns_per_packet")}
                result["sides"][side]["steps"].append({"kpps": kpps, **{f"median_{k}": v for k, v in med.items()}, "runs": rs[side]})
                lossy[side] = lossy[side] + 1 if med["lost"] else 0
                log(f"  {side:9} {kpps:4} kpps: lost {med['lost']:.0f} of {med['sent']:.0f}, CPU {med['cpu_ns_per_packet']:.0f} ns/packet, "
                    f"softirq {med['softirq_ns_per_packet']:.0f}, together {med['total_ns_per_packet']:.0f}")
            write_result(name, result)
        for side in sides:
            steps = result["sides"][side]["steps"]
            result["sides"][side]["loss_free_kpps"] = max((s["kpps"] for s in steps if s["median_lost"] == 0), default=0)
    finally:
        sh(["rm", "-rf", base])
        live.pass_program(False)
    s, c = result["sides"]["sensor"], result["sides"]["commands"]
    both = sorted({x["kpps"] for x in s["steps"] if x["median_lost"] == 0} & {x["kpps"] for x in c["steps"] if x["median_lost"] == 0})
    if both:
        k = both[-1]
        at = lambda side, key: next(x[key] for x in side["steps"] if x["kpps"] == k)
        result["at_kpps"] = k
        result["cpu_ratio_sensor_over_commands"] = at(s, "median_cpu_ns_per_packet") / at(c, "median_cpu_ns_per_packet")
        result["total_ratio_sensor_over_commands"] = at(s, "median_total_ns_per_packet") / at(c, "median_total_ns_per_packet")
    result["loss_free_ratio_sensor_over_commands"] = s["loss_free_kpps"] / max(c["loss_free_kpps"], 1)
    write_result(name, result)
    log(f"loss-free: sensor {s['loss_free_kpps']} kpps, the four commands {c['loss_free_kpps']} kpps; "
        f"at {result.get('at_kpps')} kpps, sensor / commands: CPU per packet {result.get('cpu_ratio_sensor_over_commands')}, "
        f"with softirq {result.get('total_ratio_sensor_over_commands')}")


def main():
    global RECEIVER_CPUS
    args = sys.argv[1:]
    runs = RUNS
    usage = "usage: bench/sensor.py [--runs N] [--rates KPPS,...] [--receiver-cpus LIST|all]"
    if args[:1] in (["-h"], ["--help"]):
        sys.exit(usage)
    inner_run = False
    while args:
        if args[0] == "--runs" and len(args) > 1:
            runs, args = int(args[1]), args[2:]
        elif args[0] == "--rates" and len(args) > 1:
            RATES_KPPS[:] = [int(x) for x in args[1].split(",")]
            args = args[2:]
        elif args[0] == "--receiver-cpus" and len(args) > 1:
            RECEIVER_CPUS, args = args[1], args[2:]
        elif args[0] == "--inner":
            inner_run, args = True, args[1:]
        else:
            sys.exit(f"bench/sensor.py: unknown argument {args[0]!r}\n{usage}")
    if inner_run:
        return inner(runs)
    if os.geteuid() != 0:
        sys.exit("bench/sensor.py needs root (it builds network namespaces)")
    if not WEIR.exists():
        sys.exit(f"bench/sensor.py: {WEIR} is missing: build it (make build, or set CARGO_TARGET_DIR)")
    trace()
    argv = [sys.executable, __file__, "--runs", str(runs), "--rates", ",".join(map(str, RATES_KPPS)),
            "--receiver-cpus", RECEIVER_CPUS, "--inner"]
    return subprocess.run([str(ROOT / "scripts" / "testbed"), "--queues", "2", "--", *argv]).returncode


if __name__ == "__main__":
    sys.exit(main())
