#!/usr/bin/env python3
"""Why do tcpflow and libnids write different bytes for one direction of a TCP
connection? Reads the trace (stdlib only: pcap and pcapng; Ethernet with 802.1Q
and 802.1ad tags, Linux cooked, raw IP, null/loopback) and reports the facts of
the direction that explain a difference, and the reason compare.py files it
under. Used by compare.py --diagnose, and by hand:

    tests/streams/diagnose.py TRACE FILE_NAME [--tcpflow-size N --nids-size N]
"""
import ipaddress
import re
import struct
import sys

NAME = re.compile(r"^(.+)\.(\d{5})-(.+)\.(\d{5})(?:--(\d+))?(?:c(\d+))?$")


def frames(path):
    """(linktype, caplen, data) for every frame of a pcap or pcapng file."""
    import gzip
    with (gzip.open if path.endswith(".gz") else open)(path, "rb") as f:
        buf = f.read()
    magic = buf[:4]
    if magic in (b"\xd4\xc3\xb2\xa1", b"\xa1\xb2\xc3\xd4", b"\x4d\x3c\xb2\xa1", b"\xa1\xb2\x3c\x4d"):
        e = "<" if magic[0] in (0xD4, 0x4D) else ">"
        link = struct.unpack(e + "I", buf[20:24])[0] & 0xFFFF
        off = 24
        while off + 16 <= len(buf):
            _, _, incl, _ = struct.unpack(e + "IIII", buf[off:off + 16])
            yield link, buf[off + 16:off + 16 + incl]
            off += 16 + incl
    elif magic == b"\x0a\x0d\x0d\x0a":
        e = "<" if buf[8:12] == b"\x4d\x3c\x2b\x1a" else ">"
        links = []
        off = 0
        while off + 12 <= len(buf):
            btype, blen = struct.unpack(e + "II", buf[off:off + 8])
            if blen < 12:
                break
            body = buf[off + 8:off + blen - 4]
            if btype == 0x0A0D0D0A:
                links = []
            elif btype == 1:
                links.append(struct.unpack(e + "H", body[:2])[0])
            elif btype == 6:
                iface, _, _, cap, _ = struct.unpack(e + "IIIII", body[:20])
                if iface < len(links):
                    yield links[iface], body[20:20 + cap]
            elif btype == 3 and links:
                yield links[0], body[4:]
            off += blen


def ip_of(link, d):
    """(ip bytes, vlan tags) or None."""
    tags = []
    if link == 1:
        et, off = (d[12] << 8 | d[13]) if len(d) >= 14 else 0, 14
        while et in (0x8100, 0x88A8, 0x9100) and len(d) >= off + 4:
            tags.append((et, d[off] << 8 | d[off + 1]))
            et, off = d[off + 2] << 8 | d[off + 3], off + 4
        return (d[off:], tags) if et in (0x0800, 0x86DD) else None
    if link == 113:
        return (d[16:], tags) if len(d) >= 16 and d[14:16] in (b"\x08\x00", b"\x86\xdd") else None
    if link in (101, 12, 14):
        return d, tags
    if link in (0, 108):
        return d[4:], tags
    return None


def csum_ok(h):
    s = sum(struct.unpack("!%dH" % (len(h) // 2), h))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return s == 0xFFFF


def facts(path, src, sport, dst, dport):
    """Facts about the direction src:sport -> dst:dport and its reverse."""
    f = dict(syn=0, synack=0, syn_data=0, data_segs=0, padded=0, truncated=0, frag=0, bad_ipsum=0,
             vlan_stack=0, outer_8021ad=0, fin=0, rst_fwd=0, rst_rev=0, data_after_close=0, overlap_diff=0,
             gap=0, keepalive=0, backwards=0, linktype=None, ipv6=":" in src)
    seen = {}          # seq -> payload, for overlap checks
    nxt = None
    closed = False
    for link, d in frames(path):
        f["linktype"] = link
        r = ip_of(link, d)
        if not r:
            continue
        ip, tags = r
        if len(ip) < 20:
            continue
        if ip[0] >> 4 == 4:
            hl = (ip[0] & 15) * 4
            if ip[9] != 6 or len(ip) < hl + 20:
                continue
            s, t = str(ipaddress.IPv4Address(ip[12:16])), str(ipaddress.IPv4Address(ip[16:20]))
            total = ip[2] << 8 | ip[3]
            fragoff = (ip[6] << 8 | ip[7]) & 0x3FFF
            tcp = ip[hl:]
            cap_payload_end = len(ip)
        elif ip[0] >> 4 == 6:
            if ip[6] != 6 or len(ip) < 60:
                continue
            s, t = str(ipaddress.IPv6Address(ip[8:24])), str(ipaddress.IPv6Address(ip[24:40]))
            total, hl, fragoff, tcp, cap_payload_end = 40 + (ip[4] << 8 | ip[5]), 40, 0, ip[40:], len(ip)
        else:
            continue
        sp, dp = tcp[0] << 8 | tcp[1], tcp[2] << 8 | tcp[3]
        fwd = (s, sp, t, dp) == (src, sport, dst, dport)
        rev = (s, sp, t, dp) == (dst, dport, src, sport)
        if not (fwd or rev):
            continue
        seq = struct.unpack("!I", tcp[4:8])[0]
        flags = tcp[13]
        thl = (tcp[12] >> 4) * 4
        plen = max(0, min(total, cap_payload_end) - hl - thl)
        if fwd:
            if len(tags) > 1 or (tags and tags[0][0] != 0x8100):
                f["vlan_stack"] += 1
            if ip[0] >> 4 == 4:
                if not csum_ok(ip[:hl]):
                    f["bad_ipsum"] += 1
                if fragoff or (ip[6] & 0x20):
                    f["frag"] += 1
            if len(ip) > total and plen == 0 and len(ip) - total > 0:
                f["padded"] += 1
            elif len(ip) > total and plen > 0:
                f["padded"] += 1
            if len(ip) < total:
                f["truncated"] += 1
            if flags & 2:
                f["syn" if not flags & 16 else "synack"] += 1
                if plen:
                    f["syn_data"] += 1
                nxt = (seq + 1) & 0xFFFFFFFF
            if flags & 4:
                f["rst_fwd"] += 1
                closed = True
            payload = tcp[thl:thl + plen]
            if plen:
                f["data_segs"] += 1
                if closed:
                    f["data_after_close"] += 1
                if nxt is None:
                    nxt = seq
                delta = (seq - nxt + 2**31) % 2**32 - 2**31
                if delta > 0:
                    f["gap"] += 1
                elif delta < 0:
                    if plen == 1 and delta == -1:
                        f["keepalive"] += 1
                    f["backwards"] += 1
                    for s0, p0 in seen.items():
                        o = (seq - s0) % 2**32
                        if o < len(p0) and p0[o:o + plen] != payload[:len(p0) - o]:
                            f["overlap_diff"] += 1
                            break
                if len(seen) < 5000:
                    seen[seq] = payload
                end = (seq + plen) & 0xFFFFFFFF
                if (end - nxt) % 2**32 < 2**31:
                    nxt = end
            if flags & 1:
                f["fin"] += 1
        else:
            if flags & 2:
                f["synack" if flags & 16 else "syn"] += 1
            if flags & 4:
                f["rst_rev"] += 1
                closed = True
    return f


def reason(f, tcpflow_size, nids_size, name):
    """The REASONS key of compare.py that explains the difference, or None."""
    if f["ipv6"] and nids_size is None:
        return "no-ipv6"
    if f["linktype"] not in (1, 113, 101, 12, 14, 0, 108):
        return "linktype"
    if f["vlan_stack"] and nids_size is None:
        return "vlan-stack"
    if f["bad_ipsum"]:
        return "ip-checksum"
    if f["frag"]:
        return "fragments"
    if f["truncated"]:
        return "truncated"
    if f["padded"] and not f["data_segs"]:
        return "eth-padding"  # the direction carried no payload: tcpflow's file is padding only
    m = NAME.match(name)
    if m and m.group(6) and nids_size is None:
        if f["data_after_close"]:
            return "after-close"
        return "eth-padding" if f["padded"] else "port-reuse"
    if f["syn_data"]:
        return "syn-data"
    if nids_size is None and not (f["syn"] and f["synack"]):
        return "no-handshake"
    if f["padded"] and tcpflow_size is not None and nids_size is not None and tcpflow_size > nids_size:
        return "eth-padding"
    if f["overlap_diff"]:
        return "overlap"
    if f["gap"]:
        return "gap"
    if f["keepalive"]:
        return "keepalive"
    if f["data_after_close"]:
        return "after-close"
    if f["rst_fwd"] or f["rst_rev"]:
        return "rst-direction"
    if f["syn"] > 1 or f["synack"] > 1:
        return "port-reuse"
    return None


def split_name(name):
    m = NAME.match(name)
    if not m:
        return None
    a, ap, b, bp = m.group(1), int(m.group(2)), m.group(3), int(m.group(4))
    if ":" not in a:
        a = ".".join(str(int(x)) for x in a.split("."))
        b = ".".join(str(int(x)) for x in b.split("."))
    return a, ap, b, bp


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("name")
    ap.add_argument("--tcpflow-size", type=int)
    ap.add_argument("--nids-size", type=int)
    a = ap.parse_args()
    t = split_name(a.name)
    fx = facts(a.trace, *t)
    print({k: v for k, v in fx.items() if v})
    print("reason:", reason(fx, a.tcpflow_size, a.nids_size, a.name))
