"""Records per second into Kafka (issue 43): `weir flows --kafka` publishing
every flow record into a local single-node broker (scripts/kafka), JSON and
protobuf, against the same run writing IPFIX to /dev/null, in turn.

Two cases on the `make demo` trace (`weir synth`, 2 million packets,
100,000 flows open at once):
- demo: the default timeouts, the records a real link makes; here the
  stream layer is the larger cost;
- timeouts-1s: `--active-timeout 1 --inactive-timeout 1`, about three times
  the records from the same packets, so the output's own cost shows.

Per case and encoding, RUNS runs of each command in turn, the trace warmed
first. For each: wall time until the last record was acknowledged, weir's
CPU (user + system), the broker's CPU over the same run (its JVM, from
/proc), and the records made and acknowledged. Reported, as medians:
- records/s: records acknowledged / wall time;
- records per CPU-second of weir: what one core of weir publishes;
- the Kafka output's own CPU per record: weir's CPU with --kafka less its
  CPU with -w /dev/null, over the records (the stream layer's work is the
  same in both);
- which side was busier: weir's CPU or the broker's, as a share of the wall
  time (a side near 100% of a core is the limit).

ipfixcol2 publishes 200,000 to 400,000 JSON records/s (its documentation's
figure, on its own hardware): the comparison is with that published range,
not a run here.

With --check, the records consumed from the broker after each case's
first JSON and protobuf runs are compared field by field with the IPFIX
file of the same run (read by ipfixDump), as the tests do on smaller traces.

Results: bench/results/kafka.json.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from common import ROOT, WEIR, WORK, log, machine, median, sh, warm, write_result  # noqa: E402

RUNS = 5
PORT = 19392
SYNTH = ["-n", "2000000", "-c", "100000", "--seed", "1"]
CASES = {
    "demo": [],
    "timeouts-1s": ["--active-timeout", "1", "--inactive-timeout", "1"],
}


def jiffies(pid):
    """User + system CPU seconds of a process so far."""
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def run(cmd, broker_pid):
    b0 = jiffies(broker_pid)
    t0 = time.perf_counter()
    p = subprocess.run(["/usr/bin/time", "-f", "%U %S", *cmd], text=True, capture_output=True)
    wall = time.perf_counter() - t0
    broker = jiffies(broker_pid) - b0
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {p.stderr.strip()}")
    u, s = p.stderr.strip().splitlines()[-1].split()
    return wall, float(u) + float(s), broker


def ipfix_lines(path):
    """The IPFIX file's records as the comparison lines of tests/kafka.rs."""
    out = sh(["ipfixDump", "--in", str(path)]).stdout
    recs, cur = [], None
    for line in out.splitlines():
        if line.startswith("--- data record"):
            cur = {}
            recs.append(cur)
        elif line.startswith("---"):
            cur = None
        elif cur is not None and line.strip().startswith("(") and " : " in line:
            name, value = line.strip().split(")", 1)[1].split(" : ", 1)
            cur[name.strip()] = value.strip()
    reasons = ["idle", "active", "end-of-flow", "end-of-input", "evicted"]
    from datetime import datetime, timezone
    import ipaddress

    def ms(t):
        return int(datetime.strptime(t, "%Y-%m-%d %H:%M:%S.%f").replace(tzinfo=timezone.utc).timestamp() * 1000 + 0.5)

    lines = []
    for r in recs:
        v4 = "sourceIPv4Address" in r
        src = str(ipaddress.ip_address(r["sourceIPv4Address" if v4 else "sourceIPv6Address"]))
        dst = str(ipaddress.ip_address(r["destinationIPv4Address" if v4 else "destinationIPv6Address"]))
        proto = int(r["protocolIdentifier"])
        if proto in (1, 58):
            sport, dport = 0, int(r["icmpTypeCodeIPv4" if v4 else "icmpTypeCodeIPv6"])
        else:
            sport, dport = int(r["sourceTransportPort"]), int(r["destinationTransportPort"])
        lines.append(f"{src} {sport} {dst} {dport} {proto} {r['packetDeltaCount']} {r['octetDeltaCount']} "
                     f"{ms(r['flowStartMilliseconds'])} {ms(r['flowEndMilliseconds'])} {r['tcpControlBits']} "
                     f"{reasons[int(r['flowEndReason']) - 1]}")
    return sorted(lines)


def kafka_lines(records):
    lines = []
    for r in records:
        f = r["flow"]
        if "icmp_type" in r:
            sport, dport = 0, r["icmp_type"] << 8 | r["icmp_code"]
        else:
            sport, dport = r.get("src_port", 0), r.get("dest_port", 0)
        lines.append(f"{r['src_ip']} {sport} {r['dest_ip']} {dport} {r['proto']} {f['pkts_toserver']} {f['bytes_toserver']} "
                     f"{f['start_ns'] // 1_000_000} {f['end_ns'] // 1_000_000} {f['tcp_flags_ts']} {f['reason']}")
    return sorted(lines)


def check(addr, topic, fmt, ipfix, made):
    p = sh([sys.executable, str(ROOT / "tests/kafka/consume.py"), "--brokers", addr, "--topic", topic, "--format", fmt,
            "--expect", str(made), "--idle", "20", "--no-check-schema"])
    got = kafka_lines(json.loads(line) for line in p.stdout.splitlines())
    want = ipfix_lines(ipfix)
    same = got == want
    log(f"  check {topic}: {len(got)} consumed, {len(want)} in the IPFIX file: {'equal' if same else 'DIFFERENT'}")
    return {"topic": topic, "consumed": len(got), "ipfix_records": len(want), "equal": same}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=RUNS)
    ap.add_argument("--check", action="store_true", help="compare the consumed records with the IPFIX file (first runs)")
    ap.add_argument("--cases", default=",".join(CASES))
    args = ap.parse_args()
    WORK.mkdir(parents=True, exist_ok=True)
    data = tempfile.mkdtemp(prefix="weir-kafka-bench-")
    addr = sh([str(ROOT / "scripts/kafka"), "start", "--dir", data, "--port", str(PORT), "--partitions", "4"]).stdout.strip()
    broker_pid = int(open(f"{data}/pid").read())
    result = {"machine": machine(), "runs": args.runs, "broker": "Kafka 4.1.1 KRaft, one node, 4 partitions, 512 MiB heap",
              "trace": f"weir synth {' '.join(SYNTH)}", "cases": {}}
    try:
        trace = WORK / "kafka-demo.pcap"
        if not trace.exists():
            log(f"synthesizing {trace}")
            sh([str(WEIR), "synth", "-o", str(trace), *SYNTH])
        for name in args.cases.split(","):
            warm(trace)
            out = {}
            sides = {"ipfix-devnull": None, "json": "json", "protobuf": "protobuf"}
            samples = {s: [] for s in sides}
            checks = []
            for i in range(args.runs):
                for side, fmt in sides.items():
                    stats = Path(data) / "stats.json"
                    cmd = [str(WEIR), "flows", str(trace), "-q", "--stats", str(stats), *CASES[name]]
                    ipfix = Path(data) / f"{name}-{side}.ipfix"
                    if fmt is None:
                        cmd += ["-w", "/dev/null"]
                    else:
                        topic = f"bench-{name}-{fmt}-{i}"
                        cmd += ["--kafka", addr, "--topic", topic, "--kafka-format", fmt, "--kafka-buffer", "1024"]
                        if args.check and i == 0:
                            cmd += ["-w", str(ipfix)]
                    wall, cpu, broker = run(cmd, broker_pid)
                    st = json.loads(stats.read_text())
                    k = st.get("kafka") or {}
                    made = (k.get("made") or {}).get("flow", st["export"]["records"])
                    acked = k.get("acked", made)
                    samples[side].append({"wall_s": wall, "cpu_s": cpu, "broker_cpu_s": broker, "records": made, "acked": acked})
                    log(f"{name} {side} run {i}: {made} records, {acked} acked, {wall:.2f} s wall, {cpu:.2f} s CPU, broker {broker:.2f} s")
                    if fmt is not None and args.check and i == 0:
                        checks.append(check(addr, topic, fmt, ipfix, made))
                        ipfix.unlink()
            base_cpu = median([s["cpu_s"] for s in samples["ipfix-devnull"]])
            for side in sides:
                ss = samples[side]
                rec = median([s["records"] for s in ss])
                wall = median([s["wall_s"] for s in ss])
                cpu = median([s["cpu_s"] for s in ss])
                broker = median([s["broker_cpu_s"] for s in ss])
                out[side] = {"records": rec, "wall_s": wall, "cpu_s": cpu, "broker_cpu_s": broker,
                             "records_per_s": rec / wall, "records_per_weir_cpu_s": rec / cpu,
                             "weir_busy_share": cpu / wall, "broker_busy_share": broker / wall, "samples": ss}
                if side != "ipfix-devnull":
                    out[side]["output_cpu_us_per_record"] = (cpu - base_cpu) / rec * 1e6
                    out[side]["all_acked"] = all(s["acked"] == s["records"] for s in ss)
                    log(f"{name} {side}: {rec / wall:,.0f} records/s, {rec / cpu:,.0f} per weir CPU-second, "
                        f"output {(cpu - base_cpu) / rec * 1e6:.2f} us/record; busy: weir {cpu / wall:.0%}, broker {broker / wall:.0%}")
            out["checks"] = checks
            result["cases"][name] = out
    finally:
        subprocess.run([str(ROOT / "scripts/kafka"), "kill", "--dir", data])
        subprocess.run(["rm", "-rf", data])
    write_result("kafka", result)


if __name__ == "__main__":
    main()
