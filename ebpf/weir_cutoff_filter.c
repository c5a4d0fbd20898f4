// SPDX-License-Identifier: MIT OR GPL-2.0
/*
 * weir's socket filter for the kernel cutoff on AF_PACKET (loaded by
 * crates/weir/src/source/afpacket/cutoff.rs): attached to each capture socket
 * with SO_ATTACH_BPF, it runs before the packet is copied into the ring.
 * A packet of a stream weir installed in `weir_flows` (weir_cutoff.h) is
 * counted there and refused (return 0: the socket does not take it; the
 * host's stack and other sockets are not affected); any other packet is
 * kept up to weir_snaplen bytes, which the loader sets to the capture's
 * snaplen (what weir's classic filter returns without a user filter).
 *
 * A socket has one filter: this one takes the place of the classic BPF
 * program weir attaches otherwise, so weir uses it only on Ethernet devices
 * (not loopback, whose outgoing copies the classic program drops) and only
 * without a libpcap filter.
 *
 * On a packet socket the filter sees the frame from its link-layer header
 * (offset 0 is the Ethernet header), as on the wire.
 */

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#define WEIR_CTX struct __sk_buff
#define WEIR_LOAD(ctx, off, to, len) bpf_skb_load_bytes(ctx, off, to, len)
#include "weir_cutoff.h"

/* Set by the loader before the program is loaded. */
const volatile __u32 weir_snaplen = 262144;

SEC("socket")
int weir_cutoff_filter(struct __sk_buff *skb)
{
	return weir_cutoff(skb) ? 0 : weir_snaplen;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
