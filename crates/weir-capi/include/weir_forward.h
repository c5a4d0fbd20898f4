/*
 * weir_forward.h: the C API of weir's inline forwarder (libweirstream.so,
 * beside weir_stream.h), what `weir forward IN OUT` runs.
 *
 * Packets received on IN are sent out of OUT (IN itself sends them back out;
 * "bidirectional" forwards OUT to IN as well). Each packet passes the filter
 * (libpcap's language) or is dropped by policy; then the verdict callback,
 * if set, decides: WEIR_PASS sends it, WEIR_DROP drops it.
 *
 *     char err[WEIR_ERRBUF_SIZE];
 *     weir_forward_t *h = weir_forward_create("eth1", "eth2", err);
 *     if (!h) { fprintf(stderr, "%s\n", err); return 1; }
 *     weir_forward_set(h, "filter", "not port 22");
 *     weir_forward_on_verdict(h, my_verdict, &my_state);
 *     if (weir_forward_run(h) != 0) fprintf(stderr, "%s\n", weir_forward_error(h));
 *     weir_forward_stats_t st;
 *     weir_forward_stats(h, &st);
 *     weir_forward_destroy(h);
 *
 * Threading. weir_forward_run blocks until a limit ("count", "duration_ms")
 * is reached, weir_forward_stop is called (from any thread or a callback),
 * or a lane fails. The callback runs on the lane threads, one per direction
 * and RX queue, concurrently: it and what `user` points to must be safe to
 * use from several threads at once. Packets of one lane come in order.
 *
 * Counting: received = forwarded + filtered + dropped + tx_failed + in_flight;
 * kernel_drops are packets the kernel lost before weir received them.
 *
 * Errors: int functions return 0, or -1 with the text in weir_forward_error.
 * Needs root (CAP_NET_ADMIN, CAP_NET_RAW, CAP_BPF for afxdp).
 */
#ifndef WEIR_FORWARD_H
#define WEIR_FORWARD_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#ifndef WEIR_ERRBUF_SIZE
#define WEIR_ERRBUF_SIZE 256
#endif

#define WEIR_PASS 0
#define WEIR_DROP 1

typedef struct weir_forward weir_forward_t;

typedef struct weir_forward_stats {
	uint64_t received;
	uint64_t forwarded;
	uint64_t filtered;
	uint64_t dropped;
	uint64_t tx_failed;
	uint64_t in_flight;
	uint64_t kernel_drops;
} weir_forward_stats_t;

/* The verdict on one packet: its `caplen` bytes at `data` (valid during the
 * call only, not to be written), its length on the wire, its timestamp in ns,
 * the lane's direction (0: IN to OUT, 1: OUT to IN) and RX queue. */
typedef int (*weir_verdict_cb)(const uint8_t *data, uint32_t caplen, uint32_t wire_len, uint64_t ts_ns,
			       int direction, int queue, void *user);

weir_forward_t *weir_forward_create(const char *in, const char *out, char *errbuf);

/* Options, by name, as text: "backend" ("afxdp", the default, "afpacket", or
 * "xdp": forwarded inside the kernel by weir's XDP program, no packet reaches
 * the process, so no verdict callback: a run with one is refused),
 * "filter" (an expression; "" for none), "netns" (a name from `ip netns` or a
 * path), "bidirectional" ("0"/"1"), "count" (packets received, all lanes),
 * "duration_ms", "frames" (afxdp UMEM frames per lane, a power of two),
 * "promisc" ("0"/"1", default 1), "take_host_traffic" ("0"/"1", default 0:
 * afxdp refuses an interface with an IP address, since what it takes never
 * reaches the host). Not while a run holds the handle. */
int weir_forward_set(weir_forward_t *h, const char *key, const char *value);

/* NULL passes every packet the filter passed. */
int weir_forward_on_verdict(weir_forward_t *h, weir_verdict_cb cb, void *user);

int weir_forward_run(weir_forward_t *h);
int weir_forward_stop(weir_forward_t *h);
/* The run's counters, summed over its lanes (live while it runs). */
int weir_forward_stats(weir_forward_t *h, weir_forward_stats_t *out);
const char *weir_forward_error(weir_forward_t *h);
void weir_forward_destroy(weir_forward_t *h);

#ifdef __cplusplus
}
#endif

#endif
