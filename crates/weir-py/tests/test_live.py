"""Live capture from Python: AF_PACKET on the loopback interface of a network
namespace the test makes (netns=), while a process in it sends UDP datagrams
to 127.0.0.1; nothing leaves the namespace. Needs root (a namespace, a packet
socket): as another user these tests are skipped and say so."""

import os
import shutil
import struct
import subprocess
import sys
import textwrap
import time

import pytest

import weir

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: a network namespace and packet sockets")

PORT = 9977
SENDER = textwrap.dedent(
    """
    import socket, sys, time
    n = int(sys.argv[1])
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for i in range(n):
        s.sendto(b"weir-py %06d " % i + bytes(100), ("127.0.0.1", PORT))
        time.sleep(0.001)
    """
).replace("PORT", str(PORT))


@pytest.fixture
def netns():
    if shutil.which("ip") is None:
        pytest.fail("needs ip (iproute2)")
    name = f"weir-py-{os.getpid()}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        subprocess.run(["ip", "-n", name, "link", "set", "lo", "up"], check=True)
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)


def send(ns, n):
    return subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, "-c", SENDER, str(n)])


def udp_payload(frame: bytes) -> bytes:
    """The UDP payload of an Ethernet/IPv4 frame (the loopback's link type)."""
    assert struct.unpack("!H", frame[12:14])[0] == 0x0800
    ihl = (frame[14] & 0xF) * 4
    sport, dport = struct.unpack("!HH", frame[14 + ihl : 18 + ihl])
    assert dport == PORT
    return frame[14 + ihl + 8 :]


def test_packets_of_a_live_interface_in_a_namespace(netns):
    it = weir.packets("afpacket:lo", netns=netns, filter=f"udp port {PORT}", packets=200, duration=20, snaplen=128)
    assert it.link_type == "EN10MB" and it.snaplen == 128
    # More than the limit: a live capture sees it reached at the packet after it.
    sender = send(netns, 400)
    seq = []
    for p in it:
        payload = udp_payload(p.bytes())
        assert p.caplen <= 128 and p.wire_len == 14 + 20 + 8 + 115
        seq.append(int(payload[8:14]))
    sender.wait(timeout=30)
    assert seq == list(range(200)), "every datagram once, in order"
    report = it.stats()
    assert report.packets == 200 and report.stop == "packet limit reached"


def test_count_and_flows_of_a_live_interface(netns):
    for run in ("count", "flows"):
        sender = send(netns, 300)
        time.sleep(0.05)
        got = getattr(weir, run)("afpacket:lo", netns=netns, filter=f"udp port {PORT}", duration=3, fanout="hash")
        sender.wait(timeout=30)
        if run == "count":
            assert got.stop == "time limit reached"
            assert 100 <= got.packets <= 300 and got.total.delivery_drops == 0
        else:
            assert len(got) == 1, "one UDP flow, both ways in one row"
            row = got.to_pandas().iloc[0]
            assert row.dst_port == PORT and row.protocol == 17 and 100 <= row.src2dst_packets <= 300
            assert got.report.stop == "time limit reached"
