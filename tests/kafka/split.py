#!/usr/bin/env python3
"""Splits a pcap file into N files as a packet broker splits a link among
sensors: by a symmetric hash of the packet's IP addresses (both directions
of a connection, and every fragment of a datagram, go to the same sensor).

    split.py IN.pcap OUT-PREFIX N      writes OUT-PREFIX0.pcap ... OUT-PREFIX{N-1}.pcap

Packets without IP go to the first file. Classic pcap (any byte order,
micro- or nanosecond), Ethernet with any number of VLAN tags.
"""
import struct
import sys
import zlib


def addresses(frame):
    off, etype = 12, None
    while off + 2 <= len(frame):
        etype = struct.unpack_from("!H", frame, off)[0]
        if etype in (0x8100, 0x88A8):
            off += 4
            continue
        off += 2
        break
    if etype == 0x0800 and len(frame) >= off + 20:
        return frame[off + 12:off + 16], frame[off + 16:off + 20]
    if etype == 0x86DD and len(frame) >= off + 40:
        return frame[off + 8:off + 24], frame[off + 24:off + 40]
    return None


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    src, prefix, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    data = open(src, "rb").read()
    magic = data[:4]
    endian = "<" if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    if struct.unpack(endian + "I", magic)[0] not in (0xA1B2C3D4, 0xA1B23C4D):
        sys.exit(f"split.py: {src} is not a classic pcap file")
    if struct.unpack_from(endian + "I", data, 20)[0] != 1:
        sys.exit(f"split.py: {src} is not Ethernet")
    outs = [open(f"{prefix}{i}.pcap", "wb") for i in range(n)]
    for o in outs:
        o.write(data[:24])
    off, counts = 24, [0] * n
    while off + 16 <= len(data):
        incl = struct.unpack_from(endian + "I", data, off + 8)[0]
        rec = data[off:off + 16 + incl]
        ends = addresses(rec[16:])
        i = zlib.crc32(b"".join(sorted(ends))) % n if ends else 0
        outs[i].write(rec)
        counts[i] += 1
        off += 16 + incl
    for o in outs:
        o.close()
    print(" ".join(str(c) for c in counts))


if __name__ == "__main__":
    main()
