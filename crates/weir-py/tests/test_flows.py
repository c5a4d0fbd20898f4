"""weir.flows against `weir flows` on the same trace: the same records (as
many rows as the CLI exports biflows, the stream layer's totals equal to
its --stats), every packet of a record in a row, and the DataFrame's and
Arrow table's columns and types as FLOW_COLUMNS documents them."""

import json
import pathlib

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import weir
from conftest import corpus_path


def cli_flows(cli, tmp_path, path, *args):
    """`weir flows --biflow` to an IPFIX file: its --stats JSON."""
    stats = tmp_path / "stats.json"
    cli("flows", "-q", "--biflow", "-w", tmp_path / "f.ipfix", "--stats", stats, *args, path)
    return json.loads(stats.read_text())


def restricted(got, want):
    """`got` with only the keys `want` has, at every level."""
    return {k: restricted(v, want[k]) if isinstance(v, dict) else v for k, v in got.items() if k in want}


def packets_in_records(stats):
    """Packets of the stream layer that are in a flow record: every IP packet
    but the fragments of datagrams that never completed."""
    f = stats["ip_fragments"]
    return stats["packets"] - stats["not_stream"] - stats["untracked"] - (f["fragments"] - f["fragments_reassembled"])


@pytest.mark.parametrize("trace", ["synth", "http_trace", "fragments_trace", "pcapng_trace"])
def test_rows_and_totals_are_the_clis(request, cli, tmp_path, trace):
    path = request.getfixturevalue(trace)
    for queues, suffix in ((None, ""), (2, "@0-1")):
        want = cli_flows(cli, tmp_path, path + suffix)
        got = weir.flows(path, queues=queues)
        assert len(got) == want["export"]["exported"] > 0
        del want["export"], want["elapsed_s"]
        assert restricted(got.stats, want) == want
        c = got.columns
        assert int(c["bidirectional_packets"].sum()) == packets_in_records(got.stats)
        assert (c["bidirectional_packets"] == c["src2dst_packets"] + c["dst2src_packets"]).all()
        assert (c["bidirectional_bytes"] == c["src2dst_bytes"] + c["dst2src_bytes"]).all()
        assert (c["last_seen"] >= c["first_seen"]).all()
        assert got.report.packets == got.stats["packets"]


def test_uniflow_rows_hold_the_same_counts(synth):
    bi = weir.flows(synth)
    uni = weir.flows(synth, biflow=False)
    assert len(uni) == uni.stats["streams"] + uni.stats["active_records"]
    assert len(bi) < len(uni)
    assert not uni.columns["dst2src_packets"].any()
    for col in ("bidirectional_packets", "bidirectional_bytes"):
        assert bi.columns[col].sum() == uni.columns[col].sum()
    assert bi.stats["connections"] <= len(bi)


def test_timeouts_cut_long_connections_into_records(http_trace, cli, tmp_path):
    # The trace's two connections last 31 s, with quiet spells.
    want = cli_flows(cli, tmp_path, http_trace, "--active-timeout", "5", "--inactive-timeout", "2")
    got = weir.flows(http_trace, active_timeout=5, idle_timeout=2)
    assert len(got) == want["export"]["exported"] and got.stats["active_records"] > 0
    df = got.to_pandas()
    assert (df.end_reason == "active").sum() > 0 and (df.end_reason == "idle").sum() > 0


def test_dataframe_columns_and_dtypes_are_documented(http_trace):
    f = weir.flows(http_trace)
    df = f.to_pandas()
    assert list(df.columns) == [c[0] for c in weir.FLOW_COLUMNS]
    for name, dtype, _, _ in weir.FLOW_COLUMNS:
        if dtype == "str":
            # pandas 3 gives its string dtype, older pandas object.
            assert pd.api.types.is_string_dtype(df[name]) and isinstance(df[name].iloc[0], str), name
        else:
            assert str(df[name].dtype) == dtype, name
    assert list(df.end_reason.cat.categories) == list(weir.END_REASONS)
    assert set(df.ip_version) == {4} and set(df.protocol) == {6}
    # Both HTTP connections, each a row with both directions.
    assert len(df) == 2 and (df.dst_port == 80).all() and (df.dst2src_packets > 0).all()
    assert (df.duration == df.last_seen - df.first_seen).all()
    assert df.first_seen.min().year == 2011
    assert (df.src2dst_tcp_flags & 0x02).all(), "the initiator sent the SYN"


def test_arrow_types_are_documented_and_values_are_the_dataframes(synth):
    f = weir.flows(synth, queues=2)
    t = f.to_arrow()
    assert t.column_names == [c[0] for c in weir.FLOW_COLUMNS]
    for name, _, arrow, _ in weir.FLOW_COLUMNS:
        assert str(t.schema.field(name).type).startswith(arrow.split("<")[0]), name
    assert str(t.schema.field("end_reason").type) == "dictionary<values=string, indices=uint8, ordered=0>"
    df = f.to_pandas()
    assert t.num_rows == len(df) == len(f)
    for name in ("src_ip", "dst_port", "src2dst_bytes", "queue"):
        assert t.column(name).to_pylist() == df[name].tolist()
    assert t.column("end_reason").to_pylist() == df.end_reason.astype(str).tolist()
    assert set(df.queue) == {0, 1}


def test_columns_are_numpy_arrays_built_in_rust(synth):
    f = weir.flows(synth)
    for name, dtype, _, _ in weir.FLOW_COLUMNS:
        col = f.columns[name]
        assert isinstance(col, np.ndarray) and len(col) == len(f), name
    assert f.columns["src2dst_packets"].dtype == np.uint64
    assert f.columns["first_seen"].dtype == np.dtype("datetime64[ns]")
    # pandas and Arrow take the numeric arrays without a copy.
    arr = f.columns["src2dst_bytes"]
    assert np.shares_memory(pa.array(arr).to_numpy(zero_copy_only=True), arr)
    assert np.shares_memory(f.to_pandas()["src2dst_bytes"].to_numpy(), arr)


def reference_community_id(row):
    """The reference implementation's ID (the communityid package) of a
    row's flow: ICMP's type and code from the destination port, as flows
    mode keys them."""
    import communityid

    proto, sport, dport = int(row.protocol), int(row.src_port), int(row.dst_port)
    if proto in (1, 58):
        sport, dport = dport >> 8, dport & 0xFF
    if proto in (1, 6, 17, 58, 132):
        t = communityid.FlowTuple(proto, row.src_ip, row.dst_ip, sport, dport)
    else:
        t = communityid.FlowTuple(proto, row.src_ip, row.dst_ip)
    return communityid.CommunityID(seed=0).calc(t)


def test_every_flow_of_the_corpus_has_the_reference_community_id():
    """Every row of every corpus trace weir reads (TCP, UDP, SCTP, ICMP and
    ICMPv6, other protocols; IPv4 and IPv6; both directions as uniflows)
    against the reference implementation."""
    corpus = corpus_path("zeek-traces")
    checked, protocols, traces = 0, set(), 0
    for path in sorted(pathlib.Path(corpus).rglob("*")):
        if not path.is_file() or not any(path.name.endswith(s) for s in (".pcap", ".pcapng", ".trace", ".pcap.gz")):
            continue
        try:
            df = weir.flows(str(path), biflow=False).to_pandas()
        except weir.Error:
            # Traces weir refuses (link types without IP, malformed files)
            # have no flows to check; the CLI tests cover the refusals.
            continue
        traces += 1
        for row in df.itertuples(index=False):
            want = reference_community_id(row)
            assert row.community_id == want, f"{path}: {row}"
            checked += 1
            protocols.add(int(row.protocol))
    # 785 traces and 4,696 uniflow records on the corpus of 2026-12: most of it, not a few files.
    assert traces > 700 and checked > 4_000, (traces, checked)
    assert {1, 6, 17, 58}.issubset(protocols), protocols
