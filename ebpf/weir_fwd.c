// SPDX-License-Identifier: MIT OR GPL-2.0
/*
 * weir's in-kernel forwarder (`weir forward --backend xdp`): every packet
 * that arrives on IN (and on OUT, when forwarding both ways) is judged by the
 * user's filter and sent out of the other interface with an XDP redirect
 * through a device map, without leaving the kernel and without a copy.
 *
 * Direction 0 receives on `weir_in_ifindex` and sends to slot 0 of
 * `weir_fwd_out`; direction 1 is the way back (slot 1). Counting, per
 * direction, in `weir_fwd_counts` (per CPU, summed by weir):
 *   received    every packet the program saw, before the filter;
 *   filtered    what the filter rejected (the translated filter's reject
 *               block counts it and drops the packet);
 *   failed      frames the output device cannot carry (longer than its
 *               MTU allows, or shorter than an Ethernet header: see
 *               `fits`), and redirects the kernel refused at once (the
 *               device map slot is empty, or the redirect helper failed),
 *               all dropped;
 *   forwarded   frames the output device took, and
 *   tx_failed   frames it gave back, both from the device map's transmit
 *               tracepoint (xdp_devmap_xmit), which reports each bulk flush
 *               with the devices it went from and to;
 *   redirect_err  redirects that failed after the program (the device has
 *               no XDP transmit, is down, or the frame is too long for it),
 *               from the xdp_redirect_err tracepoint.
 * So received = filtered + failed + forwarded + tx_failed + redirect_err +
 * what is between the program and the flush (nothing, once the interface's
 * poll has ended).
 *
 * The tracepoints see every device's redirects; they count only those whose
 * devices' indexes are this forwarder's. Indexes are per network namespace:
 * another XDP forwarder between devices of the same indexes in another
 * namespace would be counted too.
 *
 * The filter: weir translates it to eBPF (filter/ebpf) and puts it in slot 0
 * of `weir_fwd_slots`; this program tail-calls it after counting the packet
 * received. Its accept block tail-calls slot 1, `weir_fwd_send`, which sends
 * as this program does after the filter; its reject block counts and drops.
 * With no filter the tail call falls through. So a frame is checked against
 * the output's MTU in one place (`send`), whether a filter passed it or not.
 *
 * The MTU: a veth takes frames of its MTU + 18 bytes even untagged, and other
 * drivers differ, so the device's own check does not make the backends agree.
 * `send` refuses what afpacket and afxdp refuse: a frame longer than the
 * output's MTU plus an Ethernet header (4 bytes more with a VLAN tag), the
 * limits weir sets from the device's MTU (tx::longest_frames), or shorter than
 * an Ethernet header. Such a frame is counted as failed and dropped.
 *
 * A packet limit (`-c`): with `weir_limit` above 0, the first `weir_limit`
 * packets are forwarded; every later one goes on up the stack untouched and
 * uncounted, as if weir had already stopped, and weir stops on seeing the
 * limit reached.
 */

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

/* Set by weir before loading (read-only to the program, so the verifier
 * prunes what a zero makes dead). */
volatile const __u32 weir_in_ifindex = 0;
volatile const __u32 weir_out_ifindex = 0;
volatile const __u64 weir_limit = 0;
/* The longest frame the device each direction sends to carries, untagged and
 * VLAN-tagged: direction 0 sends to OUT, direction 1 to IN. */
volatile const __u64 weir_out_longest = 0;
volatile const __u64 weir_out_longest_tagged = 0;
volatile const __u64 weir_in_longest = 0;
volatile const __u64 weir_in_longest_tagged = 0;

#define ETH_HLEN 14
#define ETH_P_8021Q 0x8100
#define ETH_P_8021AD 0x88a8

/* Field offsets are taken from the running kernel's BTF when the program
 * loads (CO-RE), so only the field used is declared. */
struct net_device {
	int ifindex;
} __attribute__((preserve_access_index));
struct bpf_prog;

/* Keep in step with `Counts` in crates/weir/src/forward/kernel.rs. */
struct weir_fwd_counts {
	__u64 received;
	__u64 received_bytes;
	__u64 filtered;
	__u64 filtered_bytes;
	__u64 failed;
	__u64 failed_bytes;
	__u64 forwarded;
	__u64 tx_failed;
	__u64 redirect_err;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, struct weir_fwd_counts);
} weir_fwd_counts SEC(".maps");

/* Slot d: the device direction d sends to. */
struct {
	__uint(type, BPF_MAP_TYPE_DEVMAP);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, __u32);
} weir_fwd_out SEC(".maps");

/* Slot 0: the translated filter, empty when there is none. Slot 1:
 * `weir_fwd_send`, which the filter's accept block tail-calls. */
struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, __u32);
} weir_fwd_slots SEC(".maps");

/* Packets taken so far, when limited. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} weir_fwd_taken SEC(".maps");

static __always_inline __u32 direction_of(__u32 ifindex)
{
	return ifindex == weir_in_ifindex ? 0 : 1;
}

/* Whether the device direction `dir` sends to can carry the frame of `len`
 * bytes: a whole Ethernet header, and no longer than its MTU allows. The
 * program is not multi-buffer (SEC("xdp"), not "xdp.frags"), so the frame is
 * all in data..data_end. */
static __always_inline int fits(struct xdp_md *ctx, __u32 dir, __u64 len)
{
	__u8 *data = (__u8 *)(long)ctx->data;
	__u8 *end = (__u8 *)(long)ctx->data_end;
	__u64 longest = dir == 0 ? weir_out_longest : weir_in_longest;
	__u64 longest_tagged = dir == 0 ? weir_out_longest_tagged : weir_in_longest_tagged;
	__u16 type;

	if (data + ETH_HLEN > end)
		return 0;
	if (len <= longest)
		return 1;
	if (len > longest_tagged)
		return 0;
	/* Only a tagged frame may take the tag's bytes more. */
	type = (__u16)data[12] << 8 | data[13];
	return type == ETH_P_8021Q || type == ETH_P_8021AD;
}

/* Send a frame the filter passed (or every frame, with no filter) to the
 * other interface, or count it as failed and drop it. */
static __always_inline long send(struct xdp_md *ctx, __u32 dir, struct weir_fwd_counts *c, __u64 len)
{
	long verdict = XDP_DROP;

	if (fits(ctx, dir, len))
		verdict = bpf_redirect_map(&weir_fwd_out, dir, XDP_DROP);
	if (verdict != XDP_REDIRECT) {
		c->failed++;
		c->failed_bytes += len;
	}
	return verdict;
}

SEC("xdp")
int weir_fwd(struct xdp_md *ctx)
{
	__u32 dir = direction_of(ctx->ingress_ifindex);
	struct weir_fwd_counts *c;
	__u64 len = bpf_xdp_get_buff_len(ctx);

	if (weir_limit) {
		__u32 zero = 0;
		__u64 *taken = bpf_map_lookup_elem(&weir_fwd_taken, &zero);

		if (!taken || __sync_fetch_and_add(taken, 1) >= weir_limit)
			return XDP_PASS;
	}
	c = bpf_map_lookup_elem(&weir_fwd_counts, &dir);
	if (!c)
		return XDP_DROP;
	c->received++;
	c->received_bytes += len;
	bpf_tail_call(ctx, &weir_fwd_slots, 0);
	return send(ctx, dir, c, len);
}

/* Slot 1: what the filter accepted. The packet was counted received before
 * the filter ran. */
SEC("xdp")
int weir_fwd_send(struct xdp_md *ctx)
{
	__u32 dir = direction_of(ctx->ingress_ifindex);
	struct weir_fwd_counts *c = bpf_map_lookup_elem(&weir_fwd_counts, &dir);

	if (!c)
		return XDP_DROP;
	return send(ctx, dir, c, bpf_xdp_get_buff_len(ctx));
}

/* The direction whose sending device is `to`, received on `from`; 2 for a
 * redirect that is not this forwarder's. */
static __always_inline __u32 lane_of(int from, int to)
{
	if (from == weir_in_ifindex && to == weir_out_ifindex)
		return 0;
	if (from == weir_out_ifindex && to == weir_in_ifindex)
		return 1;
	return 2;
}

SEC("tp_btf/xdp_devmap_xmit")
int BPF_PROG(weir_fwd_xmit, const struct net_device *from_dev, const struct net_device *to_dev, int sent, int drops,
	     int err)
{
	__u32 dir = lane_of(from_dev->ifindex, to_dev->ifindex);
	struct weir_fwd_counts *c = bpf_map_lookup_elem(&weir_fwd_counts, &dir);

	if (c) {
		c->forwarded += sent;
		c->tx_failed += drops;
	}
	return 0;
}

SEC("tp_btf/xdp_redirect_err")
int BPF_PROG(weir_fwd_redirect_err, const struct net_device *dev, const struct bpf_prog *xdp, const void *tgt, int err,
	     enum bpf_map_type map_type, __u32 map_id, __u32 index)
{
	/* Only redirects through a device map from one of this forwarder's
	 * inputs: index is the map slot, which is the direction. */
	__u32 dir;
	struct weir_fwd_counts *c;

	if (map_type != BPF_MAP_TYPE_DEVMAP || index > 1)
		return 0;
	dir = lane_of(dev->ifindex, index == 0 ? weir_out_ifindex : weir_in_ifindex);
	if (dir != index)
		return 0;
	c = bpf_map_lookup_elem(&weir_fwd_counts, &dir);
	if (c)
		c->redirect_err++;
	return 0;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
