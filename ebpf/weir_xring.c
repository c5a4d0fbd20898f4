// SPDX-License-Identifier: MIT OR GPL-2.0
/*
 * weir's XDP program for `xdp:` capture: packets copied into one BPF ring
 * buffer, packed end to end.
 *
 * Why: AF_XDP gives every packet a UMEM frame of at least 2 KiB, so a
 * paused reader on afxdp holds an eighth of what afpacket's blocks hold in
 * the same memory when packets are small. A BPF ring buffer holds each
 * packet in 8 bytes of ring header, 16 of weir's and its bytes, rounded up
 * to 8: 88 bytes for a 64-byte frame, against 160 in a TPACKET_V3 block. The
 * kernel fills it while weir's threads do not run, up to its last byte.
 *
 * The contract (user space is crates/weir/src/source/xring, which mirrors
 * struct weir_rec and the map names):
 *
 * - A packet on an RX queue weir marked in `weir_queues` is stored; one on
 *   any other queue goes on up the stack untouched (XDP_PASS).
 * - The kernel cutoff (weir_cutoff.h) runs first: a packet of an installed
 *   stream is counted there and dropped.
 * - The capture filter, translated to eBPF by weir, sits in slot 0 of
 *   `weir_slots`: this program tail-calls it, and it tail-calls slot 1 (the
 *   store program below) for what it accepts, and counts what it rejects in
 *   `weir_filtered` and passes it up the stack. With no filter the tail
 *   call falls through and every packet is stored.
 * - Storing: a record is struct weir_rec, then the first `caplen` bytes of
 *   the packet (caplen = min(length, weir_snaplen, WEIR_SCRATCH)); its
 *   length is the ring's record length. A record the ring has no room for
 *   is counted in `weir_lost` for its queue: weir reads it as a delivery
 *   drop (as afpacket's ring overflow). Nothing is lost uncounted.
 * - The time is CLOCK_TAI (bpf_ktime_get_tai_ns): weir takes away the
 *   TAI - REALTIME offset, which follows every step of the wall clock.
 * - After storing, the packet goes on up the stack (weir_verdict =
 *   XDP_PASS, the default: the host keeps all its traffic, as with
 *   afpacket), or is dropped (XDP_DROP) when weir was told to take the
 *   captured traffic: the stack then spends nothing on it.
 * - weir recognises a program left attached by an earlier run by its name,
 *   `weir_xring`: keep the function name as it is.
 */

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#define WEIR_CTX struct xdp_md
#define WEIR_LOAD(ctx, off, to, len) bpf_xdp_load_bytes(ctx, off, to, len)
#include "weir_cutoff.h"

/* One entry per possible queue: weir's MAX_QUEUES. */
#define WEIR_MAX_QUEUES 1024
/* The most bytes of a packet a record keeps: a power of two. */
#define WEIR_SCRATCH 16384

/* The record's head; the packet's bytes follow. */
struct weir_rec {
	__u64 tai_ns;
	__u32 wire_len;
	__u32 queue;
};

struct weir_scratch {
	struct weir_rec rec;
	__u8 data[WEIR_SCRATCH];
};

/* The loader sets the size (a power of two, at least a page). */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4096);
} weir_ring SEC(".maps");

/* 1 for a captured queue. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, WEIR_MAX_QUEUES);
	__type(key, __u32);
	__type(value, __u32);
} weir_queues SEC(".maps");

/* Slot 0: the translated filter, empty when there is none. Slot 1: the
 * store program, which the filter calls for what it accepts. */
struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, __u32);
} weir_slots SEC(".maps");

struct weir_count {
	__u64 packets;
	__u64 bytes;
};

/* What the filter passed to the stack, per queue (the filter writes it). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, WEIR_MAX_QUEUES);
	__type(key, __u32);
	__type(value, struct weir_count);
} weir_filtered SEC(".maps");

/* What the ring had no room for, per queue. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, WEIR_MAX_QUEUES);
	__type(key, __u32);
	__type(value, struct weir_count);
} weir_lost SEC(".maps");

/* Where a record is put together before it is copied into the ring: the
 * ring's reserve needs a size known when the program is verified, and a
 * packet's is not. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct weir_scratch);
} weir_scratch SEC(".maps");

/* Set by the loader before the program is loaded. */
volatile const __u32 weir_snaplen = WEIR_SCRATCH;
volatile const __u32 weir_verdict = XDP_PASS;

static __always_inline void weir_count_lost(__u32 queue, __u64 bytes)
{
	struct weir_count *c = bpf_map_lookup_elem(&weir_lost, &queue);

	if (c) {
		c->packets += 1;
		c->bytes += bytes;
	}
}

static __always_inline int weir_store(struct xdp_md *ctx)
{
	__u32 zero = 0;
	__u32 queue = ctx->rx_queue_index;
	__u64 wire = bpf_xdp_get_buff_len(ctx);
	__u64 cap = wire < weir_snaplen ? wire : weir_snaplen;
	struct weir_scratch *s = bpf_map_lookup_elem(&weir_scratch, &zero);

	if (!s) {
		weir_count_lost(queue, wire);
		return weir_verdict;
	}
	s->rec.tai_ns = bpf_ktime_get_tai_ns();
	s->rec.wire_len = wire;
	s->rec.queue = queue;
	if (cap > WEIR_SCRATCH)
		cap = WEIR_SCRATCH;
	if (cap == 0 || bpf_xdp_load_bytes(ctx, 0, s->data, cap) < 0) {
		weir_count_lost(queue, wire);
		return weir_verdict;
	}
	if (bpf_ringbuf_output(&weir_ring, s, sizeof(s->rec) + cap, 0) < 0)
		weir_count_lost(queue, wire);
	return weir_verdict;
}

SEC("xdp")
int weir_xring(struct xdp_md *ctx)
{
	__u32 queue = ctx->rx_queue_index;
	__u32 *on = bpf_map_lookup_elem(&weir_queues, &queue);

	if (!on || !*on)
		return XDP_PASS;
	if (weir_cutoff(ctx))
		return XDP_DROP;
	bpf_tail_call(ctx, &weir_slots, 0);
	return weir_store(ctx);
}

/* Slot 1: what the filter accepted. */
SEC("xdp")
int weir_xring_store(struct xdp_md *ctx)
{
	return weir_store(ctx);
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
