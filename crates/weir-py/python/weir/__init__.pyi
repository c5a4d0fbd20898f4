# Type stubs of the weir package: the functions with every keyword they take,
# so that editors complete them (at run time they take **options and check
# them in weir's native module: an unknown keyword is a TypeError).

import dataclasses
import os
from typing import Any, Callable, Dict, Iterator, List, Literal, Optional, Sequence, Tuple, Union

import numpy

# bytes as os.fsdecode takes them (the file system encoding).
_Source = Union[str, bytes, os.PathLike[str], os.PathLike[bytes]]
_Queues = Union[int, str, None]
_Pool = Union[str, Tuple[int, int], None]
_Cpus = Union[str, Sequence[int], None]

__version__: str

@dataclasses.dataclass(frozen=True)
class QueueStats:
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
    source: str
    link_type: str
    queues: List[QueueStats]
    total: QueueStats
    elapsed_s: float
    stop: Optional[str]
    unreached_bytes: int = ...
    pool: Optional[str] = ...
    placement: List[str] = ...
    rebalance: Optional[Dict[str, int]] = ...
    notes: List[str] = ...
    @property
    def packets(self) -> int: ...
    @property
    def bytes(self) -> int: ...

class Packet:
    """A captured packet; ``data`` and ``bytes()`` until the next packet is taken."""

    @property
    def ts_ns(self) -> int: ...
    @property
    def ts(self) -> float: ...
    @property
    def queue(self) -> int: ...
    @property
    def wire_len(self) -> int: ...
    @property
    def caplen(self) -> int: ...
    @property
    def data(self) -> memoryview: ...
    def bytes(self) -> bytes: ...
    def __bytes__(self) -> bytes: ...
    def __len__(self) -> int: ...

class Packets(Iterator[Packet]):
    """The iterator of :func:`packets`."""

    def __iter__(self) -> "Packets": ...
    def __next__(self) -> Packet: ...
    def close(self) -> None: ...
    def __enter__(self) -> "Packets": ...
    def __exit__(self, *exc: Any) -> bool: ...
    def stats(self) -> Report: ...
    @property
    def source(self) -> str: ...
    @property
    def link_type(self) -> str: ...
    @property
    def dlt(self) -> int: ...
    @property
    def snaplen(self) -> int: ...
    @property
    def queues(self) -> List[int]: ...

class Event:
    """One event of the stream layer."""

    @property
    def kind(self) -> Literal["created", "data", "gap", "closed"]: ...
    @property
    def id(self) -> int: ...
    @property
    def offset(self) -> Optional[int]: ...
    @property
    def data(self) -> Optional[bytes]: ...
    @property
    def overlap(self) -> Optional[int]: ...
    @property
    def length(self) -> Optional[int]: ...
    @property
    def stream(self) -> Optional[Dict[str, Any]]: ...

class Flows:
    """Flow records as columns (numpy arrays built in Rust); to_pandas() and to_arrow().

    Columns (name: pandas dtype / Arrow type):
    src_ip: str / string; src_port: uint16; dst_ip: str / string; dst_port: uint16;
    protocol: uint8; ip_version: uint8; community_id: str / string (Community ID v1); queue: uint16;
    first_seen, last_seen: datetime64[ns, UTC] / timestamp[ns, tz=UTC];
    duration: timedelta64[ns] / duration[ns];
    src2dst_packets, src2dst_bytes, src2dst_payload_bytes: uint64; src2dst_tcp_flags: uint8;
    dst2src_packets, dst2src_bytes, dst2src_payload_bytes: uint64; dst2src_tcp_flags: uint8;
    bidirectional_packets, bidirectional_bytes: uint64;
    end_reason: category / dictionary<values=string, indices=uint8> (END_REASONS).
    weir.FLOW_COLUMNS says what each means.
    """

    columns: Dict[str, numpy.ndarray]
    end_reasons: Tuple[str, ...]
    stats: Dict[str, Any]
    report: Report
    def __len__(self) -> int: ...
    def to_pandas(self) -> Any: ...
    def to_arrow(self) -> Any: ...

class Streams:
    report: Optional[Report]
    stats: Optional[Dict[str, Any]]
    def __iter__(self) -> Iterator[Event]: ...
    def run(
        self,
        on_created: Optional[Callable[[Event], Any]] = ...,
        on_data: Optional[Callable[[Event], Any]] = ...,
        on_gap: Optional[Callable[[Event], Any]] = ...,
        on_closed: Optional[Callable[[Event], Any]] = ...,
    ) -> Dict[str, Any]: ...
    def close(self) -> None: ...
    def __enter__(self) -> "Streams": ...
    def __exit__(self, *exc: Any) -> None: ...

FLOW_COLUMNS: Tuple[Tuple[str, str, str, str], ...]
END_REASONS: Tuple[str, ...]

class Error(Exception): ...
class BadInputError(Error): ...
class MalformedTraceError(BadInputError): ...
class FilterError(BadInputError): ...
class NoSuchDeviceError(BadInputError): ...
class MissingCapabilityError(Error): ...
class BusyError(Error): ...
class StalePacketError(Error): ...
class Notice(UserWarning): ...

def count(
    source: _Source,
    *,
    queues: _Queues = None,
    filter: Optional[str] = None,
    filter_engine: Literal["jit", "interp"] = "jit",
    packets: Optional[int] = None,
    duration: Optional[float] = None,
    pps: Optional[float] = None,
    mbps: Optional[float] = None,
    speed: Optional[float] = None,
    pool: _Pool = None,
    trace_access: Literal["auto", "map", "walk", "read"] = "auto",
    cpus: _Cpus = None,
    balance: str = "basic",
    locality: Optional[int] = None,
    locality_timeout_ms: int = 50,
    locality_double: bool = False,
    snaplen: int = 262144,
    promisc: bool = True,
    netns: Optional[_Source] = None,
    fanout: str = "hash",
    rollover: bool = False,
    block_kib: int = 1024,
    blocks: int = 64,
    block_timeout_ms: int = 100,
    frame_size: int = 2048,
    ring_size: Optional[int] = None,
    xdp_ring_mib: Optional[int] = None,
    xdp_spread: Literal["hash", "queue"] = "hash",
    zero_copy: Literal["auto", "on", "off"] = "auto",
    replace_xdp: bool = False,
    take_host_traffic: bool = False,
    timestamps: Optional[Literal["kernel", "tsc", "clock"]] = None,
) -> Report: ...
def packets(
    source: _Source,
    *,
    queues: _Queues = None,
    filter: Optional[str] = None,
    filter_engine: Literal["jit", "interp"] = "jit",
    packets: Optional[int] = None,
    duration: Optional[float] = None,
    pps: Optional[float] = None,
    mbps: Optional[float] = None,
    speed: Optional[float] = None,
    pool: _Pool = None,
    trace_access: Literal["auto", "map", "walk", "read"] = "map",
    cpus: _Cpus = None,
    balance: str = "basic",
    locality: Optional[int] = None,
    locality_timeout_ms: int = 50,
    locality_double: bool = False,
    snaplen: int = 262144,
    promisc: bool = True,
    netns: Optional[_Source] = None,
    fanout: str = "hash",
    rollover: bool = False,
    block_kib: int = 1024,
    blocks: int = 64,
    block_timeout_ms: int = 100,
    frame_size: int = 2048,
    ring_size: Optional[int] = None,
    xdp_ring_mib: Optional[int] = None,
    xdp_spread: Literal["hash", "queue"] = "hash",
    zero_copy: Literal["auto", "on", "off"] = "auto",
    replace_xdp: bool = False,
    take_host_traffic: bool = False,
    timestamps: Optional[Literal["kernel", "tsc", "clock"]] = None,
) -> Packets: ...
def flows(
    source: _Source,
    *,
    biflow: bool = True,
    idle_timeout: int = 60,
    active_timeout: int = 300,
    max_flows: int = 1000000,
    prealloc: int = 10000,
    kernel_cutoff: bool = True,
    kernel_flows: int = 65536,
    kernel_install_after: int = 16,
    queues: _Queues = None,
    filter: Optional[str] = None,
    filter_engine: Literal["jit", "interp"] = "jit",
    packets: Optional[int] = None,
    duration: Optional[float] = None,
    pps: Optional[float] = None,
    mbps: Optional[float] = None,
    speed: Optional[float] = None,
    pool: _Pool = None,
    trace_access: Literal["auto", "map", "walk", "read"] = "auto",
    cpus: _Cpus = None,
    balance: str = "basic",
    locality: Optional[int] = None,
    locality_timeout_ms: int = 50,
    locality_double: bool = False,
    snaplen: int = 262144,
    promisc: bool = True,
    netns: Optional[_Source] = None,
    fanout: str = "hash",
    rollover: bool = False,
    block_kib: int = 1024,
    blocks: int = 64,
    block_timeout_ms: int = 100,
    frame_size: int = 2048,
    ring_size: Optional[int] = None,
    xdp_ring_mib: Optional[int] = None,
    xdp_spread: Literal["hash", "queue"] = "hash",
    zero_copy: Literal["auto", "on", "off"] = "auto",
    replace_xdp: bool = False,
    take_host_traffic: bool = False,
    timestamps: Optional[Literal["kernel", "tsc", "clock"]] = None,
) -> Flows: ...
def streams(
    source: _Source,
    *,
    mode: Literal["tcp-fast", "tcp-strict", "packets"] = "tcp-fast",
    cutoff: Optional[int] = None,
    classes: Optional[Sequence[str]] = None,
    piece: int = 16384,
    piece_overlap: int = 0,
    flush_timeout_ms: Optional[int] = None,
    idle_timeout: int = 300,
    max_streams: int = 1000000,
    prealloc: int = 10000,
    memory: int = 268435456,
    hold_limit: int = 262144,
    midstream: bool = False,
    ignore_window: bool = False,
    kernel_cutoff: bool = True,
    kernel_flows: int = 65536,
    kernel_install_after: int = 16,
    queues: _Queues = None,
    filter: Optional[str] = None,
    filter_engine: Literal["jit", "interp"] = "jit",
    packets: Optional[int] = None,
    duration: Optional[float] = None,
    pps: Optional[float] = None,
    mbps: Optional[float] = None,
    speed: Optional[float] = None,
    pool: _Pool = None,
    trace_access: Literal["auto", "map", "walk", "read"] = "auto",
    cpus: _Cpus = None,
    balance: str = "basic",
    locality: Optional[int] = None,
    locality_timeout_ms: int = 50,
    locality_double: bool = False,
    snaplen: int = 262144,
    promisc: bool = True,
    netns: Optional[_Source] = None,
    fanout: str = "hash",
    rollover: bool = False,
    block_kib: int = 1024,
    blocks: int = 64,
    block_timeout_ms: int = 100,
    frame_size: int = 2048,
    ring_size: Optional[int] = None,
    xdp_ring_mib: Optional[int] = None,
    xdp_spread: Literal["hash", "queue"] = "hash",
    zero_copy: Literal["auto", "on", "off"] = "auto",
    replace_xdp: bool = False,
    take_host_traffic: bool = False,
    timestamps: Optional[Literal["kernel", "tsc", "clock"]] = None,
) -> Streams: ...
