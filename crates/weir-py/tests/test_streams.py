"""weir.streams against `weir streams` on the same trace: each stream's
bytes are the file `weir streams -o` writes for it, each closed stream's
record the line `--json` prints, the totals its --stats; events come in
order per stream, offsets without a hole or an overlap, gaps counted."""

import collections
import json

import pytest

import weir


def tcpflow_name(s):
    """The file name `weir streams -o` (tcpflow's) gives an IPv4 TCP direction."""
    addr = lambda a: ".".join(f"{int(o):03d}" for o in a.split("."))  # noqa: E731
    return f"{addr(s['src'])}.{s['sport']:05d}-{addr(s['dst'])}.{s['dport']:05d}"


def rebuild(events):
    """Each stream's bytes (gaps as zeros, as the CLI's files leave holes), its
    records at creation and close, checking the order and offsets of its events."""
    data, made, closed, next_at = {}, {}, {}, {}
    for ev in events:
        if ev.kind == "created":
            assert ev.id not in made
            made[ev.id], data[ev.id], next_at[ev.id] = ev.stream, bytearray(), 0
            continue
        assert ev.id in made and ev.id not in closed, f"event {ev.kind} outside its stream's life"
        if ev.kind == "data":
            assert ev.offset + ev.overlap == next_at[ev.id]
            fresh = ev.data[ev.overlap :]
            data[ev.id] += fresh
            next_at[ev.id] += len(fresh)
        elif ev.kind == "gap":
            assert ev.offset == next_at[ev.id] and ev.length > 0
            data[ev.id] += bytes(ev.length)
            next_at[ev.id] += ev.length
        else:
            closed[ev.id] = ev.stream
            assert ev.stream["delivered"] + ev.stream["gap"] == next_at[ev.id]
    assert closed.keys() == made.keys(), "every stream closes"
    return data, made, closed


@pytest.mark.parametrize("options,args", [({}, []), ({"cutoff": 1000, "queues": 2}, ["--cutoff", "1000"]), ({"piece": 500}, ["--piece", "500"])])
def test_streams_are_the_clis(http_trace, cli, tmp_path, options, args):
    out = tmp_path / "out"
    suffix = "@0-1" if options.get("queues") else ""
    stats_file = tmp_path / "s.json"
    lines = cli("streams", "--json", "-o", out, "--stats", stats_file, *args, http_trace + suffix).stdout.splitlines()
    want_stats = json.loads(stats_file.read_text())
    s = weir.streams(http_trace, **options)
    data, made, closed = rebuild(s)
    want = sorted(lines)
    got = sorted(json.dumps({k: c[k] for k in json.loads(lines[0])}, separators=(",", ":")) for c in closed.values())
    assert [json.loads(x) for x in got] == [json.loads(x) for x in want]
    for k in ("packets", "streams", "connections", "delivered_bytes", "gap_bytes", "discarded_bytes", "pieces", "closed"):
        assert s.stats[k] == want_stats[k], k
    # The CLI's running sum of every byte it was handed.
    assert sum(sum(b) for b in data.values()) % (1 << 64) == want_stats["sum"]
    files = {p.name: p.read_bytes() for p in out.iterdir()}
    mine = {tcpflow_name(closed[i]): bytes(b) for i, b in data.items() if b and closed[i]["proto"] == 6}
    assert mine == files and len(files) == 4
    if "cutoff" in options:
        assert all(len(b) <= options["cutoff"] for b in data.values())
    assert s.report.packets == 1556 and s.report.stop == "end of input"


def test_callbacks_get_the_events_in_order(synth):
    seen = collections.defaultdict(list)
    stats = weir.streams(synth, queues=2, cutoff=200).run(
        on_created=lambda e: seen[e.id].append("created"),
        on_data=lambda e: seen[e.id].append("data"),
        on_closed=lambda e: seen[e.id].append("closed"),
    )
    assert len(seen) == stats["streams"] > 0
    for kinds in seen.values():
        assert kinds[0] == "created" and kinds[-1] == "closed" and kinds.count("closed") == 1
    assert stats["delivered_bytes"] > 0 and stats["discarded_bytes"] > 0
    assert len({i >> 40 for i in seen}) == 2, "ids carry their queue"


def test_run_from_its_own_callback_is_refused(synth):
    s = weir.streams(synth)
    refused = []

    def on_created(ev):
        if not refused:
            with pytest.raises(RuntimeError, match="called from one of its own callbacks"):
                s.run()
            refused.append(ev.id)

    stats = s.run(on_created=on_created)
    # The outer run went on to the end, with every stream.
    assert refused and stats["streams"] == weir.streams(synth).run()["streams"] > 0


def test_packets_mode_keeps_no_payload(synth):
    events = list(weir.streams(synth, mode="packets"))
    assert events and not [e for e in events if e.kind == "data"]
    closed = [e.stream for e in events if e.kind == "closed"]
    assert all(c["mode"] == "packets" and c["delivered"] == 0 for c in closed)


def test_leaving_early_stops_the_capture(synth):
    with weir.streams(synth) as s:
        first = [e for _, e in zip(range(10), s)]
    assert len(first) == 10 and first[0].kind == "created"
    assert list(s) == []
