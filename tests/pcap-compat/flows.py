"""What the live and exporter checks share: a synthesized trace of marked
UDP/TCP flows on 198.18.0.0/15 addresses, a pcap reader for the frames a
capture wrote, NetFlow collection with nfcapd read back with nfdump, and a
network namespace of our own for collectors and exporters."""
import os
import re
import signal
import struct
import subprocess
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Frames go to a MAC nobody owns, so the capturing side never answers them.
DST_MAC = bytes([0x02, 0, 0, 0, 0, 0x01])
SRC_MAC = bytes([0x02, ord("w"), ord("e"), ord("i"), ord("r"), 0x01])


def checksum(header):
    s = sum(struct.unpack(f"!{len(header) // 2}H", header))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return (~s) & 0xFFFF


def frame(src, dst, sport, dport, udp, seq, payload):
    body = struct.pack("!I", seq) + bytes((seq + i) & 0xFF for i in range(payload - 4))
    if udp:
        l4 = struct.pack("!HHHH", sport, dport, 8 + len(body), 0)
    else:
        # ACK|PSH, no options: a data segment of an established connection.
        l4 = struct.pack("!HHIIBBHHH", sport, dport, seq, 1, 5 << 4, 0x18, 65535, 0, 0)
    total = 20 + len(l4) + len(body)
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, total, seq & 0xFFFF, 0, 64, 17 if udp else 6, 0, bytes(src), bytes(dst))
    ip = ip[:10] + struct.pack("!H", checksum(ip)) + ip[12:]
    return DST_MAC + SRC_MAC + b"\x08\x00" + ip + l4 + body


def synth_frames(n, flows, seed=1):
    """`n` frames over `flows` flows (both directions, UDP and TCP), interleaved
    pseudo-randomly but reproducibly."""
    rng = seed
    out = []
    for seq in range(n):
        rng = (rng * 6364136223846793005 + 1442695040888963407) & (2**64 - 1)
        f = (rng >> 33) % flows
        client = [198, 18, 100 + f // 250, 1 + f % 250]
        server = [198, 19, 0, 1 + f % 7]
        cport, sport = 20000 + f, [53, 80, 443, 25, 123, 22, 8080][f % 7]
        udp = f % 3 == 0
        forward = (rng >> 20) & 3 != 0
        src, dst, sp, dp = (client, server, cport, sport) if forward else (server, client, sport, cport)
        out.append(frame(src, dst, sp, dp, udp, seq, 18 + (rng >> 40) % 400))
    return out


def write_pcap(path, frames, start_s=1_700_000_000):
    with open(path, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
        for i, fr in enumerate(frames):
            f.write(struct.pack("<IIII", start_s + i // 1000, (i % 1000) * 1000, len(fr), len(fr)))
            f.write(fr)


def read_pcap(path):
    """The frames of a classic pcap file (either byte order, micro or nano)."""
    data = Path(path).read_bytes()
    magic = data[:4]
    order = "<" if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    frames, at = [], 24
    while at + 16 <= len(data):
        _, _, caplen, _ = struct.unpack(order + "IIII", data[at:at + 16])
        frames.append(data[at + 16:at + 16 + caplen])
        at += 16 + caplen
    return frames


def multiset_diff(want, got):
    """(missing, extra) counts between two lists of frames."""
    w, g = Counter(want), Counter(got)
    return sum((w - g).values()), sum((g - w).values())


class Namespace:
    """A network namespace with its loopback up and `addr` on it: collectors
    and exporters talk inside it, to an address of the benchmark range."""

    def __init__(self, addr):
        self.name = f"weir-flows-{os.getpid()}"
        self.addr = addr
        subprocess.run(["ip", "netns", "add", self.name], check=True)
        subprocess.run(["ip", "-n", self.name, "link", "set", "lo", "up"], check=True)
        subprocess.run(["ip", "-n", self.name, "addr", "add", f"{addr}/32", "dev", "lo"], check=True)

    def argv(self, argv):
        return ["ip", "netns", "exec", self.name, *argv]

    def close(self):
        subprocess.run(["ip", "netns", "del", self.name], check=False)


class Collector:
    """nfcapd on `addr:port` (inside `ns_argv`), writing into a temporary
    directory; `flows()` stops it and returns the flows it stored."""

    def __init__(self, ns_argv, addr, port):
        self.dir = tempfile.mkdtemp(prefix="weir-nfcapd-")
        self.ns_argv, self.port = ns_argv, port
        # -B: softflowd sends a whole file's flows in a burst; the default
        # socket buffer loses some (and the loss varies from run to run).
        self.proc = subprocess.Popen(ns_argv(["nfcapd", "-B", "4194304", "-b", addr, "-p", str(port), "-w", self.dir]),
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        time.sleep(0.5)
        if self.proc.poll() is not None:
            raise RuntimeError(f"nfcapd on {addr}:{port} exited: {self.proc.stdout.read()}")

    def flows(self):
        """Flows as a Counter of (src, dst, sport, dport, proto, packets, bytes).
        `self.lost` is how many export packets nfcapd saw missing (its
        sequence errors): a burst can overflow even a large socket buffer on
        a loaded machine."""
        # nfcapd drops what its socket still holds when it stops: let it read
        # the exporter's last burst first (ss's Recv-Q back to 0).
        until = time.time() + 20
        while time.time() < until:
            q = subprocess.run(self.ns_argv(["ss", "-Hnlu", f"sport = :{self.port}"]), capture_output=True, text=True).stdout.split()
            if not q or q[1] == "0":
                break
            time.sleep(0.05)
        time.sleep(0.2)
        self.proc.send_signal(signal.SIGTERM)
        log, _ = self.proc.communicate(timeout=30)
        self.lost = sum(int(n) for n in re.findall(r"Sequence Errors: (\d+)", log))
        return read_flows(self.dir)


def read_flows(directory):
    """The flows nfcapd files in `directory` hold, as a Counter of (src, dst,
    sport, dport, proto, packets, bytes); the directory is removed."""
    out = subprocess.run(["nfdump", "-R", str(directory), "-q", "-N", "-o", "fmt:%sa %da %sp %dp %pr %pkt %byt"],
                         capture_output=True, text=True)
    if out.returncode != 0 and "No matching flows" not in out.stdout + out.stderr:
        raise RuntimeError(f"nfdump -R {directory}: {out.stderr.strip()}")
    subprocess.run(["rm", "-rf", str(directory)], check=False)
    # Records have seven fields; anything else is nfdump talking (with no
    # records at all it says so on stdout).
    return Counter(tuple(f) for f in (line.split() for line in out.stdout.splitlines()) if len(f) == 7)


def flow_totals(flows):
    """Packets and bytes per 5-tuple, summed over the records of each flow."""
    totals = Counter()
    for (sa, da, sp, dp, pr, pkt, byt), n in flows.items():
        totals[(sa, da, sp, dp, pr, "packets")] += int(pkt) * n
        totals[(sa, da, sp, dp, pr, "bytes")] += int(byt) * n
    return totals


def truth(frames):
    """Per-5-tuple packets and bytes (IP lengths) of Ethernet/IPv4 frames, as
    `flow_totals` gives them for an exporter's records."""
    totals = Counter()
    for f in frames:
        sa, da = ".".join(map(str, f[26:30])), ".".join(map(str, f[30:34]))
        sp, dp = struct.unpack("!HH", f[34:38])
        key = (sa, da, str(sp), str(dp), str(f[23]))
        totals[key + ("packets",)] += 1
        totals[key + ("bytes",)] += len(f) - 14
    return totals


def describe(want, got, limit=4):
    """A short account of how two flow Counters differ."""
    missing, extra = want - got, got - want
    lines = [f"  only in stock: {' '.join(k)} x{n}" for k, n in list(missing.items())[:limit]]
    lines += [f"  only in weir:  {' '.join(k)} x{n}" for k, n in list(extra.items())[:limit]]
    return "\n".join(lines)
