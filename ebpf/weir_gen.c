// SPDX-License-Identifier: MIT OR GPL-2.0
/*
 * weir's traffic generator, run by BPF_PROG_TEST_RUN with
 * BPF_F_TEST_XDP_LIVE_FRAMES (`weir replay --xdp`).
 *
 * The kernel runs this program once per repetition on a fresh frame and
 * transmits what it redirects. Each run that sends takes the next frame of
 * the trace held in `weir_gen_frames` (frame number modulo the frame count,
 * so passes follow one another in trace order), makes the kernel's frame that
 * long and copies the trace's bytes over it, then redirects it to the
 * interface whose index is in `weir_gen_state`. The count of frames sent
 * lives in the state too (`next`): user space sets it to 0 before the first
 * test run and reads it after each, so one pass can span many test runs and a
 * stopped one says how far it got.
 *
 * Pacing: with `gap_ps` (a fixed gap between frames, picoseconds) or `bps`
 * (a bit rate: each frame's gap is its length's worth of bits at that rate)
 * above 0, a run that finds the next frame not yet due by bpf_ktime_get_ns()
 * sends nothing (XDP_DROP: the kernel recycles its frame) and does not count;
 * user space runs the program in a loop, so frames leave at their times, not
 * in bursts. `due_ns` is when the next frame is due and `rem_ps` the gaps'
 * fractions of a nanosecond carried so far. A sender that falls more than
 * WEIR_GEN_CATCH_UP frames behind (its CPU was busy) starts again from now
 * rather than catch up in a longer burst. Without pacing every run sends.
 *
 * No run sends once `next` has reached `stop_at`, so user space can ask for
 * exactly the frames it still wants (-c) from a test run of many runs.
 *
 * With `vary_ports` above 0, an untagged IPv4 TCP or UDP frame gets (frame
 * number modulo vary_ports) added to its source port, with its checksum
 * updated to match (a UDP checksum of 0, none, stays 0), so that a receiver's
 * RSS and flow tables see many flows even from a one-frame trace. The update
 * works from the port the frame holds, so it is right whatever the kernel
 * left in a recycled frame.
 */

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

/* Longest frame held: weir's WEIR_GEN_MAX_FRAME in tx/xdp must agree. */
#define WEIR_GEN_MAX_FRAME 2048

struct weir_gen_frame {
	__u32 len;
	__u8 data[WEIR_GEN_MAX_FRAME];
};

struct weir_gen_state {
	__u64 next;
	__u32 ifindex;
	__u32 frames;
	__u32 vary_ports;
	__u32 pad;
	__u64 gap_ps;
	__u64 bps;
	__u64 due_ns;
	__u64 rem_ps;
	__u64 stop_at;
};

/* How many frames a paced sender that fell behind its schedule (its CPU was
 * busy) may send at once to catch up; further behind, it starts again from
 * now. A burst is what a receiver's ring must hold: a veth's takes 256
 * frames, and catching up on 10 ms (2,000 frames at 200 kpps) overflowed
 * it. */
#define WEIR_GEN_CATCH_UP 32

/* max_entries is set by the loader to the trace's frame count. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct weir_gen_frame);
} weir_gen_frames SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct weir_gen_state);
} weir_gen_state SEC(".maps");

/* RFC 1624 incremental update of a one's-complement checksum for one 16-bit
 * word changing from `old` to `new`. */
static __always_inline __u16 csum_replace(__u16 check, __u16 old, __u16 new)
{
	__u32 sum = (__u16)~check + (__u16)~old + new;

	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return ~sum;
}

static __always_inline void vary_port(struct xdp_md *ctx, __u16 offset)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = data + sizeof(*eth);
	__u16 *sport, *check;
	__u32 ihl;
	void *l4;

	if ((void *)(ip + 1) > data_end || eth->h_proto != bpf_htons(ETH_P_IP))
		return;
	/* A fragment after the first carries no ports. */
	if (ip->frag_off & bpf_htons(0x1fff))
		return;
	ihl = ip->ihl * 4;
	if (ihl < sizeof(*ip))
		return;
	l4 = (void *)ip + ihl;
	sport = l4;
	if (ip->protocol == IPPROTO_UDP)
		check = l4 + 6;
	else if (ip->protocol == IPPROTO_TCP)
		check = l4 + 16;
	else
		return;
	if ((void *)(check + 1) > data_end)
		return;
	__u16 old = *sport;
	__u16 new = bpf_htons(bpf_ntohs(old) + offset);
	*sport = new;
	if (ip->protocol == IPPROTO_UDP && *check == 0)
		return;
	*check = csum_replace(*check, old, new);
	/* A UDP checksum that comes out as 0 is sent as all ones (RFC 768). */
	if (ip->protocol == IPPROTO_UDP && *check == 0)
		*check = 0xffff;
}

SEC("xdp")
int weir_gen(struct xdp_md *ctx)
{
	__u32 zero = 0;
	struct weir_gen_state *s = bpf_map_lookup_elem(&weir_gen_state, &zero);

	if (!s || s->frames == 0)
		return XDP_ABORTED;
	__u64 run = s->next;
	if (run >= s->stop_at)
		return XDP_DROP;
	__u32 index = run % s->frames;
	struct weir_gen_frame *f = bpf_map_lookup_elem(&weir_gen_frames, &index);

	if (!f)
		return XDP_ABORTED;
	__u32 len = f->len;
	if (len < ETH_HLEN || len > WEIR_GEN_MAX_FRAME)
		return XDP_ABORTED;
	if (s->gap_ps || s->bps) {
		__u64 now = bpf_ktime_get_ns();

		/* len * 8e12 fits 64 bits for frames of up to 2 MB. */
		__u64 gap = s->gap_ps ? s->gap_ps : (__u64)len * 8000000000000ULL / s->bps;

		if (s->due_ns == 0 || now > s->due_ns + gap * WEIR_GEN_CATCH_UP / 1000) {
			s->due_ns = now;
			s->rem_ps = 0;
		}
		if (now < s->due_ns)
			return XDP_DROP;
		__u64 ps = s->rem_ps + gap;

		s->due_ns += ps / 1000;
		s->rem_ps = ps % 1000;
	}
	s->next = run + 1;
	/* The length from the helper: data_end - data compiles to pointer
	 * arithmetic the verifier refuses. */
	int have = bpf_xdp_get_buff_len(ctx);
	if (bpf_xdp_adjust_tail(ctx, (int)len - have))
		return XDP_ABORTED;
	if (bpf_xdp_store_bytes(ctx, 0, f->data, len))
		return XDP_ABORTED;
	if (s->vary_ports)
		vary_port(ctx, run % s->vary_ports);
	return bpf_redirect(s->ifindex, 0);
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
