// SPDX-License-Identifier: MIT OR GPL-2.0
/*
 * weir's XDP program for AF_XDP capture.
 *
 * Every packet that arrives on an RX queue for which weir registered an AF_XDP
 * socket in `weir_xsks` (key: the queue index) is redirected to that socket; a
 * packet on any other queue goes on up the stack (XDP_PASS), so capturing some
 * queues of an interface never cuts the others off.
 *
 * The kernel cutoff (weir_cutoff.h): on a captured queue, a packet of a
 * stream weir installed in `weir_flows` is counted there and dropped
 * (XDP_DROP) before it takes a UMEM frame; a redirected packet does not go up
 * the stack either, so dropping it takes nothing from the host.
 *
 * The capture filter: weir translates the user's filter to eBPF (the filter
 * module's ebpf.rs) and puts it in `weir_filter`; on a captured queue this
 * program tail-calls it. The filter redirects what it accepts to the queue's
 * socket, and passes what it rejects up the stack (XDP_PASS), counting it per
 * queue in `weir_filtered`, so a capture never takes the host's own traffic
 * that its filter does not want. With no filter in place the tail call falls
 * through and every packet is redirected.
 *
 * weir recognises a program left attached by an earlier run by its name,
 * `weir_xdp`: keep the function name as it is.
 */

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#define WEIR_CTX struct xdp_md
#define WEIR_LOAD(ctx, off, to, len) bpf_xdp_load_bytes(ctx, off, to, len)
#include "weir_cutoff.h"

/* One entry per possible queue: weir's MAX_QUEUES. */
#define WEIR_MAX_QUEUES 1024

struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, WEIR_MAX_QUEUES);
	__type(key, __u32);
	__type(value, __u32);
} weir_xsks SEC(".maps");

/* The translated filter: slot 0, empty when there is none. */
struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} weir_filter SEC(".maps");

/* What the filter passed to the stack, per queue; the translated filter
 * writes it, weir reads it as packets filtered out. */
struct weir_filtered {
	__u64 packets;
	__u64 bytes;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, WEIR_MAX_QUEUES);
	__type(key, __u32);
	__type(value, struct weir_filtered);
} weir_filtered SEC(".maps");

SEC("xdp")
int weir_xdp(struct xdp_md *ctx)
{
	__u32 queue = ctx->rx_queue_index;

	if (!bpf_map_lookup_elem(&weir_xsks, &queue))
		return XDP_PASS;
	if (weir_cutoff(ctx))
		return XDP_DROP;
	bpf_tail_call(ctx, &weir_filter, 0);
	/* The flags argument is the action when the lookup finds no socket
	 * (kernel 5.3 and later): the queue is not captured, pass the packet. */
	return bpf_redirect_map(&weir_xsks, queue, XDP_PASS);
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
