// SPDX-License-Identifier: MIT OR GPL-2.0
/*
 * weir's fanout program: flow-bucket steering of an AF_PACKET fanout group.
 *
 * The contract (the loader is crates/weir/src/source/afpacket/steer.rs):
 *
 * - Attached to a PACKET_FANOUT_EBPF group with PACKET_FANOUT_DATA, it runs once
 *   for every packet the group receives, before any member's socket filter, and
 *   returns the index of the member that gets the packet (the kernel takes it
 *   modulo the number of members). weir joins its sockets in queue order, so the
 *   member index is the position of the queue in the capture.
 * - Each packet falls in one of WEIR_BUCKETS buckets; the member is
 *   weir_buckets[bucket]. User space fills and changes that table; a change
 *   steers the next packet of the bucket.
 * - weir_bucket_hits[bucket] counts the packets steered through each bucket,
 *   per CPU (user space sums the CPUs), so a controller sees the load of every
 *   bucket. Every packet the group sees counts, also one its member's socket
 *   filter then rejects.
 * - The bucket is weir's own: bucket = hash & (WEIR_BUCKETS - 1), where hash is
 *   the Toeplitz hash with weir's symmetric key (0x6d5a repeated) of the source
 *   and destination addresses, followed by the source and destination ports when
 *   the packet carries them, exactly as weir's user-space RSS (crates/weir/src/
 *   rss) hashes a trace. So a bucket holds the same flows here as in a trace
 *   split into queues, and both directions of a flow share a bucket. Ports
 *   count for TCP, UDP, SCTP, DCCP and UDP-Lite when the packet is not a
 *   fragment (every IPv4 fragment, first or not, and every IPv6 packet with a
 *   fragment header hashes by addresses only, so all pieces of a datagram stay
 *   together). Packets that are not IPv4 or IPv6 go to bucket 0.
 * - Where the two can differ: weir's parser reads the captured bytes, this one
 *   the whole packet, so a snaplen shorter than the headers changes weir's view
 *   only; up to four VLAN tags in the packet data are skipped (plus the one the
 *   kernel takes out of a received frame).
 *
 * Why the hash is cheap here. With a key that repeats every 16 bits, the key
 * window of an input bit depends only on the bit's position modulo 16, and the
 * Toeplitz hash is linear in its input. So the hash of the whole input equals the
 * hash of the XOR of its 16-bit words, which is the XOR of 16 fixed windows
 * (the 32-bit key rotated left by 0 to 15) chosen by the bits of that XOR. The
 * Rust test `folded_toeplitz_is_weirs_toeplitz` holds the two to each other, and
 * `the_kernel_program_buckets_frames_as_weirs_rss_does` runs this program in the
 * kernel (BPF_PROG_TEST_RUN) on tagged, fragmented, extended and cut frames
 * against weir's RSS.
 *
 * Where the packet is. A socket filter program may not read packet memory
 * directly; bpf_skb_load_bytes reads from skb->data, also from paged data. The
 * fanout demux runs where the packet taps run: on receive, after the link layer
 * was pulled, so skb->data is the network header and skb->protocol says what it
 * is (after the kernel took out the outer VLAN tag); for an outgoing packet
 * (pkt_type PACKET_OUTGOING) skb->data is the Ethernet header. weir uses this
 * program on Ethernet (and loopback) devices only.
 *
 * The function name is the program's name in the kernel; keep it as it is.
 */

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

/* Buckets of the table: rss::BucketCount::DEFAULT, a power of two. */
#define WEIR_BUCKETS 512

/* EtherTypes (linux/if_ether.h), host order. */
#define ETH_P_IP 0x0800
#define ETH_P_IPV6 0x86DD
#define ETH_P_8021Q 0x8100
#define ETH_P_8021AD 0x88A8
#define ETH_P_QINQ_OLD 0x9100
#define ETH_HLEN 14
/* linux/if_packet.h */
#define PACKET_OUTGOING 4

/* IP protocol numbers. */
#define IPPROTO_HOPOPTS 0
#define IPPROTO_TCP 6
#define IPPROTO_UDP 17
#define IPPROTO_DCCP 33
#define IPPROTO_ROUTING 43
#define IPPROTO_FRAGMENT 44
#define IPPROTO_AH 51
#define IPPROTO_DSTOPTS 60
#define IPPROTO_SCTP 132
#define IPPROTO_UDPLITE 136

/* As weir's parser: tags skipped, extension headers walked. */
#define MAX_VLAN_TAGS 4
#define MAX_EXTENSION_HEADERS 8

/* The symmetric key's first 32 bits: 0x6d5a twice. */
#define WEIR_KEY 0x6d5a6d5aU

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, WEIR_BUCKETS);
	__type(key, __u32);
	__type(value, __u32);
} weir_buckets SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, WEIR_BUCKETS);
	__type(key, __u32);
	__type(value, __u64);
} weir_bucket_hits SEC(".maps");

/* The first 20 bytes of an IPv4 header. */
struct ipv4 {
	__u8 version_ihl;
	__u8 tos;
	__be16 total_len;
	__be16 id;
	__be16 frag;
	__u8 ttl;
	__u8 protocol;
	__be16 check;
	__u32 src;
	__u32 dst;
};

/* An IPv6 header. */
struct ipv6 {
	__u8 version_class;
	__u8 class_flow[3];
	__be16 payload_len;
	__u8 next;
	__u8 hop_limit;
	__u32 addrs[8];
};

static __always_inline int carries_ports(__u8 proto)
{
	return proto == IPPROTO_TCP || proto == IPPROTO_UDP || proto == IPPROTO_SCTP ||
	       proto == IPPROTO_DCCP || proto == IPPROTO_UDPLITE;
}

/*
 * The Toeplitz hash of an input whose 32-bit words, as they lie in the packet,
 * XOR to `words` (see the head of the file).
 */
static __always_inline __u32 toeplitz(__u32 words)
{
	__u32 v = bpf_ntohl(words);
	__u32 fold = (v >> 16) ^ (v & 0xffff);
	__u32 window = WEIR_KEY;
	__u32 hash = 0;

#pragma unroll
	for (int bit = 0; bit < 16; bit++) {
		if (fold & (0x8000 >> bit))
			hash ^= window;
		window = (window << 1) | (window >> 31);
	}
	return hash;
}

/* The ports of the upper-layer header at `at`, as they lie, or 0 when cut off. */
static __always_inline __u32 ports_at(struct __sk_buff *skb, __u32 at)
{
	__u32 ports;

	if (bpf_skb_load_bytes(skb, at, &ports, sizeof(ports)))
		return 0;
	return ports;
}

static __always_inline __u32 ipv4_words(struct __sk_buff *skb, __u32 off, int *ip)
{
	struct ipv4 h;
	__u8 last;

	if (bpf_skb_load_bytes(skb, off, &h, sizeof(h)) || h.version_ihl >> 4 != 4)
		return 0;
	__u32 header_len = (h.version_ihl & 0x0f) * 4;
	/* weir's parser wants the whole header, options included. */
	if (header_len < sizeof(h) || bpf_skb_load_bytes(skb, off + header_len - 1, &last, 1))
		return 0;
	*ip = 1;
	__u32 words = h.src ^ h.dst;
	/* More fragments, or an offset: no ports, whichever piece this is. */
	if (!(h.frag & bpf_htons(0x3fff)) && carries_ports(h.protocol))
		words ^= ports_at(skb, off + header_len);
	return words;
}

static __always_inline __u32 ipv6_words(struct __sk_buff *skb, __u32 off, int *ip)
{
	struct ipv6 h;

	if (bpf_skb_load_bytes(skb, off, &h, sizeof(h)) || h.version_class >> 4 != 6)
		return 0;
	*ip = 1;
	__u32 words = 0;
#pragma unroll
	for (int i = 0; i < 8; i++)
		words ^= h.addrs[i];

	__u8 next = h.next;
	__u32 at = off + sizeof(h);
	for (int i = 0; i < MAX_EXTENSION_HEADERS; i++) {
		if (next == IPPROTO_HOPOPTS || next == IPPROTO_ROUTING || next == IPPROTO_DSTOPTS ||
		    next == IPPROTO_AH) {
			__u8 ext[2]; /* next header, length */

			if (bpf_skb_load_bytes(skb, at, ext, sizeof(ext)))
				return words;
			at += next == IPPROTO_AH ? ((__u32)ext[1] + 2) * 4 : ((__u32)ext[1] + 1) * 8;
			next = ext[0];
		} else if (next == IPPROTO_FRAGMENT) {
			return words;
		} else {
			if (carries_ports(next))
				words ^= ports_at(skb, at);
			return words;
		}
	}
	/* A chain longer than weir walks: addresses only, as weir does. */
	return words;
}

static __always_inline __u32 bucket_of(struct __sk_buff *skb)
{
	__u32 off = 0;
	__u16 proto;

	if (skb->pkt_type == PACKET_OUTGOING) {
		__be16 type;

		if (bpf_skb_load_bytes(skb, ETH_HLEN - 2, &type, sizeof(type)))
			return 0;
		proto = bpf_ntohs(type);
		off = ETH_HLEN;
	} else {
		proto = bpf_ntohs((__u16)skb->protocol);
	}

#pragma unroll
	for (int i = 0; i < MAX_VLAN_TAGS; i++) {
		if (proto != ETH_P_8021Q && proto != ETH_P_8021AD && proto != ETH_P_QINQ_OLD)
			break;
		__be16 inner;

		/* A tag: TCI, then the EtherType of what follows. */
		if (bpf_skb_load_bytes(skb, off + 2, &inner, sizeof(inner)))
			return 0;
		proto = bpf_ntohs(inner);
		off += 4;
	}

	int ip = 0;
	__u32 words;

	if (proto == ETH_P_IP)
		words = ipv4_words(skb, off, &ip);
	else if (proto == ETH_P_IPV6)
		words = ipv6_words(skb, off, &ip);
	else
		return 0;
	if (!ip)
		return 0;
	return toeplitz(words) & (WEIR_BUCKETS - 1);
}

SEC("socket")
int weir_fanout(struct __sk_buff *skb)
{
	__u32 bucket = bucket_of(skb);
	__u64 *hits = bpf_map_lookup_elem(&weir_bucket_hits, &bucket);
	__u32 *member = bpf_map_lookup_elem(&weir_buckets, &bucket);

	/*
	 * Per CPU, so no atomic add: the demux runs with bottom halves off (in the
	 * receive softirq, or under rcu_read_lock_bh on transmit), never nested on
	 * one CPU (a PREEMPT_RT kernel could rarely lose a count).
	 */
	if (hits)
		*hits += 1;
	return member ? *member : 0;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
