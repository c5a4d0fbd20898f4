"""weir from Python: packets, per-queue counts, flow records as DataFrames, TCP streams.

weir is a packet capture and delivery engine (Rust); this package runs it from
Python. Every function takes a source as ``weir count`` does (``"trace.pcap"``,
``"trace.pcap@0-3"``, ``"afpacket:eth0"``, ``"afxdp:eth0@0-1"``, ...) and the
engine's options as keywords (``queues=``, ``filter=``, ``pool=``, ``balance=``,
``locality=``, ``packets=``, ``duration=``, live options such as ``snaplen=``).

- :func:`count` runs the engine and returns a :class:`Report` of per-queue counters.
- :func:`packets` iterates over packets (``p.ts_ns``, ``p.queue``, ``len(p)``,
  ``p.data`` as a memoryview until the next packet, ``p.bytes()`` for a copy).
- :func:`flows` returns flow records (both directions of a connection in a row)
  with ``to_pandas()`` and ``to_arrow()``; :data:`FLOW_COLUMNS` documents them.
- :func:`streams` gives the stream layer's events (created, data, gap, closed),
  as an iterator or to callbacks (:meth:`Streams.run`).

The GIL is released while weir works; Ctrl-C stops a capture cleanly and raises
``KeyboardInterrupt``. Errors are :class:`Error` subclasses carrying weir's message.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

from . import _weir
from ._weir import (
    BadInputError,
    BusyError,
    Error,
    FilterError,
    MalformedTraceError,
    MissingCapabilityError,
    NoSuchDeviceError,
    Notice,
    Packet,
    Packets,
    StalePacketError,
    Event,
)

__version__ = _weir.__version__

__all__ = [
    "count",
    "packets",
    "flows",
    "streams",
    "Report",
    "QueueStats",
    "Flows",
    "Streams",
    "Packet",
    "Packets",
    "Event",
    "FLOW_COLUMNS",
    "END_REASONS",
    "Error",
    "BadInputError",
    "MalformedTraceError",
    "FilterError",
    "NoSuchDeviceError",
    "MissingCapabilityError",
    "BusyError",
    "StalePacketError",
    "Notice",
]


@dataclasses.dataclass(frozen=True)
class QueueStats:
    """One queue's counters (``queue`` is None in a total), by weir's names.

    Every packet a queue received is in exactly one of delivered, filtered,
    capture_drops, delivery_drops, unread and in_flight.
    """

    queue: Optional[int]
    received: int
    delivered: int
    filtered: int
    capture_drops: int
    delivery_drops: int
    unread: int
    in_flight: int
    received_bytes: int
    delivered_bytes: int
    bad_recycles: int
    offloaded: int


@dataclasses.dataclass(frozen=True)
class Report:
    """What a run counted: each queue's counters, their total, and how it ended."""

    source: str
    link_type: str
    queues: List[QueueStats]
    total: QueueStats
    elapsed_s: float
    stop: Optional[str]
    unreached_bytes: int = 0
    pool: Optional[str] = None
    placement: List[str] = dataclasses.field(default_factory=list)
    rebalance: Optional[Dict[str, int]] = None
    notes: List[str] = dataclasses.field(default_factory=list)

    @property
    def packets(self) -> int:
        """Packets delivered, all queues together."""
        return self.total.delivered

    @property
    def bytes(self) -> int:
        """Wire bytes of the packets delivered, all queues together."""
        return self.total.delivered_bytes

    @classmethod
    def _from_dict(cls, d: Dict[str, Any]) -> "Report":
        names = {f.name for f in dataclasses.fields(cls)}
        kw = {k: v for k, v in d.items() if k in names}
        kw["queues"] = [QueueStats(**q) for q in d["queues"]]
        kw["total"] = QueueStats(**d["total"])
        return cls(**kw)


def _raise_with(raw: Dict[str, Any], result: Any) -> None:
    """Raises the error of a run that failed part way, with what it got attached."""
    err = raw.get("error")
    if err is not None:
        err.result = result
        raise err


def count(source: "str | bytes | os.PathLike[str] | os.PathLike[bytes]", **options: Any) -> Report:
    """Runs the engine on ``source`` to its end and returns its :class:`Report`.

    ``weir.count("t.pcap", queues=2, filter="tcp")`` is ``weir count -f tcp
    t.pcap@0-1``; the counters are the ones ``weir count --json`` prints. A
    trace damaged part way raises :class:`MalformedTraceError` after counting
    the packets before the damage; that report is the exception's ``result``.
    """
    raw = _weir.count(os.fsdecode(source), options)
    report = Report._from_dict(raw)
    _raise_with(raw, report)
    return report


def packets(source: "str | bytes | os.PathLike[str] | os.PathLike[bytes]", **options: Any) -> Packets:
    """An iterator of the packets of ``source`` (a :class:`Packets`).

    Each item is a :class:`Packet`; its ``data`` (a memoryview) and ``bytes()``
    can be taken until the next item is, its other fields for as long as it is
    kept. Trace files are mapped and walked in place unless ``trace_access`` says
    otherwise: the Python thread keeps one CPU busy, so the copying thread of
    ``"read"`` would have no CPU of its own.
    """
    options.setdefault("trace_access", "map")
    return _weir.packets(os.fsdecode(source), options)


#: Why a flow record was handed out: the categories of the ``end_reason`` column.
END_REASONS: Tuple[str, ...] = ()

#: The columns of :meth:`Flows.to_pandas` and :meth:`Flows.to_arrow`:
#: (name, pandas dtype, Arrow type, meaning). In a row, ``src`` is the side that
#: opened the connection (the first packet's sender, or the SYN's) and
#: ``src2dst`` its direction; a connection seen one way only (or a record with
#: no partner) has zeros for ``dst2src``. Bytes are IP bytes, headers included
#: (NetFlow's and IPFIX's octets); payload bytes are TCP or UDP payload.
FLOW_COLUMNS: Tuple[Tuple[str, str, str, str], ...] = (
    ("src_ip", "str", "string", "address of the side that opened the connection"),
    ("src_port", "uint16", "uint16", "its port (0 for protocols without ports; ICMP: 0)"),
    ("dst_ip", "str", "string", "address of the other side"),
    ("dst_port", "uint16", "uint16", "its port (ICMP: type and code, as nfdump shows them)"),
    ("protocol", "uint8", "uint8", "IP protocol number (6 TCP, 17 UDP, 1 ICMP, ...)"),
    ("ip_version", "uint8", "uint8", "4 or 6"),
    ("community_id", "str", "string", "Community ID v1 (seed 0): the key that joins a flow's records with "
     "Suricata's, Zeek's and Arkime's, the same from either direction"),
    ("queue", "uint16", "uint16", "the queue whose worker saw the connection"),
    ("first_seen", "datetime64[ns, UTC]", "timestamp[ns, tz=UTC]", "time of the first packet of either direction"),
    ("last_seen", "datetime64[ns, UTC]", "timestamp[ns, tz=UTC]", "time of the last packet of either direction"),
    ("duration", "timedelta64[ns]", "duration[ns]", "last_seen - first_seen"),
    ("src2dst_packets", "uint64", "uint64", "packets from src to dst (each IP fragment counts)"),
    ("src2dst_bytes", "uint64", "uint64", "their IP bytes"),
    ("src2dst_payload_bytes", "uint64", "uint64", "their payload bytes"),
    ("src2dst_tcp_flags", "uint8", "uint8", "the TCP flags of their packets, OR'ed (0 for other protocols)"),
    ("dst2src_packets", "uint64", "uint64", "packets from dst to src"),
    ("dst2src_bytes", "uint64", "uint64", "their IP bytes"),
    ("dst2src_payload_bytes", "uint64", "uint64", "their payload bytes"),
    ("dst2src_tcp_flags", "uint8", "uint8", "the TCP flags of their packets, OR'ed"),
    ("bidirectional_packets", "uint64", "uint64", "src2dst_packets + dst2src_packets"),
    ("bidirectional_bytes", "uint64", "uint64", "src2dst_bytes + dst2src_bytes"),
    ("end_reason", "category", "dictionary<values=string, indices=uint8>",
     "why the record was handed out: " + ", ".join(
         ["active (the active timeout: the connection goes on in a next record)", "fin", "rst",
          "idle (the idle timeout)", "evicted (the table was full)", "end-of-input",
          "reused (a new SYN on the same ports)"])),
)


class Flows:
    """Flow records of :func:`flows`, held as columns (numpy arrays built in Rust).

    ``len(flows)`` rows; ``columns`` maps each name of :data:`FLOW_COLUMNS` to
    its array; ``stats`` is the stream layer's totals (the names of ``weir flows
    --stats``); ``report`` the engine's :class:`Report`.
    """

    def __init__(self, raw: Dict[str, Any]):
        self.columns: Dict[str, Any] = raw["columns"]
        self.end_reasons: Tuple[str, ...] = tuple(raw["end_reasons"])
        self.stats: Dict[str, Any] = raw["stats"]
        self.report: Report = Report._from_dict(raw["report"])

    def __len__(self) -> int:
        return len(self.columns["src_port"])

    def __repr__(self) -> str:
        return f"weir.Flows({len(self)} rows from {self.report.source})"

    def to_pandas(self) -> "Any":
        """A pandas DataFrame, column by column from the arrays (dtypes in :data:`FLOW_COLUMNS`)."""
        import pandas as pd

        cols = dict(self.columns)
        for name in ("first_seen", "last_seen"):
            cols[name] = pd.DatetimeIndex(cols[name]).tz_localize("UTC")
        cols["end_reason"] = pd.Categorical.from_codes(cols["end_reason"], categories=list(self.end_reasons))
        return pd.DataFrame(cols, copy=False)

    def to_arrow(self) -> "Any":
        """A pyarrow Table, column by column from the arrays (types in :data:`FLOW_COLUMNS`)."""
        import pyarrow as pa

        arrays = {}
        for name, col in self.columns.items():
            if name in ("src_ip", "dst_ip", "community_id"):
                arrays[name] = pa.array(col, type=pa.string())
            elif name in ("first_seen", "last_seen"):
                arrays[name] = pa.array(col, type=pa.timestamp("ns", tz="UTC"))
            elif name == "end_reason":
                arrays[name] = pa.DictionaryArray.from_arrays(pa.array(col), pa.array(self.end_reasons, type=pa.string()))
            else:
                arrays[name] = pa.array(col)
        return pa.table(arrays)


Flows.__doc__ = (Flows.__doc__ or "") + "\n    Columns (name: pandas dtype / Arrow type: meaning):\n\n" + "\n".join(
    f"    - ``{name}``: {pandas} / {arrow}: {meaning}" for name, pandas, arrow, meaning in FLOW_COLUMNS
)


def flows(source: "str | bytes | os.PathLike[str] | os.PathLike[bytes]", **options: Any) -> Flows:
    """Flow records of ``source``, as ``weir flows`` makes them, in a :class:`Flows`.

    One row per connection (``biflow=False``: per direction), handed out at its
    close, its idle timeout (``idle_timeout=60`` s, packet time) or its active
    timeout (``active_timeout=300`` s, after which it goes on in a next row);
    ``max_flows=`` connections at most (the least recently seen is handed out
    early past it). The engine's keywords apply (``queues=``, ``filter=``, ...).
    """
    raw = _weir.flows(os.fsdecode(source), options)
    result = Flows(raw)
    _raise_with(raw, result)
    return result


class Streams:
    """The stream layer's events (:class:`Event`) of :func:`streams`, in order per stream.

    Iterate over it, or hand the events to callbacks with :meth:`run`. Once the
    events are all taken, ``report`` is the engine's :class:`Report` and
    ``stats`` the stream layer's totals (the names of ``weir streams --stats``).
    Leaving early (``close()``, or ``with weir.streams(...) as s:``) stops the capture.
    """

    def __init__(self, native: Any):
        self._native = native
        self.report: Optional[Report] = None
        self.stats: Optional[Dict[str, Any]] = None
        self._running = False

    def __iter__(self) -> Iterator[Event]:
        yield from self._native
        report, stats = self._native._end()
        self.report, self.stats = Report._from_dict(report), stats

    def run(
        self,
        on_created: Optional[Callable[[Event], Any]] = None,
        on_data: Optional[Callable[[Event], Any]] = None,
        on_gap: Optional[Callable[[Event], Any]] = None,
        on_closed: Optional[Callable[[Event], Any]] = None,
    ) -> Dict[str, Any]:
        """Calls each event's callback (on this thread) until the end; returns ``stats``.

        Called again from one of its own callbacks, it raises RuntimeError (as the
        C API's weir_streams_run refuses to run from its callbacks): the events
        are this run's to hand out, and a run inside it would take them all.
        """
        if self._running:
            raise RuntimeError(
                "weir.Streams.run() was called from one of its own callbacks: "
                "the run already under way hands out every event; return from the callback instead"
            )
        calls = {"created": on_created, "data": on_data, "gap": on_gap, "closed": on_closed}
        self._running = True
        try:
            for ev in self:
                f = calls[ev.kind]
                if f is not None:
                    f(ev)
        finally:
            self._running = False
        assert self.stats is not None
        return self.stats

    def close(self) -> None:
        """Stops the capture; the events not taken are lost."""
        self._native.close()

    def __enter__(self) -> "Streams":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def streams(source: "str | bytes | os.PathLike[str] | os.PathLike[bytes]", **options: Any) -> Streams:
    """The stream layer's events for ``source``, as ``weir streams`` rebuilds them.

    Options of the stream layer: ``mode`` ("tcp-fast", "tcp-strict", "packets"),
    ``cutoff`` (bytes of a stream delivered, None for all), ``classes``
    (``["EXPR;cutoff=N,mode=M,priority=P", ...]``), ``piece`` (bytes per data
    event), ``piece_overlap``, ``flush_timeout_ms``, ``idle_timeout`` (s),
    ``max_streams``, ``memory`` (bytes of reassembly memory), ``hold_limit``,
    ``midstream``, ``ignore_window``; and the engine's keywords.
    """
    return Streams(_weir.streams(os.fsdecode(source), options))


END_REASONS = tuple(_weir.END_REASONS)
