/* SPDX-License-Identifier: MIT OR GPL-2.0 */
/*
 * weir's kernel cutoff: the flow map shared by weir and its kernel programs
 * (the XDP program of afxdp, the socket filter of afpacket), and the test
 * each of them runs on a packet before it reaches weir's pool.
 *
 * The contract (user space is crates/weir/src/source/live/cutoff.rs, which
 * mirrors the two structs below byte for byte):
 *
 * - weir_flows maps one direction of a stream, keyed as its packets carry it
 *   (struct weir_flow_key: addresses and ports as on the wire, in network
 *   order), to that direction's counters. weir installs a direction once it
 *   passed its cutoff (so a connection has up to two entries), with zeroed
 *   counters, and takes an entry out (reading its counters and deleting it in
 *   one bpf(2) call) when the stream closes or hands out a record, or to make
 *   room in a full map.
 * - A packet of an installed direction is dropped here and counted in the
 *   entry: packets, IP bytes (IPv4 total length, IPv6 payload length plus
 *   its 40-byte header, as weir's stream layer counts a record's octets),
 *   transport payload bytes (IP bytes less the IP and TCP or UDP headers),
 *   the time (bpf_ktime_get_ns, CLOCK_MONOTONIC) and the TCP flags OR'ed.
 *   The counters are added atomically: several CPUs may receive one stream.
 * - Except TCP segments with SYN, FIN or RST: those go on to weir uncounted,
 *   so it sees a connection open, close or reset and completes its records.
 *   And from such a segment on, the entry drops and counts nothing more: the
 *   direction's later packets go on to weir too (a RST stops the opposite
 *   direction's entry as well). So every packet after a connection's control
 *   segment reaches weir in wire order, as without the cutoff: weir's
 *   records end where they would (a packet after the end of a connection is
 *   not counted in it), however late weir reads the control segment and
 *   takes the entry out. (A control segment that passed before weir
 *   installed the entry, while weir had not read it yet, cannot stop it:
 *   weir sees that in the entry, not stopped when it reads that segment,
 *   and knows every packet counted came after it.)
 * - Only what weir keys the same way is looked up: untagged Ethernet, IPv4
 *   (not a fragment) or IPv6 (TCP or UDP as the first next header), TCP or
 *   UDP. Anything else goes on to weir, which handles it in user space.
 *
 * The including program defines WEIR_CTX (its context type) and
 * WEIR_LOAD(ctx, offset, to, len), which copies `len` packet bytes from
 * `offset` (0 is the Ethernet header) or fails with a negative value, and
 * calls weir_cutoff(ctx): 1 means drop, 0 go on.
 */

#ifndef WEIR_CUTOFF_H
#define WEIR_CUTOFF_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

/* The loader sets the size (weir's --kernel-flows); this is a placeholder. */
#define WEIR_FLOWS_DEFAULT 1

struct weir_flow_key {
	__u32 src[4]; /* IPv4: src[0], the rest 0 */
	__u32 dst[4];
	__u16 sport;  /* network order */
	__u16 dport;
	__u8 proto;
	__u8 family;  /* 4 or 6 */
	__u8 pad[2];
};

struct weir_flow_counters {
	__u64 packets;
	__u64 octets;
	__u64 payload;
	__u64 last_ns;
	__u32 tcp_flags;
	__u32 stopped; /* a control segment was seen: count and drop no more */
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, WEIR_FLOWS_DEFAULT);
	__type(key, struct weir_flow_key);
	__type(value, struct weir_flow_counters);
} weir_flows SEC(".maps");

#define WEIR_ETH_HLEN 14
#define WEIR_ETH_P_IP 0x0800
#define WEIR_ETH_P_IPV6 0x86DD
#define WEIR_TCP 6
#define WEIR_UDP 17
/* TCP flags byte: FIN, SYN, RST. */
#define WEIR_TCP_CONTROL 0x07
#define WEIR_TCP_RST 0x04

/* 1: the packet belongs to an installed direction and was counted (drop it);
 * 0: it goes on to weir. */
static __always_inline int weir_cutoff(WEIR_CTX *ctx)
{
	struct weir_flow_key k = {};
	__u8 eth[WEIR_ETH_HLEN];
	__u8 ip[40];
	__u8 l4[14];
	__u32 iphl, octets;

	if (WEIR_LOAD(ctx, 0, eth, sizeof(eth)) < 0)
		return 0;
	__u16 type = ((__u16)eth[12] << 8) | eth[13];
	if (type == WEIR_ETH_P_IP) {
		if (WEIR_LOAD(ctx, WEIR_ETH_HLEN, ip, 20) < 0)
			return 0;
		iphl = (ip[0] & 0x0f) * 4;
		/* A fragment (MF set, or an offset): weir rebuilds its datagram. */
		if ((ip[0] >> 4) != 4 || iphl < 20 || (ip[6] & 0x3f) || ip[7])
			return 0;
		k.family = 4;
		k.proto = ip[9];
		__builtin_memcpy(&k.src[0], &ip[12], 4);
		__builtin_memcpy(&k.dst[0], &ip[16], 4);
		octets = ((__u32)ip[2] << 8) | ip[3];
	} else if (type == WEIR_ETH_P_IPV6) {
		if (WEIR_LOAD(ctx, WEIR_ETH_HLEN, ip, 40) < 0)
			return 0;
		if ((ip[0] >> 4) != 6)
			return 0;
		iphl = 40;
		k.family = 6;
		k.proto = ip[6];
		__builtin_memcpy(k.src, &ip[8], 16);
		__builtin_memcpy(k.dst, &ip[24], 16);
		/* A jumbogram (payload length 0) stays with weir, which reads it. */
		octets = ((__u32)ip[4] << 8) | ip[5];
		if (octets == 0)
			return 0;
		octets += 40;
	} else {
		return 0;
	}
	__u32 l4hl;
	__u8 flags = 0;
	if (k.proto == WEIR_TCP) {
		if (WEIR_LOAD(ctx, WEIR_ETH_HLEN + iphl, l4, 14) < 0)
			return 0;
		flags = l4[13];
		l4hl = (l4[12] >> 4) * 4;
	} else if (k.proto == WEIR_UDP) {
		if (WEIR_LOAD(ctx, WEIR_ETH_HLEN + iphl, l4, 8) < 0)
			return 0;
		l4hl = 8;
	} else {
		return 0;
	}
	__builtin_memcpy(&k.sport, &l4[0], 2);
	__builtin_memcpy(&k.dport, &l4[2], 2);
	struct weir_flow_counters *v = bpf_map_lookup_elem(&weir_flows, &k);
	if (flags & WEIR_TCP_CONTROL) {
		if (v)
			v->stopped = 1;
		if (flags & WEIR_TCP_RST) {
			struct weir_flow_key r = k;
			__builtin_memcpy(r.src, k.dst, sizeof(r.src));
			__builtin_memcpy(r.dst, k.src, sizeof(r.dst));
			r.sport = k.dport;
			r.dport = k.sport;
			struct weir_flow_counters *o = bpf_map_lookup_elem(&weir_flows, &r);
			if (o)
				o->stopped = 1;
		}
		return 0;
	}
	if (!v)
		return 0;
	if (v->stopped)
		return 0;
	__u32 head = iphl + l4hl;
	__sync_fetch_and_add(&v->packets, 1);
	__sync_fetch_and_add(&v->octets, octets);
	__sync_fetch_and_add(&v->payload, octets > head ? octets - head : 0);
	if (flags)
		__sync_fetch_and_or(&v->tcp_flags, (__u32)flags);
	v->last_ns = bpf_ktime_get_ns();
	return 1;
}

#endif
