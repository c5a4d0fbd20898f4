"""weir.packets: every packet of the trace, its bytes and times as the file
holds them (read here by a reader of the test's own), its counts and bytes
as `weir count --json` gives them; the data contract (valid until the next
packet, a copy that stays) and the engine's accounting when a loop leaves early."""

import struct
import threading
import time

import pytest

import weir


def read_pcap(path):
    """(ts_ns, wire_len, data) of each record of a classic pcap file."""
    with open(path, "rb") as f:
        head = f.read(24)
        magic = head[:4]
        order, nano = {
            b"\xd4\xc3\xb2\xa1": ("<", False),
            b"\xa1\xb2\xc3\xd4": (">", False),
            b"\x4d\x3c\xb2\xa1": ("<", True),
            b"\xa1\xb2\x3c\x4d": (">", True),
        }[magic]
        while True:
            rec = f.read(16)
            if len(rec) < 16:
                return
            sec, frac, caplen, wire = struct.unpack(order + "IIII", rec)
            yield sec * 1_000_000_000 + (frac if nano else frac * 1000), wire, f.read(caplen)


@pytest.mark.parametrize("trace", ["synth", "http_trace", "fragments_trace"])
def test_every_packet_is_the_files(request, trace):
    path = request.getfixturevalue(trace)
    want = list(read_pcap(path))
    got = [(p.ts_ns, p.wire_len, p.bytes(), p.queue, len(p), p.caplen) for p in weir.packets(path)]
    assert [(t, w, d) for t, w, d, *_ in got] == want
    assert all(q == 0 and n == len(d) == c for _, _, d, q, n, c in got)


@pytest.mark.parametrize("trace", ["synth", "pcapng_trace"])
def test_counts_and_bytes_equal_the_clis(request, cli_json, trace):
    path = request.getfixturevalue(trace)
    for queues, suffix, flags in ((None, "", []), (2, "@0-1", []), (3, "@0-2", ["-f", "tcp"])):
        want = cli_json(*flags, path + suffix)
        per_queue = {}
        it = weir.packets(path, queues=queues, filter=flags[1] if flags else None)
        for p in it:
            n, b = per_queue.get(p.queue, (0, 0))
            per_queue[p.queue] = (n + 1, b + p.wire_len)
        assert per_queue == {q["queue"]: (q["delivered"], q["delivered_bytes"]) for q in want["queues"] if q["delivered"]}
        report = it.stats()
        assert [q.delivered for q in report.queues] == [q["delivered"] for q in want["queues"]]
        assert [q.filtered for q in report.queues] == [q["filtered"] for q in want["queues"]]
        assert report.stop == "end of input" and report.total.unread == 0 and report.total.in_flight == 0


def test_data_is_readable_until_the_next_packet(synth):
    it = weir.packets(synth)
    first = next(it)
    view = first.data
    kept = first.bytes()
    assert isinstance(view, memoryview) and view.readonly and len(view) == first.caplen
    assert bytes(view) == kept == bytes(first)
    second = next(it)
    # What was taken in time stays; what was not is refused, never read from reused memory.
    assert bytes(view) == kept and first.bytes() == kept
    assert second.caplen == len(second)
    next(it)
    with pytest.raises(weir.StalePacketError, match="until the next packet"):
        second.data
    with pytest.raises(weir.StalePacketError):
        second.bytes()
    assert second.ts_ns > 0 and second.wire_len >= second.caplen
    it.close()


def test_kept_packets_keep_their_fields(synth):
    want = [(t, w) for t, w, _ in read_pcap(synth)]
    kept = list(weir.packets(synth))
    assert [(p.ts_ns, p.wire_len) for p in kept] == want
    assert len({id(p) for p in kept}) == len(kept), "a packet the caller holds was reused"


def test_leaving_early_counts_the_rest_unread(synth):
    with weir.packets(synth, queues=2) as it:
        taken = sum(1 for _, p in zip(range(500), it))
    report = it.stats()
    assert taken == 500 and report.packets == 500
    t = report.total
    assert t.in_flight == 0 and t.unread > 0
    assert t.received == t.delivered + t.filtered + t.unread + t.capture_drops
    assert report.stop == "stopped on request"
    assert list(it) == []


def test_limits_end_the_iteration(synth):
    it = weir.packets(synth, packets=123)
    assert sum(1 for _ in it) == 123
    it = weir.packets(synth, pps=1000, duration=0.3)
    n = sum(1 for _ in it)
    assert 100 <= n <= 900 and it.stats().stop == "time limit reached"


def test_the_iterator_says_what_it_reads(synth):
    it = weir.packets(synth, queues=2)
    assert it.source == f"file:{synth}@0-1" and it.link_type == "EN10MB" and it.dlt == 1
    assert it.queues == [0, 1] and it.snaplen > 0
    assert "weir.Packet(ts_ns=" in repr(next(it))


def test_one_iterator_read_by_two_threads_says_so(synth):
    """Paced, the iterator waits for each packet with the GIL released: a
    second thread that calls next() then is told what it did, in words."""
    it = weir.packets(synth, pps=500)
    errors = []
    done = threading.Event()

    def read():
        try:
            for _ in it:
                if done.is_set():
                    return
        except RuntimeError as e:
            errors.append(str(e))

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for _ in range(500):
            try:
                next(it)
            except RuntimeError as e:
                errors.append(str(e))
                break
            time.sleep(0.001)
    finally:
        done.set()
        reader.join(timeout=30)
        it.close()
    assert errors, "two threads read one iterator 500 times without meeting"
    assert all("being read by another thread" in e for e in errors), errors
