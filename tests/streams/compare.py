#!/usr/bin/env python3
"""The oracle comparison of `weir streams -o` (issue 20).

For every trace of ../shared/corpus/zeek-traces and tcpdump-4.99.3 (gzip'd ones
are unpacked to a temporary file first), run
    tcpflow -r TRACE -o D1                 (tcpflow 1.6.1)
    nids_streams data TRACE -o D2          (bench/peers/nids_streams.c, libnids 1.26)
    WEIR streams TRACE -o D3               (left out with --peers-only)
and compare the sets of file names (tcpflow's report.xml aside) and each file's
bytes. A file that is not the same in every tool is a difference; it must be
documented in DOCUMENTED (trace and file name) or match one of the RULES below,
with a reason in REASONS, or the run fails (exit 1) and lists it. A documented
difference names the tools whose file is expected to differ ("odd"); the other
tools must still agree with each other, so a documented tcpflow quirk does not
hide a weir bug. A trace that tcpflow cannot read is skipped, and said so.

usage: tests/streams/compare.py [--weir PATH] [--nids PATH] [--peers-only] [-j N]
                                [--trace SUBSTRING] [--keep DIR] [--verbose]
Exit 0: no undocumented difference and no stale entry (one naming a file that
no longer differs); 1: some; 2: a tool is missing or failed.
"""
import argparse
import concurrent.futures
import gzip
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CORPUS = os.path.join(os.path.dirname(ROOT), "shared", "corpus")
FOLDERS = ["zeek-traces", "tcpdump-4.99.3"]
TRACE_EXT = (".pcap", ".pcapng", ".cap", ".trace", ".pcap.gz", ".pcapng.gz")
TCPFLOW_OTHER = {"report.xml"}  # tcpflow's run report; not a stream

# Why tools write different bytes or different files. Each was checked on the
# packets (tcpdump -r TRACE -nn -S -v) and against the tools' source.
REASONS = {
    "no-ipv6": "libnids reassembles TCP over IPv4 only: it has no file for an IPv6 connection",
    "no-handshake": "libnids follows only connections whose SYN, SYN-ACK and ACK it saw; tcpflow "
                    "writes any TCP payload, starting a file at the first segment it sees",
    "eth-padding": "tcpflow 1.6.1 takes the TCP payload length from the captured length, not the IPv4 "
                   "total length, so Ethernet padding after a short segment is written as data "
                   "(tcpdemux.cpp process_ip4: ip_payload_len = pi.ip_datalen - ip_header_len)",
    "truncated": "the capture cut the frames (snaplen): tcpflow writes the captured part of a segment, "
                 "libnids drops a frame shorter than its IPv4 total length",
    "gap": "a segment was never captured: tcpflow leaves a hole and writes the data after it, libnids "
           "delivers nothing past the hole",
    "overlap": "retransmitted or overlapping segments carry different bytes: tcpflow writes every copy "
               "at its offset (the last copy wins), libnids keeps the first copy",
    "syn-data": "the SYN carries data (TCP Fast Open or a crafted packet): tcpflow writes it, libnids "
                "ignores payload on a SYN",
    "port-reuse": "the same 4-tuple carries a new connection while the old one is still open or "
                  "half-closed: tcpflow ignores the new SYN and writes the new data into the old file "
                  "at sequence offsets, or starts cN files after a FIN; libnids follows its own "
                  "state machine",
    "ip-checksum": "the IPv4 header checksum is wrong: libnids always verifies it and drops the packet, "
                   "tcpflow does not look",
    "fragments": "the TCP segment came in IP fragments: libnids reassembles them, tcpflow 1.6.1 drops "
                 "every fragment but the first and takes the first as the whole packet",
    "vlan-stack": "more than one VLAN tag or an 802.1ad outer tag: libnids reads IPv4 only after at "
                  "most one 802.1Q tag",
    "window": "the segment lies outside the receiver's advertised window or fails the PAWS timestamp "
              "check: libnids drops it (tcp.c process_tcp: a segment starting at or past the receiver's latest "
              "ack + window * scale), and the hole it leaves is never filled, so its file stops there; tcpflow and "
              "weir write it (checked: smtp/smtp-many-addresses.pcap.gz, last ack 1236408287 win 8192, libnids "
              "stops at 1236417047, the first segment past 1236416479; redis/oss-fuzz-473580107.pcap, ack 115568 "
              "win 55000, stops at 170669; http/206_example_b.pcap 80 > 3254, segments sent while the receiver "
              "said win 0, which it then SACKed)",
    "after-close": "data arrives after the connection closed (FIN seen both ways, or RST): tcpflow "
                   "opens a new cN file unless the bytes match what it already wrote; libnids drops it",
    "keepalive": "a one-byte keepalive (sequence one below the next expected) carries a garbage byte: "
                 "tcpflow skips it when it comes in order, otherwise overwrites; libnids drops it",
    "rst-direction": "a RST ends the whole connection in libnids but only the sender's direction in "
                     "tcpflow, which keeps writing the other direction",
    "tcpflow-overread": "the frame ends inside the IPv4 header (its options were not captured): tcpflow 1.6.1 "
                        "reads a TCP header and payload past the captured bytes and writes what memory held there "
                        "(a different file on each run); libnids and weir find no TCP header and write nothing "
                        "(checked: trunc/ipv4-internally-truncated-header.pcap, one 34-byte frame whose IPv4 header "
                        "says 60 bytes, total length 114)",
    "before-start": "no SYN was seen and a later segment lies before the first one: tcpflow 1.6.1 moves its file's "
                    "start back to that segment (tcpip.cpp store_packet: insert_bytes = -offset, shift_file), weir "
                    "refuses bytes before the stream's offset 0, the first segment it saw (checked: "
                    "modbus/fuzz-1011.pcap 502 > 51411, seq 3291348277 first, then 3290103785: tcpflow's file is "
                    "that segment, a hole, and weir's file from byte 1244492)",
    "seq-int-min": "a segment lies exactly 2^31 sequence numbers from tcpflow's next expected one: tcpflow 1.6.1's "
                   "abs(delta) of INT32_MIN stays negative, so its 16 MiB max_seek test does not start a new flow and "
                   "it shifts its file by almost 2^31 bytes to put the segment first (tcpflow -d 25 prints "
                   "'insert(0,2147483228)'); weir reads a number 2^31 away as lying behind (RFC 1982 leaves it "
                   "undefined) and refuses it (checked: modbus/fuzz-72.pcap 2582 > 502, seq 1911349326 after "
                   "4058832962:4058832974; tcpflow's file grows to 2^32 - 12 bytes)",
    "seq-jump": "a segment lies more than 16 MiB from tcpflow's next expected sequence number: tcpflow 1.6.1 "
                "(tcpdemux.cpp, max_seek) ends the flow and starts a new cN file there, and again when the numbers "
                "jump back; weir keeps one stream per connection, refuses what lies before its offset 0 and writes "
                "the rest at its offsets (checked: modbus/fuzz-72.pcap 502 > 2582, SYN at 2322986688, then "
                "1886779072 (tcpflow's c1), then 2322986724 on (tcpflow's c2): weir's file is tcpflow's first "
                "file, a 29-byte hole and c2)",
    "null-af-inet6": "BSD loopback (NULL link) frames with address family 30 (macOS AF_INET6): tcpflow "
                     "1.6.1 writes no file for them (checked: redis/pipelining-example.pcap, tcpdump -e says "
                     "'AF IPv6 (30)', tcpflow writes only report.xml)",
    "ipv6-ext-header": "the IPv6 packet has an extension header (hop-by-hop, routing, destination options or an "
                       "atomic fragment header) before TCP: tcpflow 1.6.1 writes nothing for it (checked: "
                       "ipv6-http-atomic-frag.pcap, tcpdump shows HBH / RT6 / DSTOPT / frag (0|35) before "
                       "'GET /bad.html', 15 bytes, which weir writes)",
    "weir-truncated-gap": "a segment cut by the snapshot length: weir delivers the captured part and reports "
                          "the bytes not captured as a gap up to the stream's next byte or FIN, so its file "
                          "runs to the stream's true length with a hole; tcpflow's stops at the captured "
                          "bytes (checked: communityid/tcp.pcap, 34855 > 80 seq 1:497 length 496 with 30 "
                          "bytes captured, FIN at 497: weir 496 bytes, tcpflow 30)",
    "weir-no-window": "segments far outside any window (a sampled trace whose few segments spread over the "
                      "sequence space): weir in tcp-fast, the mode compared here, checks no window, so it writes them at their stream offsets after "
                      "gaps (a sparse file); tcpflow and libnids drop them (checked: ftp/bigtransfer.pcap 37150 > "
                      "59764, weir's size is (741174212 - 3914442134) mod 2^32, the span of the segments)",
    "linktype": "a link type only one tool decodes (tcpflow or libnids answers 'unknown datalink', or "
                "reads 802.11 / Prism / radiotap frames differently)",
}

# The tool whose file a reason makes differ, by default.
ODD = {
    "no-ipv6": "nids", "no-handshake": "nids", "eth-padding": "tcpflow", "truncated": "nids", "gap": "nids",
    "overlap": "tcpflow", "syn-data": "nids", "port-reuse": "tcpflow", "ip-checksum": "nids",
    "fragments": "tcpflow", "vlan-stack": "nids", "window": "nids", "after-close": "tcpflow",
    "keepalive": "tcpflow", "rst-direction": "tcpflow", "linktype": "tcpflow",
    "null-af-inet6": "tcpflow", "ipv6-ext-header": "tcpflow", "weir-no-window": "weir", "weir-truncated-gap": "weir",
    "tcpflow-overread": "tcpflow", "before-start": "tcpflow", "seq-int-min": "tcpflow", "seq-jump": "tcpflow",
}

# Differences found by running the tools on the corpus, explained one by one:
# trace (relative to the corpus) -> file name or "*" (every file of the trace)
# -> reason, or (reason, odd) where odd are the tools whose file differs
# ("tcpflow", "nids", "weir" or several joined by "+"); a bare reason takes its
# odd tool from ODD; or a list of those when a file has several causes (the
# odd tools are then all of theirs, e.g. tcpflow writes Ethernet padding and
# libnids has no file as it saw no handshake: only weir is left, so nothing is
# compared; a list therefore names only causes checked on the packets). Written from `compare.py --peers-only --diagnose`, each
# reason checked on sample packets with tcpdump (see REASONS).
DOCUMENTED = {
    'zeek-traces/auth_change_session_keys.pcap': {
        '192.168.001.002.49159-192.168.001.001.20000': 'eth-padding',
    },
    'zeek-traces/cisco-fabric-path.pcap': {
        '001.001.001.000.57005-002.002.002.002.48879': 'eth-padding',
        '001.001.001.002.57005-002.002.002.002.48879': 'eth-padding',
        '001.001.001.004.57005-002.002.002.002.48879': 'eth-padding',
        '001.001.001.006.57005-002.002.002.002.48879': 'eth-padding',
        '001.001.001.008.57005-002.002.002.002.48879': 'eth-padding',
        '001.001.001.010.57005-002.002.002.002.48879': 'eth-padding',
        '001.001.001.012.57005-002.002.002.002.48879': 'eth-padding',
        '001.001.001.014.57005-002.002.002.002.48879': 'eth-padding',
    },
    'zeek-traces/conn-size.pcap': {
        '194.064.249.244.00080-192.150.186.169.53063': 'eth-padding',
        '194.064.249.244.00080-192.150.186.169.53063c1': 'eth-padding',
    },
    'zeek-traces/dns-edns-ecs.pcap': {
        '192.054.112.030.00053-192.168.120.022.35059': 'no-handshake',
        '194.247.005.006.39005-194.247.005.014.00053': 'no-handshake',
        '194.247.005.014.00053-194.247.005.006.39005': 'no-handshake',
        '209.112.114.033.00053-192.168.120.022.56653': 'no-handshake',
        '213.248.220.001.00053-192.168.120.022.46869': 'no-handshake',
        '213.248.220.001.00053-192.168.120.022.54287': 'no-handshake',
    },
    'zeek-traces/http-qinq-0.pcap': {
        '141.142.228.005.59856-192.150.187.043.00080--45056': 'vlan-stack',
        '192.150.187.043.00080-141.142.228.005.59856--45056': 'vlan-stack',
    },
    'zeek-traces/irc-dcc-send-malformed-host.pcap': {
        '192.168.001.100.06667-192.168.001.200.12345': 'no-handshake',
    },
    'zeek-traces/irc-dcc-send-malformed-port.pcap': {
        '192.168.001.100.06667-192.168.001.200.12345': 'no-handshake',
    },
    'zeek-traces/mixed-vlan-mpls.pcap': {
        '010.000.000.015.00080-010.020.080.001.50343--4093': 'eth-padding',
        '010.000.000.015.00080-010.020.080.001.50343--4093c1': 'eth-padding',
        '010.020.080.001.50343-010.000.000.015.00080--4093': 'eth-padding',
    },
    'zeek-traces/mpls-in-vlan.pcap': {
        '065.065.065.065.19244-065.065.065.065.00080--3199': 'ip-checksum',
    },
    'zeek-traces/mqtt.pcap': {
        '010.000.001.004.49327-198.041.030.241.01883': 'no-handshake',
        '010.000.001.004.49330-198.041.030.241.01883': 'no-handshake',
        '198.041.030.241.01883-010.000.001.004.49327': 'no-handshake',
        '198.041.030.241.01883-010.000.001.004.49330': 'no-handshake',
    },
    'zeek-traces/ncp.pcap': {
        '010.003.001.092.08080-010.046.131.227.03287': 'eth-padding',
        '010.003.001.092.08080-010.046.131.227.03287c1': 'eth-padding',
        '010.003.001.112.33334-010.046.131.227.02132': 'no-handshake',
        '010.043.001.105.00524-010.046.131.227.02195': 'no-handshake',
        '010.046.131.227.02132-010.003.001.112.33334': 'ip-checksum',
        '010.046.131.227.02195-010.043.001.105.00524': 'ip-checksum',
    },
    'zeek-traces/nmap-vsn.pcap': {
        '192.168.001.001.00080-192.168.001.071.58024': 'eth-padding',
        '192.168.001.050.00080-192.168.001.071.58100': 'eth-padding',
        '192.168.001.065.00080-192.168.001.071.58113': 'eth-padding',
        '192.168.001.065.00080-192.168.001.071.58588': 'eth-padding',
        '192.168.001.065.00443-192.168.001.071.58604': 'eth-padding',
        '192.168.001.065.00443-192.168.001.071.58680': 'eth-padding',
    },
    'zeek-traces/raw_packets.pcap': {
        '192.168.001.103.49171-074.125.021.138.00443': 'no-handshake',
        '192.168.001.103.65493-064.004.023.176.40031': 'no-handshake',
    },
    'zeek-traces/smtp-one-side-only.pcap': {
        '192.150.187.022.57722-192.150.186.011.00025': 'no-handshake',
    },
    'zeek-traces/smtp.pcap': {
        '074.053.140.153.00025-010.010.001.004.01470': 'eth-padding',
        '074.053.140.153.00025-010.010.001.004.01470c1': 'eth-padding',
        '074.125.071.189.00443-192.168.133.100.49336': 'no-handshake',
        '192.168.133.100.49153-017.172.238.021.05223': 'no-handshake',
        '192.168.133.100.49285-066.196.121.026.05050': 'no-handshake',
    },
    'zeek-traces/vlan-qinqinq.pcap': {
        '141.142.228.005.59856-192.150.187.043.00080--30': 'vlan-stack',
        '192.150.187.043.00080-141.142.228.005.59856--30': 'vlan-stack',
    },
    'zeek-traces/web.pcap': {
        '125.190.109.199.12345-141.042.064.125.56729': 'eth-padding',
    },
    'zeek-traces/wikipedia.pcap': {
        '141.142.220.118.35634-208.080.152.002.00080': 'no-handshake',
        '208.080.152.002.00080-141.142.220.118.35634': 'no-handshake',
    },
    'zeek-traces/workshop_2011_browse.pcap': {
        '192.150.187.043.00080-010.000.002.015.49282': 'eth-padding',
        '192.150.187.043.00080-010.000.002.015.49283': 'eth-padding',
        '192.150.187.043.00080-010.000.002.015.49284': 'eth-padding',
        '192.150.187.043.00080-010.000.002.015.49285': 'eth-padding',
        '192.150.187.043.00080-010.000.002.015.49286': 'eth-padding',
        '192.150.187.043.00080-010.000.002.015.49287': 'eth-padding',
    },
    'zeek-traces/ftp/bigtransfer.pcap': {
        '192.168.056.101.37150-192.168.056.001.59764': 'weir-no-window',
        '192.168.056.101.37150-192.168.056.001.59764c1': 'port-reuse',
        '192.168.056.101.37150-192.168.056.001.59764c2': 'port-reuse',
        '192.168.056.101.37150-192.168.056.001.59764c3': 'port-reuse',
        '192.168.056.101.37150-192.168.056.001.59764c4': 'port-reuse',
        '192.168.056.101.37150-192.168.056.001.59764c5': 'port-reuse',
        '192.168.056.101.37150-192.168.056.001.59764c6': 'port-reuse',
        '192.168.056.101.37150-192.168.056.001.59764c7': 'port-reuse',
    },
    'zeek-traces/ftp/cwd-navigation.pcap': {
        '010.003.022.091.58218-010.167.025.101.00021': 'gap',
        '010.167.025.101.00021-010.003.022.091.58218': 'gap',
    },
    'zeek-traces/ftp/ftp-password-pass-command.pcap': {
        '192.168.010.188.00021-192.168.010.132.46648': 'eth-padding',
    },
    'zeek-traces/ftp/ftp-with-numbers-in-filename.pcap': {
        '164.107.123.006.00021-192.168.021.095.54089': 'no-handshake',
        '192.168.021.095.54089-164.107.123.006.00021': 'no-handshake',
    },
    'zeek-traces/ssh/single-conn.pcap': {
        '131.159.014.023.00022-192.150.186.169.49244': 'eth-padding',
    },
    'zeek-traces/ssh/ssh.client-side-half-duplex.pcap': {
        '192.168.001.031.51489-192.168.001.032.00022': 'no-handshake',
        '192.168.001.031.52294-192.168.001.032.00022': 'no-handshake',
        '192.168.001.032.33910-128.002.013.133.00022': 'no-handshake',
        '192.168.001.032.41164-128.002.010.238.00022': 'no-handshake',
        '192.168.001.032.41268-128.002.010.238.00022': 'no-handshake',
        '192.168.001.032.58641-131.103.020.168.00022': 'no-handshake',
        '192.168.001.032.58646-131.103.020.168.00022': 'no-handshake',
        '192.168.001.032.58649-131.103.020.168.00022': 'no-handshake',
        '192.168.001.079.51880-131.159.021.001.00022': 'no-handshake',
        '192.168.002.001.56594-192.168.002.158.00022': 'no-handshake',
        '192.168.002.001.56821-192.168.002.158.00022': 'no-handshake',
        '192.168.002.001.56837-192.168.002.158.00022': 'no-handshake',
        '192.168.002.001.56845-192.168.002.158.00022': 'no-handshake',
        '192.168.002.001.56875-192.168.002.158.00022': 'no-handshake',
        '192.168.002.001.56878-192.168.002.158.00022': 'no-handshake',
        '192.168.002.001.56940-192.168.002.158.00022': 'no-handshake',
        '192.168.002.001.57189-192.168.002.158.00022': 'no-handshake',
        '192.168.002.001.57191-192.168.002.158.00022': 'no-handshake',
        '192.168.002.001.57831-192.168.002.158.00022': 'no-handshake',
        '192.168.002.001.59246-192.168.002.158.00022': 'no-handshake',
    },
    'zeek-traces/ssh/ssh.pcap': {
        '192.168.001.031.51476-192.168.001.032.08118': 'no-handshake',
        '192.168.002.158.02200-192.168.002.001.55179c1': 'eth-padding',
    },
    'zeek-traces/ssh/ssh.server-side-half-duplex.pcap': {
        '128.002.010.238.00022-192.168.001.032.41164': 'no-handshake',
        '128.002.010.238.00022-192.168.001.032.41268': 'no-handshake',
        '128.002.013.133.00022-192.168.001.032.33910': 'no-handshake',
        '131.103.020.168.00022-192.168.001.032.58641': 'no-handshake',
        '131.103.020.168.00022-192.168.001.032.58646': 'no-handshake',
        '131.103.020.168.00022-192.168.001.032.58649': 'no-handshake',
        '131.159.021.001.00022-192.168.001.079.51880': 'no-handshake',
        '192.168.001.032.00022-192.168.001.031.51489': 'no-handshake',
        '192.168.001.032.00022-192.168.001.031.52294': 'no-handshake',
        '192.168.002.158.00022-192.168.002.001.56594': 'no-handshake',
        '192.168.002.158.00022-192.168.002.001.56821': 'no-handshake',
        '192.168.002.158.00022-192.168.002.001.56837': 'no-handshake',
        '192.168.002.158.00022-192.168.002.001.56845': 'no-handshake',
        '192.168.002.158.00022-192.168.002.001.56875': 'no-handshake',
        '192.168.002.158.00022-192.168.002.001.56878': 'no-handshake',
        '192.168.002.158.00022-192.168.002.001.56940': 'no-handshake',
        '192.168.002.158.00022-192.168.002.001.57189': 'no-handshake',
        '192.168.002.158.00022-192.168.002.001.57191': 'no-handshake',
        '192.168.002.158.00022-192.168.002.001.57831': 'no-handshake',
        '192.168.002.158.00022-192.168.002.001.59246': 'no-handshake',
    },
    'zeek-traces/ssh/ssh_client_sends_first_enc_pkt_with_newkeys.pcap': {
        '192.168.057.003.00022-010.000.002.015.61251': 'eth-padding',
    },
    'zeek-traces/ssh/ssh_version_199.pcap': {
        '010.000.000.001.59139-010.000.000.002.00022': 'eth-padding',
        '010.000.000.001.59139-010.000.000.002.00022c1': 'eth-padding',
        '010.000.000.002.00022-010.000.000.001.59139': 'eth-padding',
        '010.000.000.002.00022-010.000.000.001.59139c1': 'eth-padding',
    },
    'zeek-traces/trunc/ipv4-internally-truncated-header.pcap': {
        '163.253.048.183.00000-192.150.187.043.00000': 'tcpflow-overread',
    },
    'zeek-traces/tcp/ctu-64702-888.pcap': {
        '185.033.086.224.00888-192.168.001.108.64702': ['no-handshake', 'eth-padding'],
        '185.033.086.224.00888-192.168.001.108.64702c1': 'eth-padding',
        '192.168.001.108.64702-185.033.086.224.00888': 'eth-padding',
    },
    'zeek-traces/tcp/fin_retransmission.pcap': {
        '017.167.193.062.00443-010.001.030.117.55344': 'eth-padding',
    },
    'zeek-traces/tcp/handshake-reorder.pcap': {
        '141.142.228.005.59856-192.150.187.043.00080': 'no-handshake',
        '192.150.187.043.00080-141.142.228.005.59856': 'no-handshake',
    },
    'zeek-traces/tcp/http-on-irc-port-missing-syn.pcapng': {
        '141.142.228.005.06669-192.150.187.043.00080': 'no-handshake',
        '192.150.187.043.00080-141.142.228.005.06669': 'no-handshake',
    },
    'zeek-traces/tcp/missing-syn.pcap': {
        '125.190.109.199.00080-141.042.064.125.56730': 'no-handshake',
        '141.042.064.125.56730-125.190.109.199.00080': 'no-handshake',
    },
    'zeek-traces/tcp/no-handshake.pcap': {
        '141.142.228.005.59856-192.150.187.043.00080': 'no-handshake',
    },
    'zeek-traces/tcp/options.pcap': {
        '192.168.001.102.36861-193.001.193.064.00080': 'eth-padding',
    },
    'zeek-traces/tcp/payload-syn.pcap': {
        '192.168.000.001.00080-192.168.000.002.00080': 'syn-data',
    },
    'zeek-traces/tcp/payload-synack.pcap': {
        '192.168.000.002.00080-192.168.000.001.00080': 'syn-data',
    },
    'zeek-traces/tcp/qi_internet_SYNACK_curl_jsonip.pcap': {
        '096.126.098.124.00080-178.200.100.200.39976': 'overlap',
        '178.200.100.200.39976-096.126.098.124.00080c1': 'eth-padding',
        '178.200.100.200.39976-096.126.098.124.00080c2': 'eth-padding',
    },
    'zeek-traces/tcp/reassembly.pcap': {
        # diagnose.py: 5 truncated segments, 2 overlaps with different bytes.
        '063.193.213.194.02564-128.003.097.175.00080': [('truncated', 'nids'), ('overlap', 'tcpflow')],
    },
    'zeek-traces/tcp/retransmit-timeout.pcapng': {
        '010.000.000.001.51889-192.168.000.001.00080': 'no-handshake',
    },
    'zeek-traces/tcp/rst-inject-rae.pcap': {
        '001.002.000.002.02527-001.002.000.003.06649': [('rst-direction', 'tcpflow'), ('no-handshake', 'nids')],
        '001.002.000.003.06649-001.002.000.002.02527': 'eth-padding',
        '001.002.000.003.06649-001.002.000.002.02527c1': 'eth-padding',
    },
    'zeek-traces/tcp/tcp-fast-open.pcap': {
        '010.099.099.001.55534-010.099.099.045.00080': 'syn-data',
        '010.099.099.045.00080-010.099.099.001.55534': 'syn-data',
    },
    'zeek-traces/tcp/timestamp.pcap': {
        # diagnose.py: all 691 data segments cut by the snapshot length.
        '192.168.002.020.12345-192.168.001.010.60706': [('truncated', 'nids'), ('weir-truncated-gap', 'weir')],
    },
    'zeek-traces/rdp/rdp-no-cookie-mstshash.pcap': {
        '010.128.036.245.50204-010.132.153.076.03389': 'eth-padding',
    },
    'zeek-traces/rdp/rdp-to-ssl.pcap': {
        '192.168.001.150.03389-192.168.001.200.49206': 'eth-padding',
        '192.168.001.150.03389-192.168.001.200.49207': 'eth-padding',
    },
    'zeek-traces/rdp/rdp-unknown-keyboard.pcap': {
        '192.168.001.002.03389-192.168.001.001.54990': 'eth-padding',
    },
    'zeek-traces/rdp/rdp-x509.pcap': {
        '192.168.001.002.03389-192.168.001.001.54990': 'eth-padding',
    },
    'zeek-traces/redis/auth.pcap': {
        '127.000.000.001.06379-127.000.000.001.60010': 'no-handshake',
        '127.000.000.001.60010-127.000.000.001.06379': 'no-handshake',
    },
    'zeek-traces/redis/django-cloud.pcapng': {
        '018.234.186.095.10625-192.168.001.004.50044': 'no-handshake',
        '192.168.001.004.50044-018.234.186.095.10625': 'no-handshake',
    },
    'zeek-traces/redis/oss-fuzz-473580107.pcap': {
        '010.000.000.001.63945-010.000.000.002.00080': ['eth-padding', 'window'],
        '010.000.000.001.63945-010.000.000.002.00080c1': 'eth-padding',
        '010.000.000.002.00080-010.000.000.001.63945': 'eth-padding',
    },
    'zeek-traces/redis/pubsub.pcap': {
        '127.000.000.001.06379-127.000.000.001.60831': 'no-handshake',
        '127.000.000.001.60831-127.000.000.001.06379': 'no-handshake',
    },
    'zeek-traces/redis/set.pcap': {
        '127.000.000.001.06379-127.000.000.001.64356': 'no-handshake',
        '127.000.000.001.64356-127.000.000.001.06379': 'no-handshake',
    },
    'zeek-traces/redis/start-with-server.pcapng': {
        '127.000.000.001.06379-127.000.000.001.60206': 'ip-checksum',
        '127.000.000.001.60206-127.000.000.001.06379': 'ip-checksum',
    },
    'zeek-traces/redis/stream.pcap': {
        '127.000.000.001.06379-127.000.000.001.49992': 'no-handshake',
        '127.000.000.001.49992-127.000.000.001.06379': 'no-handshake',
    },
    'zeek-traces/rfb/vnc-scanner.pcap': {
        '010.000.000.149.05900-192.168.000.011.46381': 'eth-padding',
        '192.168.000.011.46381-010.000.000.149.05900': 'eth-padding',
        '192.168.000.011.46381-010.000.000.149.05900c1': 'eth-padding',
        '192.168.000.011.46381-010.000.000.149.05900c2': 'eth-padding',
    },
    'zeek-traces/spicy/gap-recovery.pcap': {
        '127.000.000.001.01042-127.000.000.001.53718': 'ip-checksum',
        '127.000.000.001.09000-127.000.000.001.56029': 'ip-checksum',
        '127.000.000.001.53718-127.000.000.001.01042': 'ip-checksum',
    },
    'zeek-traces/mysql/plain-amazon-rds.pcap': {
        '079.107.090.025.03306-082.239.087.025.58514': 'eth-padding',
    },
    'zeek-traces/mysql/selects_with_new_proto.pcap': {
        '047.098.114.044.03306-192.168.205.133.47752': 'eth-padding',
    },
    'zeek-traces/mysql/tls-12-amazon-rds.pcap': {
        '079.107.090.025.03306-082.239.087.025.58132': 'eth-padding',
    },
    'zeek-traces/mysql/tls-13-amazon-rds.pcap': {
        '079.107.090.025.03306-082.239.087.025.57902': 'eth-padding',
    },
    'zeek-traces/smtp/smtp-bdat-gap.pcap': {
        '010.000.000.001.12345-010.000.000.002.00025': 'gap',
    },
    'zeek-traces/smtp/smtp-bdat-pipeline-8bitmime.pcap': {
        '023.128.096.018.56074-217.146.107.083.00025c1': 'eth-padding',
    },
    'zeek-traces/smtp/smtp-many-addresses.pcap.gz': {
        '010.000.000.001.60606-010.000.000.002.00025': 'window',
    },
    'zeek-traces/modbus/4SICS-GeekLounge-151022-min.pcap': {
        '192.168.002.166.01987-192.168.088.095.00502': 'no-handshake',
        '192.168.088.095.00502-192.168.002.166.01987': 'no-handshake',
    },
    'zeek-traces/modbus/fuzz-1011.pcap': {
        '010.001.001.234.51411-010.010.005.104.00502': 'no-handshake',
        '010.010.005.104.00502-010.001.001.234.51411': ['no-handshake', 'before-start'],
    },
    'zeek-traces/modbus/fuzz-72.pcap': {
        '166.161.016.230.00502-192.168.066.235.02582': ['truncated', 'seq-jump'],
        '166.161.016.230.00502-192.168.066.235.02582c1': ['truncated', 'seq-jump'],
        '166.161.016.230.00502-192.168.066.235.02582c2': ['truncated', 'seq-jump'],
        '192.168.066.235.02582-166.161.016.230.00502': ['truncated', 'seq-int-min'],
    },
    'zeek-traces/modbus/modbus-and-non-modbus-p502.pcap': {
        '010.000.000.003.00502-010.000.000.009.03082': 'eth-padding',
        '010.000.000.009.03082-010.000.000.003.00502': 'eth-padding',
        '010.000.000.009.03082-010.000.000.003.00502c1': 'eth-padding',
        '062.122.184.123.07488-192.168.010.111.00502': 'eth-padding',
        '062.122.184.123.07488-192.168.010.111.00502c1': 'eth-padding',
        '198.074.056.135.60293-192.168.010.111.00502': 'after-close',
        '198.074.056.135.60293-192.168.010.111.00502c1': 'after-close',
    },
    'zeek-traces/modbus/modbus-eit.pcap': {
        '192.168.002.042.54297-192.168.088.100.00502': 'no-handshake',
        '192.168.002.042.54298-192.168.088.100.00502': 'no-handshake',
        '192.168.088.100.00502-192.168.002.042.54297': 'no-handshake',
        '192.168.088.100.00502-192.168.002.042.54298': 'no-handshake',
    },
    'zeek-traces/modbus/modbusBig.pcap': {
        '010.235.149.095.49447-010.235.149.243.00102': 'ip-checksum',
        '010.235.149.095.49456-010.235.149.240.00102': 'ip-checksum',
        '010.235.149.240.00102-010.235.149.095.49456': ['no-handshake', 'eth-padding'],
        '010.235.149.240.49226-010.235.149.243.00502': ['no-handshake', 'eth-padding'],
        '010.235.149.243.00102-010.235.149.095.49447': 'no-handshake',
        '010.235.149.243.00502-010.235.149.240.49226': 'no-handshake',
    },
    'zeek-traces/http/100-continue.pcap': {
        '128.146.216.051.00080-192.168.003.103.54102c1': 'eth-padding',
    },
    'zeek-traces/http/206_example_a.pcap': {
        '010.101.084.070.10977-129.174.093.161.00080': 'eth-padding',
        '010.101.084.070.10978-129.174.093.161.00080': 'eth-padding',
        '129.174.093.161.00080-010.101.084.070.10977c1': 'eth-padding',
        '129.174.093.161.00080-010.101.084.070.10978c1': 'eth-padding',
    },
    'zeek-traces/http/206_example_b.pcap': {
        '065.054.095.014.00080-192.168.072.014.03257': 'eth-padding',
        '065.054.095.206.00080-192.168.072.014.03254': ['eth-padding', 'window'],
        '192.168.072.014.03254-065.054.095.206.00080': 'eth-padding',
        '192.168.072.014.03257-065.054.095.014.00080': 'eth-padding',
    },
    'zeek-traces/http/206_example_c.pcap': {
        '010.045.179.094.19950-129.174.093.170.00080': 'eth-padding',
        '010.045.179.094.19953-129.174.093.170.00080': 'eth-padding',
        '129.174.093.170.00080-010.045.179.094.19950': 'eth-padding',
        '129.174.093.170.00080-010.045.179.094.19950c1': 'eth-padding',
        '129.174.093.170.00080-010.045.179.094.19953': 'eth-padding',
        '129.174.093.170.00080-010.045.179.094.19953c1': 'eth-padding',
    },
    'zeek-traces/http/basic-auth-with-extra-space.pcap': {
        '127.000.000.001.35635-127.000.000.001.40290': 'no-handshake',
        '127.000.000.001.35635-127.000.000.001.40296': 'no-handshake',
        '127.000.000.001.35635-127.000.000.001.40304': 'no-handshake',
        '127.000.000.001.35635-127.000.000.001.52594': 'no-handshake',
        '127.000.000.001.40290-127.000.000.001.35635': 'no-handshake',
        '127.000.000.001.40296-127.000.000.001.35635': 'no-handshake',
        '127.000.000.001.40304-127.000.000.001.35635': 'no-handshake',
        '127.000.000.001.52594-127.000.000.001.35635': 'no-handshake',
    },
    'zeek-traces/http/bro.org-filtered.pcap': {
        '192.150.187.043.00080-010.000.002.015.55079': 'eth-padding',
        '192.150.187.043.00080-010.000.002.015.55080': 'eth-padding',
        '192.150.187.043.00080-010.000.002.015.55081': 'eth-padding',
        '192.150.187.043.00080-010.000.002.015.55082': 'eth-padding',
        '192.150.187.043.00080-010.000.002.015.55083': 'eth-padding',
        '192.150.187.043.00080-010.000.002.015.55085': 'eth-padding',
        '192.150.187.043.00080-010.000.002.015.55120': 'eth-padding',
        '192.150.187.043.00080-010.000.002.015.55127': 'eth-padding',
        '192.150.187.043.00080-010.000.002.015.55128': 'eth-padding',
        '192.150.187.043.00080-010.000.002.015.55129': 'eth-padding',
        '192.150.187.043.00080-010.000.002.015.55130': 'eth-padding',
        '192.150.187.043.00080-010.000.002.015.55131': 'eth-padding',
        '192.150.187.043.00080-010.000.002.015.55132': 'eth-padding',
    },
    'zeek-traces/http/bro.org.pcap': {
        '192.150.187.043.00080-010.000.002.015.55079': 'eth-padding',
        '192.150.187.043.00080-010.000.002.015.55079c1': 'eth-padding',
        '192.150.187.043.00080-010.000.002.015.55080': 'eth-padding',
        '192.150.187.043.00080-010.000.002.015.55080c1': 'eth-padding',
        '192.150.187.043.00080-010.000.002.015.55081': ['eth-padding', 'gap'],
        '192.150.187.043.00080-010.000.002.015.55082': 'eth-padding',
        '192.150.187.043.00080-010.000.002.015.55082c1': 'eth-padding',
        '192.150.187.043.00080-010.000.002.015.55083': 'eth-padding',
        '192.150.187.043.00080-010.000.002.015.55083c1': 'eth-padding',
        '192.150.187.043.00080-010.000.002.015.55085': 'eth-padding',
        '192.150.187.043.00080-010.000.002.015.55085c1': 'eth-padding',
        '192.150.187.043.00080-010.000.002.015.55120': 'eth-padding',
        '192.150.187.043.00080-010.000.002.015.55120c1': 'eth-padding',
        '192.150.187.043.00080-010.000.002.015.55128': 'eth-padding',
        '192.150.187.043.00080-010.000.002.015.55129': 'eth-padding',
        '192.150.187.043.00080-010.000.002.015.55130': 'eth-padding',
        '192.150.187.043.00080-010.000.002.015.55131': 'eth-padding',
        '192.150.187.043.00080-010.000.002.015.55132': 'eth-padding',
    },
    'zeek-traces/http/byteranges.pcap': {
        '192.168.001.105.49219-198.189.255.075.00080': 'eth-padding',
    },
    'zeek-traces/http/connect-with-smtp.pcap': {
        '079.026.245.236.03378-254.228.086.079.08240': 'eth-padding',
        '254.228.086.079.08240-079.026.245.236.03378': 'eth-padding',
        '254.228.086.079.08240-079.026.245.236.03378c1': 'eth-padding',
    },
    'zeek-traces/http/content-range-gap-skip.pcap': {
        '192.168.001.105.49219-198.189.255.075.00080': 'eth-padding',
        '198.189.255.075.00080-192.168.001.105.49219': 'gap',
    },
    'zeek-traces/http/content-range-gap.pcap': {
        '054.239.164.021.00080-192.168.040.148.42459': ['eth-padding', 'gap'],
    },
    'zeek-traces/http/ctu-62604-80.pcap': {
        '192.168.001.108.62604-045.009.074.078.00080': 'eth-padding',
    },
    'zeek-traces/http/entity_gap.pcap': {
        '192.150.187.043.00080-141.142.228.005.59856': 'gap',
    },
    'zeek-traces/http/entity_gap2.pcap': {
        '192.150.187.043.00080-141.142.228.005.59856': 'gap',
    },
    'zeek-traces/http/get-to-ssh-server.pcap': {
        '130.074.164.231.00022-136.216.042.040.44338c1': 'eth-padding',
    },
    'zeek-traces/http/get_nosyn.pcap': {
        '141.142.228.005.59856-192.150.187.043.00080': 'no-handshake',
        '192.150.187.043.00080-141.142.228.005.59856': 'no-handshake',
    },
    'zeek-traces/http/http-bad-request-with-version.pcap': {
        '192.168.122.130.49157-202.007.177.041.00080': 'eth-padding',
        '192.168.122.130.49157-202.007.177.041.00080c1': 'eth-padding',
    },
    'zeek-traces/http/http-inner-transfer-encoding-ossfuzz.pcap': {
        '010.000.000.001.51650-010.000.000.002.00080': 'eth-padding',
        '010.000.000.001.51650-010.000.000.002.00080c1': 'eth-padding',
        '010.000.000.002.00080-010.000.000.001.51650': 'eth-padding',
    },
    'zeek-traces/http/http_large_req_8001.pcap': {
        '192.168.002.021.08001-192.168.002.118.50970c1': 'eth-padding',
    },
    'zeek-traces/http/m57-long-49583-80.pcap': {
        '192.168.001.105.49583-208.111.129.062.00080': 'eth-padding',
    },
    'zeek-traces/http/m57-long-49600-80.pcap': {
        '192.168.001.105.49600-065.054.095.185.00080': 'eth-padding',
    },
    'zeek-traces/http/missing-zlib-header.pcap': {
        '079.218.110.244.00080-237.244.174.255.01905': 'eth-padding',
        '079.218.110.244.00080-237.244.174.255.01905c1': 'eth-padding',
        '237.244.174.255.01905-079.218.110.244.00080': 'eth-padding',
    },
    'zeek-traces/http/no-version.pcap': {
        '131.243.001.010.00080-131.243.001.023.01035': 'eth-padding',
        '131.243.001.010.00080-131.243.001.023.01035c1': 'eth-padding',
    },
    'zeek-traces/http/pipelined-requests.pcap': {
        '192.168.001.104.01673-063.245.209.011.00080': 'eth-padding',
        '192.168.001.104.01673-063.245.209.011.00080c1': 'eth-padding',
    },
    'zeek-traces/http/version-mismatch.pcap': {
        '192.168.001.102.01482-074.201.118.102.00080': 'eth-padding',
    },
    'zeek-traces/http/vnd.ms-cab-compressed-multi-conn.pcap': {
        '192.168.001.105.49433-065.054.095.007.00080': 'eth-padding',
        '192.168.001.105.49459-065.054.095.007.00080': 'eth-padding',
        '192.168.001.105.49461-065.054.095.007.00080': 'eth-padding',
        '192.168.001.105.49462-065.054.095.007.00080': 'eth-padding',
        '192.168.001.105.49463-065.054.095.007.00080': 'eth-padding',
    },
    'zeek-traces/http/zeek-image-1080-80-x.pcapng': {
        '127.000.000.001.00080-127.000.000.001.01080': 'no-handshake',
        '127.000.000.001.01080-127.000.000.001.00080': 'no-handshake',
    },
    'zeek-traces/http/zeek-image-post-1080-8000-x.pcap': {
        '044.001.001.001.08000-127.000.000.001.01080': 'no-handshake',
        '127.000.000.001.01080-044.001.001.001.08000': 'no-handshake',
    },
    'zeek-traces/http/zero-length-bodies-with-drops.pcap': {
        '010.000.000.118.51534-075.098.070.031.00080': 'gap',
        '075.098.070.031.00080-010.000.000.118.51534': ['eth-padding', 'gap'],
    },
    'zeek-traces/tunnels/tunnel-direct-bypass.pcap': {
        '010.020.000.001.44444-010.020.000.002.00080': 'no-handshake',
    },
    'zeek-traces/ldap/issue-32.pcapng': {
        '192.168.010.152.38037-192.168.010.186.00389': 'no-handshake',
        '192.168.010.186.00389-192.168.010.152.38037': ['no-handshake', 'eth-padding'],
    },
    'zeek-traces/ldap/ldap_invalid_credentials.pcap': {
        '192.168.066.138.00389-192.168.066.141.53653': 'no-handshake',
        '192.168.066.141.53653-192.168.066.138.00389': 'ip-checksum',
    },
    'zeek-traces/ldap/ldap_star_single.pcapng': {
        '192.168.010.152.34581-192.168.010.186.00389': 'no-handshake',
    },
    'zeek-traces/ldap/missing_krbtgt_ldap_request.pcapng': {
        '192.168.010.138.63815-192.168.010.186.00389': 'ip-checksum',
        '192.168.010.186.00389-192.168.010.138.63815': 'eth-padding',
    },
    'zeek-traces/ldap/missing_ldap_logs.pcapng': {
        '010.199.002.111.00389-010.199.002.121.59327': 'no-handshake',
        '010.199.002.111.00389-010.199.002.121.59355': 'no-handshake',
        '010.199.002.111.00389-010.199.002.121.59356': 'no-handshake',
        '010.199.002.121.59327-010.199.002.111.00389': 'ip-checksum',
        '010.199.002.121.59355-010.199.002.111.00389': 'ip-checksum',
        '010.199.002.121.59356-010.199.002.111.00389': 'ip-checksum',
    },
    'zeek-traces/ldap/simpleauth-diff-port.pcap': {
        '010.000.000.001.25936-010.000.000.002.32681--50': 'eth-padding',
    },
    'zeek-traces/ldap/simpleauth.pcap': {
        '010.000.000.001.25936-010.000.000.002.03268--50': 'eth-padding',
    },
    'zeek-traces/chksums/localhost-bad-chksum.pcap': {
        '035.221.046.009.00080-192.168.001.028.53246': 'eth-padding',
    },
    'zeek-traces/dce-rpc/20-fids-no-close.pcap': {
        '172.017.000.001.38016-172.017.000.002.00445': 'gap',
        '172.017.000.002.00445-172.017.000.001.38016': 'gap',
    },
    'zeek-traces/dce-rpc/dce_rpc_netlogon.pcapng': {
        '010.010.010.100.49676-010.010.010.121.58774': 'no-handshake',
        '010.010.010.121.58774-010.010.010.100.49676': 'no-handshake',
    },
    'zeek-traces/dce-rpc/dce_rpc_ntlm.pcapng': {
        '010.010.010.100.00088-010.010.010.120.54785': 'eth-padding',
        '010.010.010.120.54784-010.010.010.121.58772': 'ip-checksum',
        '010.010.010.121.58772-010.010.010.120.54784': 'no-handshake',
    },
    'zeek-traces/dce-rpc/kerberos135_auth.pcapng': {
        '010.010.010.100.00135-010.010.010.129.64238': 'eth-padding',
    },
    'zeek-traces/dce-rpc/mapi.pcap': {
        '064.012.137.056.00080-192.168.000.184.01066': 'no-handshake',
        '064.012.137.056.00080-192.168.000.184.01066c1': 'eth-padding',
        '064.012.137.056.00080-192.168.000.184.01067': 'eth-padding',
        '065.198.047.173.01088-192.168.000.105.02002': ['no-handshake', 'eth-padding'],
        '165.254.012.103.00080-192.168.000.170.03534': 'eth-padding',
        '192.168.000.002.00135-192.168.000.173.01066': 'eth-padding',
        '192.168.000.002.00135-192.168.000.173.01069': 'eth-padding',
        '192.168.000.002.01032-192.168.000.129.02482': 'no-handshake',
        '192.168.000.002.01032-192.168.000.141.01734': 'no-handshake',
        '192.168.000.002.01032-192.168.000.168.03647': 'no-handshake',
        '192.168.000.002.01032-192.168.000.183.01153': 'no-handshake',
        '192.168.000.002.04597-192.168.000.111.00139': 'no-handshake',
        '192.168.000.105.02002-065.198.047.173.01088': ['no-handshake', 'eth-padding'],
        '192.168.000.105.02002-192.168.000.147.01050': 'eth-padding',
        '192.168.000.105.02002-192.168.000.167.01075': ['no-handshake', 'eth-padding'],
        '192.168.000.105.46348-192.168.000.167.01076': 'no-handshake',
        '192.168.000.111.00139-192.168.000.002.04597': 'no-handshake',
        '192.168.000.116.00139-192.168.000.173.01032': 'no-handshake',
        '192.168.000.116.01859-192.168.000.153.00139': ['no-handshake', 'eth-padding'],
        '192.168.000.116.01859-192.168.000.153.00139c1': 'eth-padding',
        '192.168.000.129.02482-192.168.000.002.01032': 'no-handshake',
        '192.168.000.136.03389-192.168.000.144.01930': 'no-handshake',
        '192.168.000.141.01734-192.168.000.002.01032': ['no-handshake', 'eth-padding'],
        '192.168.000.144.01930-192.168.000.136.03389': 'eth-padding',
        '192.168.000.153.00139-192.168.000.116.01859': ['no-handshake', 'eth-padding'],
        '192.168.000.167.01075-192.168.000.105.02002': ['no-handshake', 'eth-padding'],
        '192.168.000.167.01076-192.168.000.105.46348': 'no-handshake',
        '192.168.000.168.03647-192.168.000.002.01032': ['no-handshake', 'eth-padding'],
        '192.168.000.170.03511-207.046.108.043.01863': 'no-handshake',
        '192.168.000.173.01032-192.168.000.116.00139': ['no-handshake', 'eth-padding'],
        '192.168.000.173.01061-192.168.000.002.00080': 'eth-padding',
        '192.168.000.173.01066-192.168.000.002.00135': 'eth-padding',
        '192.168.000.173.01066-192.168.000.002.00135c1': 'eth-padding',
        '192.168.000.173.01067-192.168.000.002.04997': 'eth-padding',
        '192.168.000.173.01068-192.168.000.002.04997': 'eth-padding',
        '192.168.000.173.01069-192.168.000.002.00135': 'eth-padding',
        '192.168.000.173.01069-192.168.000.002.00135c1': 'eth-padding',
        '192.168.000.183.01153-192.168.000.002.01032': ['no-handshake', 'eth-padding'],
        '192.168.000.184.01066-064.012.137.056.00080': ['no-handshake', 'eth-padding'],
        '192.168.000.200.01190-212.080.167.231.01031': 'eth-padding',
        '207.046.108.043.01863-192.168.000.170.03511': 'eth-padding',
        '212.080.167.231.01031-192.168.000.200.01190': 'no-handshake',
    },
    'zeek-traces/krb/kerberos_tso.pcapng': {
        '172.016.000.211.49811-172.016.000.005.00445': 'ip-checksum',
        '172.016.000.211.49815-172.016.000.100.00445': 'ip-checksum',
        '172.016.000.211.49821-172.016.000.100.00445': 'ip-checksum',
        '172.016.000.211.49827-172.016.000.005.00445': 'ip-checksum',
    },
    'zeek-traces/krb/optional-service-name.pcap': {
        '192.168.202.110.43792-192.168.229.251.00088--120': 'no-handshake',
        '192.168.229.251.00088-192.168.202.110.43792--120': 'no-handshake',
    },
    'zeek-traces/krb/smb2_krb.pcap': {
        '172.019.023.143.00445-010.010.034.184.56493': 'truncated',
    },
    'zeek-traces/smb/dssetup_DsRoleGetPrimaryDomainInformation_standalone_workstation.cap': {
        '205.227.227.226.49467-205.227.227.243.00445': 'no-handshake',
        '205.227.227.243.00445-205.227.227.226.49467': 'no-handshake',
    },
    'zeek-traces/smb/smb1-OSS-fuzz-54883.pcap': {
        '010.000.000.001.48026-010.000.000.002.00139': 'eth-padding',
        '010.000.000.001.48026-010.000.000.002.00139c1': 'eth-padding',
        '010.000.000.002.00139-010.000.000.001.48026': 'eth-padding',
    },
    'zeek-traces/smb/smb1.pcap': {
        '192.168.001.053.00445-192.168.001.078.55770': 'no-handshake',
        '192.168.001.078.55770-192.168.001.053.00445': 'no-handshake',
    },
    'zeek-traces/smb/smb2-multiple-pdus.pcap': {
        '192.168.002.012.49191-192.168.002.222.00445': 'no-handshake',
        '192.168.002.222.00445-192.168.002.012.49191': 'no-handshake',
    },
    'zeek-traces/smb/smb2-zero-byte-error-ioctl.pcapng': {
        '192.168.002.069.00139-192.168.002.186.62082': 'eth-padding',
    },
    'zeek-traces/smb/smb2.pcap': {
        '010.000.000.011.49208-010.000.000.012.00445': 'eth-padding',
    },
    'zeek-traces/smb/smb2_fscontrol.pcap': {
        '010.000.000.001.61149-010.000.000.002.00139': 'eth-padding',
        '010.000.000.001.61149-010.000.000.002.00139c1': 'eth-padding',
        '010.000.000.002.00139-010.000.000.001.61149': 'eth-padding',
    },
    'zeek-traces/smb/smb2readwrite.pcap': {
        '169.254.128.015.00445-169.254.128.018.49155': 'no-handshake',
        '169.254.128.018.49155-169.254.128.015.00445': 'no-handshake',
    },
    'zeek-traces/smb/smb3.pcap': {
        '010.160.064.139.38166-010.160.065.202.00445': 'no-handshake',
        '010.160.065.202.00445-010.160.064.139.38166': 'no-handshake',
    },
    'zeek-traces/smb/smb311.pcap': {
        '010.160.067.244.00445-192.168.100.168.44718': 'no-handshake',
        '192.168.100.168.44718-010.160.067.244.00445': 'no-handshake',
    },
    'zeek-traces/smb/smb3_multichannel.pcap': {
        '172.017.000.184.57092-172.017.000.189.00445': 'eth-padding',
        '172.017.000.184.57093-172.017.000.189.00445': 'eth-padding',
        '172.017.000.184.57094-172.017.000.189.00445': 'eth-padding',
        '172.017.000.184.57095-172.017.000.189.00445': 'eth-padding',
        '172.017.000.189.00445-172.017.000.184.57092': 'eth-padding',
        '172.017.000.189.00445-172.017.000.184.57093': 'eth-padding',
        '172.017.000.189.00445-172.017.000.184.57094': 'eth-padding',
        '172.017.000.189.00445-172.017.000.184.57095': 'eth-padding',
    },
    'zeek-traces/smb/smb_many_open_files_500.pcap.gz': {
        '192.168.002.069.00139-192.168.002.186.62082': 'eth-padding',
    },
    'zeek-traces/smb/smb_v2_only_non_zero_reserved1.pcap': {
        '172.031.112.016.00445-172.031.112.017.57829': 'eth-padding',
    },
    'zeek-traces/contentline/contentline-irc-5k-line.pcap': {
        '127.000.000.001.12345-127.000.000.001.61556': 'ip-checksum',
        '127.000.000.001.12345-127.000.000.001.62855': 'ip-checksum',
        '127.000.000.001.50163-127.000.000.001.37757': 'ip-checksum',
        '127.000.000.001.61556-127.000.000.001.12345': 'ip-checksum',
        '127.000.000.001.62855-127.000.000.001.12345': 'ip-checksum',
    },
    'zeek-traces/dnp3/dnp3.pcap': {
        '010.000.000.003.20000-010.000.000.008.01159': 'eth-padding',
        '010.000.000.003.20000-010.000.000.008.02803': 'eth-padding',
        '010.000.000.003.20000-010.000.000.009.01084': 'eth-padding',
        '010.000.000.008.01086-010.000.000.003.20000': 'eth-padding',
        '010.000.000.008.01184-010.000.000.003.20000': 'eth-padding',
        '010.000.000.008.02789-010.000.000.003.20000': 'eth-padding',
        '010.000.000.008.02803-010.000.000.003.20000': 'eth-padding',
        '010.000.000.008.02803-010.000.000.003.20000c1': 'eth-padding',
        '010.000.000.008.02828-010.000.000.003.20000': 'eth-padding',
        '010.000.000.009.01080-010.000.000.003.20000': 'eth-padding',
        '010.000.000.009.01084-010.000.000.003.20000': 'eth-padding',
        '010.000.000.009.01084-010.000.000.003.20000c1': 'eth-padding',
        '192.168.066.033.01167-192.168.066.034.20000': ['no-handshake', 'eth-padding'],
        '192.168.066.034.20000-192.168.066.033.01167': 'no-handshake',
    },
    'zeek-traces/dnp3/dnp3_del_measure.pcap': {
        '130.126.142.250.49413-130.126.140.229.20000': 'eth-padding',
        '130.126.142.250.49413-130.126.140.229.20000c1': 'eth-padding',
    },
    'zeek-traces/dnp3/dnp3_en_spon.pcap': {
        '130.126.142.250.50059-130.126.140.229.20000': 'eth-padding',
        '130.126.142.250.50059-130.126.140.229.20000c1': 'eth-padding',
    },
    'zeek-traces/dnp3/dnp3_file_del.pcap': {
        '130.126.142.250.50301-130.126.140.229.20000': 'eth-padding',
        '130.126.142.250.50301-130.126.140.229.20000c1': 'eth-padding',
    },
    'zeek-traces/dnp3/dnp3_file_read.pcap': {
        '130.126.142.250.50276-130.126.140.229.20000': 'eth-padding',
        '130.126.142.250.50276-130.126.140.229.20000c1': 'eth-padding',
    },
    'zeek-traces/dnp3/dnp3_file_write.pcap': {
        '130.126.142.250.50300-130.126.140.229.20000': 'eth-padding',
        '130.126.142.250.50300-130.126.140.229.20000c1': 'eth-padding',
    },
    'zeek-traces/dnp3/dnp3_link_only.pcap': {
        '192.168.080.012.20000-192.168.080.249.01128': ['no-handshake', 'eth-padding'],
        '192.168.080.249.01128-192.168.080.012.20000': 'no-handshake',
    },
    'zeek-traces/dnp3/dnp3_read.pcap': {
        '130.126.142.250.51006-130.126.140.229.20000': 'eth-padding',
        '130.126.142.250.51006-130.126.140.229.20000c1': 'eth-padding',
    },
    'zeek-traces/dnp3/dnp3_read_p20001.pcap': {
        '130.126.142.250.51006-130.126.140.229.20001': 'eth-padding',
        '130.126.142.250.51006-130.126.140.229.20001c1': 'eth-padding',
    },
    'zeek-traces/dnp3/dnp3_rec_time.pcap': {
        '130.126.142.250.49412-130.126.140.229.20000': 'eth-padding',
        '130.126.142.250.49412-130.126.140.229.20000c1': 'eth-padding',
    },
    'zeek-traces/dnp3/dnp3_select_operate.pcap': {
        '130.126.142.250.49404-130.126.140.229.20000': 'eth-padding',
        '130.126.142.250.49404-130.126.140.229.20000c1': 'eth-padding',
    },
    'zeek-traces/dnp3/dnp3_write.pcap': {
        '130.126.142.250.49411-130.126.140.229.20000': 'eth-padding',
        '130.126.142.250.49411-130.126.140.229.20000c1': 'eth-padding',
    },
    'zeek-traces/nfs/nfs_base.pcap': {
        '010.111.131.132.02049-010.111.131.018.00720': 'eth-padding',
        '010.111.131.132.02049-010.111.131.018.55647': 'eth-padding',
    },
    'zeek-traces/nfs/nfs_fsinfo_bad_status.pcap': {
        '010.111.131.132.02049-010.111.131.018.00720': 'eth-padding',
        '010.111.131.132.02049-010.111.131.018.55647': 'eth-padding',
    },
    'zeek-traces/nfs/nfs_getattr_bad_ftype.pcap': {
        '010.111.131.132.02049-010.111.131.018.00720': 'eth-padding',
        '010.111.131.132.02049-010.111.131.018.55647': 'eth-padding',
    },
    'zeek-traces/nfs/nfs_setattr_bad_set_it.pcap': {
        '010.111.131.132.02049-010.111.131.018.00720': 'eth-padding',
        '010.111.131.132.02049-010.111.131.018.55647': 'eth-padding',
    },
    'zeek-traces/tls/heartbleed-encrypted-success.pcap': {
        '107.170.241.107.00443-192.168.004.149.59676': 'after-close',
    },
    'zeek-traces/tls/hrr.pcap': {
        '064.233.185.139.00443-010.192.048.168.63564': 'eth-padding',
    },
    'zeek-traces/tls/imap-starttls.pcap': {
        '212.227.017.186.00143-192.168.017.053.49640c1': 'eth-padding',
    },
    'zeek-traces/tls/missing-intermediate.pcap': {
        '128.032.169.140.00443-192.168.004.149.58529': 'eth-padding',
        '128.032.169.140.00443-192.168.004.149.58532': 'eth-padding',
    },
    'zeek-traces/tls/ocsp-stapling-digicert.pcap': {
        '072.021.091.029.00443-192.168.004.149.51293': 'eth-padding',
        '072.021.091.029.00443-192.168.004.149.51293c1': 'eth-padding',
    },
    'zeek-traces/tls/ocsp-stapling-twimg.pcap': {
        '093.184.216.146.00443-192.168.004.149.53106': 'eth-padding',
    },
    'zeek-traces/tls/smtp-starttls.pcap': {
        '074.125.142.026.00025-192.168.004.149.54170c1': 'eth-padding',
    },
    'zeek-traces/tls/ssl-to-http-server.pcap': {
        '087.240.132.072.00080-192.168.001.108.62561': 'eth-padding',
        '087.240.132.072.00080-192.168.001.108.62561c1': 'eth-padding',
        '192.168.001.108.62561-087.240.132.072.00080': 'eth-padding',
    },
    'zeek-traces/tls/ssl.v3.pcap': {
        '194.127.084.106.00443-192.150.187.164.58868': 'eth-padding',
    },
    'zeek-traces/tls/tls13-ech.pcap': {
        '162.159.138.085.00443-192.168.020.065.51053': 'no-handshake',
        '192.168.020.065.51053-162.159.138.085.00443': 'no-handshake',
    },
    'zeek-traces/tls/tls13_psk_succesfull.pcap': {
        '174.138.009.219.00443-192.168.178.080.54220': 'eth-padding',
    },
    'zeek-traces/tls/tls13draft16-ff52.a01.pcap': {
        '138.068.041.077.00443-192.150.187.020.36778': 'after-close',
    },
    'zeek-traces/tls/tls1_1.pcap': {
        '216.058.192.014.00443-192.168.017.058.62987': 'eth-padding',
    },
    'zeek-traces/tls/xmpp-dialback-starttls.pcap': {
        '184.073.173.246.01193-104.236.167.107.05269': 'eth-padding',
    },
    'zeek-traces/tls/xmpp-starttls.pcap': {
        '146.255.057.229.05222-198.128.203.095.56048c1': 'eth-padding',
    },
    'zeek-traces/mount/mount_base.pcap': {
        '010.111.131.132.02049-010.111.131.018.00720': 'eth-padding',
        '010.111.131.132.02049-010.111.131.018.55647': 'eth-padding',
    },
    'zeek-traces/communityid/tcp.pcap': {
        '066.035.250.204.00080-128.232.110.120.34855': [('truncated', 'nids'), ('weir-truncated-gap', 'weir')],
        '128.232.110.120.34855-066.035.250.204.00080': [('truncated', 'nids'), ('weir-truncated-gap', 'weir')],
    },
    'zeek-traces/ipv4/fragmented-3.pcap': {
        '210.054.213.247.01265-131.243.001.010.00021': 'fragments',
    },
    'zeek-traces/ipv4/fragmented-4.pcap': {
        '128.032.046.142.07790-010.000.000.001.00080': [('fragments', 'tcpflow'), ('no-handshake', 'nids')],
    },
    'tcpdump-4.99.3/babel_update_oobr.pcap': {
        '006.003.208.255.06379-000.001.031.099.00639': 'ip-checksum',
        '006.003.218.255.06379-000.001.031.099.00639': 'ip-checksum',
    },
    'tcpdump-4.99.3/bgp-addpath.pcap': {
        '127.000.000.001.00179-127.000.000.001.00080': 'truncated',
    },
    'tcpdump-4.99.3/bgp-aigp-2.pcap': {
        '001.000.001.001.33933-001.000.001.002.00179': 'no-handshake',
    },
    'tcpdump-4.99.3/bgp-aigp-oobr.pcap': {
        '172.017.000.000.00179-172.017.128.003.50651': 'no-handshake',
    },
    'tcpdump-4.99.3/bgp-as-path-oobr.pcap': {
        '172.017.000.000.00179-172.017.000.003.50651': ['no-handshake', 'overlap'],
        '172.017.000.000.00179-172.017.085.003.50651': 'ip-checksum',
    },
    'tcpdump-4.99.3/bgp-bgp_capabilities_print-oobr-1.pcap': {
        '226.219.000.000.00179-016.233.034.000.00100': 'fragments',
    },
    'tcpdump-4.99.3/bgp-bgp_capabilities_print-oobr-2.pcap': {
        '226.219.000.000.00179-016.233.034.000.00100': 'fragments',
    },
    'tcpdump-4.99.3/bgp-encap.pcap': {
        '010.000.014.004.00179-010.000.014.001.63656--49166': 'no-handshake',
    },
    'tcpdump-4.99.3/bgp-evpn.pcap': {
        '002.002.002.002.00179-003.003.003.003.56988--49175': 'no-handshake',
    },
    'tcpdump-4.99.3/bgp-extended-shutdown-msg.pcapng': {
        '192.168.010.123.36208-192.168.010.017.00179': 'no-handshake',
    },
    'tcpdump-4.99.3/bgp-infinite-loop.pcap': {
        '114.227.144.098.32757-192.168.001.001.00179': 'no-handshake',
        '179.110.109.087.40936-192.168.001.001.00179': 'no-handshake',
        '196.059.048.065.14214-192.168.001.001.00179': 'no-handshake',
        '235.101.090.012.60082-192.168.001.001.00179': 'no-handshake',
    },
    'tcpdump-4.99.3/bgp-large-community.pcap': {
        '192.000.002.002.46605-192.000.002.003.00179': 'no-handshake',
    },
    'tcpdump-4.99.3/bgp-link-bw-extcommunity.pcapng': {
        '192.168.010.249.36890-192.168.010.252.00179': 'no-handshake',
    },
    'tcpdump-4.99.3/bgp-rt-prefix.pcap': {
        '001.000.000.002.42195-001.000.000.001.00179': 'no-handshake',
    },
    'tcpdump-4.99.3/bgp-shutdown-communication.pcapng': {
        '165.254.255.024.00179-165.254.255.017.33202': ['no-handshake', 'overlap'],
    },
    'tcpdump-4.99.3/bgp_mp_reach_nlri-oobr.pcap': {
        '241.000.128.039.00179-239.000.000.001.00000': 'ip-checksum',
    },
    'tcpdump-4.99.3/bgp_mvpn_6_and_7_oobr.pcap': {
        '241.000.093.020.00179-255.247.000.001.00200': 'ip-checksum',
    },
    'tcpdump-4.99.3/bgp_pmsi_tunnel-oobr.pcap': {
        '241.000.032.019.00179-239.000.000.001.00000': 'fragments',
    },
    'tcpdump-4.99.3/bgp_vpn_attrset.pcap': {
        '012.004.004.004.02051-012.001.001.001.00179': 'linktype',
    },
    'tcpdump-4.99.3/bgp_vpn_rt-oobr.pcap': {
        '241.000.128.019.00179-239.008.000.001.00000': 'ip-checksum',
    },
    'tcpdump-4.99.3/dns_tcp.pcap': {
        '209.087.249.018.00053-192.168.001.011.33779': 'eth-padding',
    },
    'tcpdump-4.99.3/dns_tcp_8053.pcap': {
        '209.087.249.018.08053-192.168.001.011.57469': 'eth-padding',
    },
    'tcpdump-4.99.3/hoobr_nfs_printfh.pcap': {
        '048.048.048.048.12336-048.048.048.048.02049': 'ip-checksum',
    },
    'tcpdump-4.99.3/kday2.pcap': {
        '204.000.055.010.00323-204.009.054.080.55936': 'ip-checksum',
    },
    'tcpdump-4.99.3/kday3.pcap': {
        '204.000.055.010.00323-204.009.054.080.55936': ['ip-checksum', 'overlap'],
        '204.009.054.080.00022-204.009.051.132.50079': 'no-handshake',
    },
    'tcpdump-4.99.3/kday4.pcap': {
        '204.000.055.010.00323-204.009.054.080.55936': ['ip-checksum', 'overlap'],
    },
    'tcpdump-4.99.3/kday5.pcap': {
        '204.000.055.010.00323-204.009.054.080.55936': 'ip-checksum',
    },
    'tcpdump-4.99.3/kday7.pcap': {
        '204.000.055.010.00323-204.009.054.080.55936': ['ip-checksum', 'overlap'],
    },
    'tcpdump-4.99.3/kday8.pcap': {
        '204.000.055.010.00323-204.009.054.080.55936': 'ip-checksum',
    },
    'tcpdump-4.99.3/mpbgp-linklocal-nexthop.pcap': {
        '030.000.000.001.49038-030.000.000.002.00179': 'no-handshake',
    },
    'tcpdump-4.99.3/nfs-seg-fault-1.pcapng': {
        '010.131.101.060.00923-010.131.101.118.02049': 'no-handshake',
    },
    'tcpdump-4.99.3/nfs-write-verf-cookie.pcapng': {
        '010.098.159.117.02049-010.207.074.149.00993': 'no-handshake',
        '010.207.074.149.00993-010.098.159.117.02049': 'no-handshake',
    },
    'tcpdump-4.99.3/of10_7050q.pcapng': {
        '010.000.000.080.06633-086.139.225.177.57145': 'no-handshake',
        '086.139.225.177.57145-010.000.000.080.06633': 'no-handshake',
    },
    'tcpdump-4.99.3/of10_7050sx_bsn-oobr.pcap': {
        '109.074.202.168.06653-088.150.169.052.04756': 'truncated',
    },
    'tcpdump-4.99.3/of13_ericsson.pcapng': {
        '127.000.000.001.06633-127.000.000.001.34845': 'no-handshake',
        '127.000.000.001.06633-127.000.000.001.34887': 'no-handshake',
        '127.000.000.001.06633-127.000.000.001.34888': 'no-handshake',
        '127.000.000.001.06633-127.000.000.001.35359': 'no-handshake',
        '127.000.000.001.06633-127.000.000.001.36546': 'no-handshake',
        '127.000.000.001.06633-127.000.000.001.36547': 'no-handshake',
        '127.000.000.001.06633-127.000.000.001.36548': 'no-handshake',
        '127.000.000.001.06633-127.000.000.001.37123': 'no-handshake',
        '127.000.000.001.06633-127.000.000.001.43230': 'no-handshake',
        '127.000.000.001.06633-127.000.000.001.51984': 'no-handshake',
        '127.000.000.001.06633-127.000.000.001.51987': 'no-handshake',
        '127.000.000.001.06633-127.000.000.001.51989': 'no-handshake',
        '127.000.000.001.06633-127.000.000.001.52621': 'no-handshake',
        '127.000.000.001.06633-127.000.000.001.53146': 'no-handshake',
        '127.000.000.001.06633-127.000.000.001.56562': 'no-handshake',
        '127.000.000.001.06633-127.000.000.001.58445': 'no-handshake',
        '127.000.000.001.06633-127.000.000.001.58447': 'no-handshake',
        '127.000.000.001.06633-127.000.000.001.58449': 'no-handshake',
        '127.000.000.001.34845-127.000.000.001.06633': 'no-handshake',
        '127.000.000.001.34887-127.000.000.001.06633': 'no-handshake',
        '127.000.000.001.34888-127.000.000.001.06633': 'no-handshake',
        '127.000.000.001.35359-127.000.000.001.06633': 'no-handshake',
        '127.000.000.001.36546-127.000.000.001.06633': 'no-handshake',
        '127.000.000.001.36547-127.000.000.001.06633': 'no-handshake',
        '127.000.000.001.36548-127.000.000.001.06633': 'no-handshake',
        '127.000.000.001.37123-127.000.000.001.06633': 'no-handshake',
        '127.000.000.001.38906-127.000.000.001.06633': 'no-handshake',
        '127.000.000.001.43230-127.000.000.001.06633': 'no-handshake',
        '127.000.000.001.51984-127.000.000.001.06633': 'no-handshake',
        '127.000.000.001.51987-127.000.000.001.06633': 'no-handshake',
        '127.000.000.001.52621-127.000.000.001.06633': 'no-handshake',
        '127.000.000.001.53146-127.000.000.001.06633': 'no-handshake',
        '127.000.000.001.56562-127.000.000.001.06633': 'no-handshake',
        '127.000.000.001.58445-127.000.000.001.06633': 'no-handshake',
        '127.000.000.001.58447-127.000.000.001.06633': 'no-handshake',
        '127.000.000.001.58449-127.000.000.001.06633': 'no-handshake',
    },
    'tcpdump-4.99.3/pptp.pcap': {
        '010.001.001.010.01723-010.001.001.011.03025': 'eth-padding',
        '010.001.001.011.03025-010.001.001.010.01723': 'eth-padding',
    },
    'tcpdump-4.99.3/resp_4_infiniteloop.pcapng': {
        '172.016.008.077.33926-172.016.008.149.06379': 'no-handshake',
    },
    'tcpdump-4.99.3/rpki-rtr-oobr.pcap': {
        '019.128.128.020.00323-076.019.006.127.49600': 'fragments',
    },
    'tcpdump-4.99.3/smb_data_print-oobr.pcapng': {
        '192.168.056.055.00445-192.168.056.119.49199': 'no-handshake',
        '192.168.056.119.49199-192.168.056.055.00445': 'no-handshake',
    },
    'tcpdump-4.99.3/smb_data_print-segv.pcapng': {
        '192.168.056.055.00445-192.168.056.119.49199': 'no-handshake',
        '192.168.056.119.49199-192.168.056.055.00445': 'no-handshake',
    },
    'tcpdump-4.99.3/telnet-iac-check-oobr.pcap': {
        '010.240.107.087.00023-010.010.102.137.47302': 'no-handshake',
    },
    'tcpdump-4.99.3/tfo-5c1fa7f9ae91.pcap': {
        '003.003.003.003.13054-192.168.000.100.13047': 'eth-padding',
        '009.009.009.009.13047-003.003.003.003.13054': 'eth-padding',
        '009.009.009.009.13047-003.003.003.003.13054c1': 'eth-padding',
        '192.168.000.100.13048-003.003.003.003.13054': 'syn-data',
    },
    'tcpdump-4.99.3/tok2str-oobr-1.pcap': {
        '010.000.000.004.00179-010.000.000.002.64588': 'no-handshake',
    },
    'tcpdump-4.99.3/unaligned-nfs-1.pcap': {
        '128.112.130.130.02049-140.180.226.200.01023': 'no-handshake',
    },
    'tcpdump-4.99.3/whois.pcap': {
        '192.000.047.059.00043-010.000.002.015.44188': 'eth-padding',
        '192.000.047.059.00043-010.000.002.015.44188c1': 'eth-padding',
    },
    'tcpdump-4.99.3/zmtp1-inf-loop-1.pcapng': {
        '196.059.048.065.14214-192.168.001.001.00179': 'no-handshake',
    },
    'zeek-traces/ipv6-http-atomic-frag.pcap': {
        '*': 'ipv6-ext-header',
    },
    'zeek-traces/redis/client-skip-while-off.pcap': {
        '*': 'null-af-inet6',
    },
    'zeek-traces/redis/excessive-pipelining.pcap': {
        '*': 'null-af-inet6',
    },
    'zeek-traces/redis/pipeline-quotes.pcap': {
        '*': 'null-af-inet6',
    },
    'zeek-traces/redis/pipeline-with-commands.pcap': {
        '*': 'null-af-inet6',
    },
    'zeek-traces/redis/pipelining-example.pcap': {
        '*': 'null-af-inet6',
    },
    'zeek-traces/redis/reply-off-on-2conn.pcap': {
        '*': 'null-af-inet6',
    },
    'zeek-traces/redis/reply-off-on.pcap': {
        '*': 'null-af-inet6',
    },
    'zeek-traces/http/connect-with-header.pcap': {
        '*': 'null-af-inet6',
    },
}

# General rules, tried when DOCUMENTED has no entry: (reason, odd, predicate on
# the file name and the per-tool results). Only for differences whose cause is
# visible in the name itself.
RULES = [
    ("no-ipv6", "nids", lambda name, res: ":" in name and res.get("nids") is None),
]

TOOLS = ["tcpflow", "nids", "weir"]


BLOCK = 1 << 20


def sha(path):
    """A digest of the file's bytes and its size. It hashes the digests of
    1 MiB blocks, so the same bytes give the same digest however the file
    system stores them, and a block lying wholly in a hole (SEEK_DATA says no
    data starts in it) is the digest of zeros without being read: tcpflow
    writes 4 GiB sparse files on fuzzed sequence numbers, and reading them
    took most of a run."""
    size = os.path.getsize(path)
    h = hashlib.sha256()
    zero = {}
    with open(path, "rb") as f:
        at = 0
        while at < size:
            n = min(BLOCK, size - at)
            try:
                data = os.lseek(f.fileno(), at, os.SEEK_DATA)
            except OSError:  # ENXIO: no data from here to the end
                data = size
            if data >= at + n:
                if n not in zero:
                    zero[n] = hashlib.sha256(bytes(n)).digest()
                h.update(zero[n])
            else:
                f.seek(at)
                h.update(hashlib.sha256(f.read(n)).digest())
            at += n
    return h.hexdigest(), size


def listing(d, other=()):
    out = {}
    for name in sorted(os.listdir(d)):
        if name in other:
            continue
        p = os.path.join(d, name)
        if os.path.isfile(p):
            out[name] = sha(p)
    return out


def run(cmd, timeout=600):
    t = time.monotonic()
    p = subprocess.run(["nice"] + cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)
    return p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace"), time.monotonic() - t


def traces(corpus, only):
    for folder in FOLDERS:
        base = os.path.join(corpus, folder)
        for dirpath, _, names in os.walk(base):
            for n in sorted(names):
                if n.endswith(TRACE_EXT):
                    rel = os.path.relpath(os.path.join(dirpath, n), corpus)
                    if not only or any(s in rel for s in only):
                        yield rel


def one_trace(rel, args, work):
    """Run the tools on one trace; return (rel, status, {tool: {name: (sha, size)}}, note)."""
    src = os.path.join(args.corpus, rel)
    tdir = tempfile.mkdtemp(dir=work)
    try:
        if rel.endswith(".gz"):
            plain = os.path.join(tdir, "trace.pcap")
            with gzip.open(src, "rb") as f, open(plain, "wb") as g:
                shutil.copyfileobj(f, g)
            src = plain
        out = {}
        dirs = {t: os.path.join(tdir, t) for t in TOOLS}
        for d in dirs.values():
            os.mkdir(d)
        rc, _, err, _ = run(["tcpflow", "-r", src, "-o", dirs["tcpflow"]])
        if rc != 0 or "unknown datalink" in err:
            line = (err.strip().splitlines() or ["exit %d" % rc])[-1]
            return rel, "skipped", {}, "tcpflow cannot read it: " + line
        out["tcpflow"] = listing(dirs["tcpflow"], TCPFLOW_OTHER)
        rc, _, err, _ = run([args.nids, "data", src, "-o", dirs["nids"]])
        if rc != 0:
            return rel, "error", {}, "nids_streams failed (%d): %s" % (rc, err.strip()[-300:])
        out["nids"] = listing(dirs["nids"])
        if not args.peers_only:
            # Neither peer closes a connection for being idle, and the
            # corpus has traces whose clocks jump by hours (kday*.pcap) or
            # centuries (fuzzed timestamps), so weir's idle timeout is set to
            # the largest (the seconds saturate to 2^64 - 1 ns); its hold limit is
            # raised as far as it goes, as neither peer gives a hole up.
            rc, _, err, _ = run([args.weir, "streams", src, "-o", dirs["weir"], "-q", "--idle-timeout", "100000000000", "--hold-limit", "1073741824"])
            if rc != 0:
                return rel, "error", {}, "weir streams failed (%d): %s" % (rc, err.strip()[-300:])
            out["weir"] = listing(dirs["weir"])
        if args.keep:
            keep = os.path.join(args.keep, rel)
            shutil.rmtree(keep, ignore_errors=True)
            shutil.copytree(tdir, keep)
        return rel, "ok", out, ""
    finally:
        shutil.rmtree(tdir, ignore_errors=True)


def classify(rel, name, res, tools):
    """None if every tool has the same file, else (reason or None, odd)."""
    values = [res.get(t) for t in tools]
    if all(v is not None for v in values) and len(set(values)) == 1:
        return None
    entry = DOCUMENTED.get(rel, {})
    doc = entry.get(name) or entry.get("*")
    docs = [] if doc is None else (list(doc) if isinstance(doc, list) else [doc])
    # the general rules add their reason to a documented one (a file can have
    # several causes at once, each making a different tool odd)
    for reason, odd, pred in RULES:
        if pred(name, res) and reason not in [d if isinstance(d, str) else d[0] for d in docs]:
            docs.append((reason, odd))
    if not docs:
        return (None, "")
    reasons, odd_tools = [], set()
    for d in docs:
        reason, odd = (d, ODD[d]) if isinstance(d, str) else d
        reasons.append(reason)
        odd_tools |= set(odd.split("+"))
    odd = "+".join(t for t in TOOLS if t in odd_tools)
    rest = [res.get(t) for t in tools if t not in odd_tools]
    if len(set(rest)) > 1:
        return (None, "documented %s (%s differs), but the others disagree too" % (",".join(reasons), odd))
    return (reasons, odd)


def describe(res, tools):
    parts = []
    for t in tools:
        v = res.get(t)
        parts.append("%s: %s" % (t, "no file" if v is None else "%d bytes %s" % (v[1], v[0][:10])))
    return ", ".join(parts)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--weir", default=os.path.join(ROOT, "target", "release", "weir"))
    ap.add_argument("--nids", default=os.path.join(ROOT, "target", "peers", "nids_streams"))
    ap.add_argument("--corpus", default=CORPUS)
    ap.add_argument("--peers-only", action="store_true", help="compare tcpflow and libnids only")
    ap.add_argument("-j", type=int, default=2, help="traces run at once (default 2)")
    ap.add_argument("--trace", action="append", help="only traces whose path contains this (repeatable)")
    ap.add_argument("--keep", help="keep every tool's output under this directory")
    ap.add_argument("--verbose", action="store_true", help="list documented differences too")
    ap.add_argument("--diagnose", action="store_true",
                    help="look at the packets of each undocumented difference (diagnose.py) and print "
                         "DOCUMENTED entries to check and paste")
    args = ap.parse_args()
    for exe in [args.nids] + ([] if args.peers_only else [args.weir]):
        if not os.access(exe, os.X_OK):
            sys.exit("compare.py: %s is missing (make nids-streams; cargo build --release)" % exe)
    if not shutil.which("tcpflow"):
        sys.exit("compare.py: tcpflow is not installed (scripts/setup)")
    if not os.path.isdir(args.corpus):
        sys.exit("compare.py: no corpus at %s" % args.corpus)
    tools = TOOLS[:2] if args.peers_only else TOOLS

    work = tempfile.mkdtemp(prefix="weir-streams-oracle-")
    results = []
    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.j)) as ex:
            results = list(ex.map(lambda r: one_trace(r, args, work), list(traces(args.corpus, args.trace))))
    finally:
        shutil.rmtree(work, ignore_errors=True)

    skipped = [(r, n) for r, s, _, n in results if s == "skipped"]
    errors = [(r, n) for r, s, _, n in results if s == "error"]
    n_traces = n_tcp = n_files = n_same = n_multi = 0
    by_reason = {}
    undocumented = []
    # Entries of the traces read this run (--trace may have left others out)
    # that no longer name a difference.
    read = {rel for rel, status, _, _ in results if status == "ok"}
    stale = {rel: set(files) for rel, files in DOCUMENTED.items() if rel in read}
    for rel, status, out, _ in results:
        if status != "ok":
            continue
        n_traces += 1
        names = set()
        for t in tools:
            names |= set(out[t])
        if names:
            n_tcp += 1
        for name in sorted(names):
            n_files += 1
            res = {t: out[t].get(name) for t in tools}
            c = classify(rel, name, res, tools)
            if c is None:
                n_same += 1
                continue
            reason, odd = c
            if reason is None:
                undocumented.append((rel, name, describe(res, tools), odd))
                continue
            for r in reason:
                by_reason.setdefault(r, []).append((rel, name, odd, describe(res, tools)))
            if len(reason) > 1:
                n_multi += 1
            stale.get(rel, set()).discard(name)
            stale.get(rel, set()).discard("*")

    print("streams oracle: %s" % " vs ".join(tools))
    print("  traces read          %6d  (%d with TCP streams)" % (n_traces, n_tcp))
    print("  traces skipped       %6d  (tcpflow cannot read them)" % len(skipped))
    print("  stream files         %6d" % n_files)
    print("  identical            %6d" % n_same)
    for reason in sorted(by_reason, key=lambda r: -len(by_reason[r])):
        print("  documented %-14s %4d  %s" % (reason, len(by_reason[reason]), REASONS[reason][:70]))
    print("  (files with several reasons: %d; each is counted under each of its reasons)" % n_multi)
    print("  undocumented         %6d" % len(undocumented))
    if args.verbose:
        for reason, items in sorted(by_reason.items()):
            print("\n%s: %s" % (reason, REASONS[reason]))
            for rel, name, odd, d in items:
                print("  %s %s  (%s differs; %s)" % (rel, name, odd, d))
        print("\nskipped:")
        for rel, note in skipped:
            print("  %s: %s" % (rel, note))
    elif skipped:
        print("  skipped: " + ", ".join(r for r, _ in skipped[:8]) + (" ..." if len(skipped) > 8 else "") +
              " (--verbose says why)")
    # An entry that no longer names a difference is wrong too: the list must
    # say which files differ now. Without weir, entries that only weir's file
    # explains (weir-*) name no difference, so there it is only a note.
    stale = [(rel, names) for rel, names in sorted(stale.items()) if names]
    for rel, names in stale:
        print("  %s: documented but now identical or absent: %s %s"
              % ("note" if args.peers_only else "stale", rel, " ".join(sorted(names))))
    if errors:
        print("\nerrors:")
        for rel, note in errors:
            print("  %s: %s" % (rel, note))
    if undocumented:
        print("\nundocumented differences:")
        for rel, name, d, note in undocumented:
            print("  %s %s: %s%s" % (rel, name, d, ("  [" + note + "]") if note else ""))
    if undocumented and args.diagnose:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import diagnose
        print("\nsuggested DOCUMENTED entries (check each against the packets before pasting):")
        res_of = {(rel, n): out for rel, st, out, _ in results if st == "ok" for n in set().union(*out.values())}
        last = None
        for rel, name, d, _ in undocumented:
            out = res_of[(rel, name)]
            sizes = {t: (out[t][name][1] if name in out[t] else None) for t in tools}
            parts = diagnose.split_name(name)
            why = diagnose.reason(diagnose.facts(os.path.join(args.corpus, rel), *parts), sizes["tcpflow"],
                                  sizes["nids"], name) if parts else None
            if rel != last:
                print("    %r: {" % rel) if last is None else print("    },\n    %r: {" % rel)
                last = rel
            print("        %r: %r,  # %s" % (name, (why, ODD.get(why, "?")), d))
        print("    },")
    if errors:
        return 2
    return 1 if undocumented or (stale and not args.peers_only) else 0


if __name__ == "__main__":
    sys.exit(main())
