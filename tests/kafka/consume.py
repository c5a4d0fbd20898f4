#!/usr/bin/env python3
"""Reads back what weir published to Kafka, for weir's tests and benchmarks.

Consumes every message of the topics from the beginning (confluent-kafka,
librdkafka's Python client) until it has --expect messages, or until no
message came for --idle seconds, and prints one JSON line per record:
its partition and key, and the record's fields in one shape for either
encoding (addresses as text, times in ns, ICMP's type and code).

Every message is checked on the way, and each problem is printed on
standard error and makes the exit status 1:
- json: the object is valid against schema/eve.schema.json (jsonschema);
- protobuf: the value is one varint-length-prefixed Record of
  schema/weir.proto, decoded by code protoc (grpcio-tools) generates from
  the published file, the length taking the whole value;
- both: the key is the record's community_id, and the community_id is the
  reference implementation's (the `communityid` package) for the record's
  endpoints (flows: ICMP by type and code).
"""
import argparse
import importlib
import ipaddress
import json
import os
import subprocess
import sys
import tempfile

import communityid
from confluent_kafka import Consumer, KafkaError, TopicPartition

HERE = os.path.dirname(os.path.abspath(__file__))
SCHEMA = os.path.join(HERE, "..", "..", "schema")
PROTOS = {"TCP": 6, "UDP": 17, "SCTP": 132, "ICMP": 1, "IPv6-ICMP": 58}


def load_proto():
    """Compiles schema/weir.proto with grpcio-tools' protoc; returns its module."""
    from grpc_tools import protoc
    out = tempfile.mkdtemp(prefix="weir-proto-")
    rc = protoc.main(["protoc", f"-I{SCHEMA}", f"--python_out={out}", os.path.join(SCHEMA, "weir.proto")])
    if rc != 0:
        sys.exit(f"consume.py: protoc refused schema/weir.proto (status {rc})")
    sys.path.insert(0, out)
    return importlib.import_module("weir_pb2")


def varint(b):
    n = shift = 0
    for i, c in enumerate(b):
        n |= (c & 0x7F) << shift
        if c < 0x80:
            return n, i + 1
        shift += 7
    raise ValueError("a varint cut short")


def from_proto(pb, value):
    length, used = varint(value)
    if used + length != len(value):
        raise ValueError(f"length prefix {length} + {used} bytes is not the value's {len(value)}")
    r = pb.Record()
    r.ParseFromString(value[used:])
    out = {
        "timestamp_ns": r.timestamp_ns,
        "event_type": r.event_type,
        "community_id": r.community_id or None,
        "flow_id": r.flow_id,
        "proto": r.proto,
    }
    if r.event_type != "stats":
        out["src_ip"] = str(ipaddress.ip_address(r.src_ip))
        out["dest_ip"] = str(ipaddress.ip_address(r.dest_ip))
        for f in ("src_port", "dest_port", "icmp_type", "icmp_code"):
            if r.HasField(f):
                out[f] = getattr(r, f)
    which = r.WhichOneof("event")
    if which != r.event_type:
        raise ValueError(f"event_type {r.event_type} but the {which} field is set")
    body = getattr(r, which)
    if which == "stats":
        out["stats"] = json.loads(body.json)
    else:
        out[which] = {f.name: v for f, v in body.ListFields()}
        if which == "flow":
            for f in ("pkts_toserver", "pkts_toclient", "bytes_toserver", "bytes_toclient", "tcp_flags_ts", "tcp_flags_tc", "ingress"):
                out["flow"].setdefault(f, 0)
    return out


def iso_ns(text):
    # 2017-07-14T02:41:01.000000+0000: microseconds, UTC.
    from datetime import datetime, timezone
    dt = datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%f%z").astimezone(timezone.utc)
    return (int(dt.replace(microsecond=0).timestamp()) * 1_000_000 + dt.microsecond) * 1000


def from_json(e):
    out = {
        "timestamp_ns": iso_ns(e["timestamp"]),
        "event_type": e["event_type"],
        "community_id": e.get("community_id"),
        "flow_id": e.get("flow_id", 0),
    }
    if e["event_type"] != "stats":
        p = e["proto"]
        out["proto"] = PROTOS[p] if p in PROTOS else int(p)
        for f in ("src_ip", "dest_ip", "src_port", "dest_port", "icmp_type", "icmp_code"):
            if f in e:
                out[f] = e[f]
    else:
        out["proto"] = 0
    body = dict(e[e["event_type"]]) if e["event_type"] != "stats" else e["stats"]
    if e["event_type"] == "flow":
        body["start_ns"] = iso_ns(body.pop("start"))
        body["end_ns"] = iso_ns(body.pop("end"))
        body.pop("age")
        tcp = e.get("tcp", {})
        body["tcp_flags_ts"] = int(tcp.get("tcp_flags_ts", "0"), 16)
        body["tcp_flags_tc"] = int(tcp.get("tcp_flags_tc", "0"), 16)
    out[e["event_type"]] = body
    return out


def reference_id(ids, r):
    if r["event_type"] == "stats" or "src_ip" not in r:
        return None
    proto = r["proto"]
    src, dst = r["src_ip"], r["dest_ip"]
    if "icmp_type" in r:
        tpl = communityid.FlowTuple(proto, src, dst, r["icmp_type"], r["icmp_code"])
    elif "src_port" in r:
        tpl = communityid.FlowTuple(proto, src, dst, r["src_port"], r["dest_port"])
    else:
        tpl = communityid.FlowTuple(proto, src, dst)
    return ids.calc(tpl)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--brokers", required=True)
    ap.add_argument("--topic", action="append", required=True, help="repeatable")
    ap.add_argument("--format", choices=["json", "protobuf"], required=True)
    ap.add_argument("--expect", type=int, help="stop once this many messages are in")
    ap.add_argument("--idle", type=float, default=10.0, help="stop after this long without a message")
    ap.add_argument("--no-check-schema", action="store_true", help="skip the JSON Schema (for speed)")
    args = ap.parse_args()

    pb = load_proto() if args.format == "protobuf" else None
    validator = None
    if args.format == "json" and not args.no_check_schema:
        import jsonschema
        schema = json.load(open(os.path.join(SCHEMA, "eve.schema.json")))
        validator = jsonschema.Draft202012Validator(schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
    ids = communityid.CommunityID()
    c = Consumer({"bootstrap.servers": args.brokers, "group.id": f"weir-test-{os.getpid()}",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest", "enable.partition.eof": False})
    # Every partition from offset 0, assigned by hand: no group rebalance to wait for.
    md = c.list_topics(timeout=30)
    parts = []
    for t in args.topic:
        if t not in md.topics or md.topics[t].error is not None:
            sys.exit(f"consume.py: no topic {t} at {args.brokers}")
        parts += [TopicPartition(t, p, 0) for p in md.topics[t].partitions]
    c.assign(parts)
    n = bad = 0
    import time
    last = time.monotonic()
    out = sys.stdout
    while args.expect is None or n < args.expect:
        msgs = c.consume(num_messages=10000, timeout=0.5)
        if not msgs:
            if time.monotonic() - last > args.idle:
                break
            continue
        last = time.monotonic()
        for m in msgs:
            if m.error():
                print(f"consume.py: {m.error()}", file=sys.stderr)
                bad += 1
                continue
            n += 1
            key = m.key().decode() if m.key() is not None else None
            try:
                if pb is not None:
                    r = from_proto(pb, m.value())
                else:
                    e = json.loads(m.value())
                    if validator is not None:
                        for err in validator.iter_errors(e):
                            raise ValueError(f"schema: {err.message}")
                    r = from_json(e)
            except Exception as ex:  # a message the checks refuse is reported, not fatal
                print(f"consume.py: {m.topic()}[{m.partition()}]@{m.offset()}: {ex}", file=sys.stderr)
                bad += 1
                continue
            want = reference_id(ids, r)
            if r["community_id"] != want or key != want:
                print(f"consume.py: {m.topic()}[{m.partition()}]@{m.offset()}: community_id {r['community_id']}, key {key}, "
                      f"the reference's {want}", file=sys.stderr)
                bad += 1
            r["partition"] = m.partition()
            r["topic"] = m.topic()
            r["key"] = key
            out.write(json.dumps(r, sort_keys=True) + "\n")
    c.close()
    print(f"consume.py: {n} messages, {bad} refused", file=sys.stderr)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
