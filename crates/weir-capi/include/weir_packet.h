/*
 * weir_packet.h: packets from weir's capture engine, every queue of a source
 * at once (libweirstream.so, beside weir_stream.h and weir_forward.h).
 *
 * A source such as `trace.pcap@0-1` or `afpacket:eth1@0-3` has several
 * queues; weir captures each on its own. A program takes their packets in
 * one of two ways:
 *
 * - callbacks: weir_packets_on_packet, then weir_packets_run, which calls
 *   the callback on each queue's worker thread, queues concurrently;
 * - pulls: weir_packets_start, then one thread of the program's per queue
 *   calling weir_packets_next for that queue, then weir_packets_finish.
 *
 *     char err[WEIR_ERRBUF_SIZE];
 *     weir_packets_t *h = weir_packets_create("trace.pcap@0-1", err);
 *     if (!h) { fprintf(stderr, "%s\n", err); return 1; }
 *     weir_packets_set(h, "filter", "tcp port 80");
 *     weir_packets_on_packet(h, my_packet, &my_state);
 *     if (weir_packets_run(h) != 0) fprintf(stderr, "%s\n", weir_packets_error(h));
 *     weir_queue_stats_t st;
 *     weir_packets_stats(h, WEIR_ALL_QUEUES, &st);
 *     weir_packets_destroy(h);
 *
 * Queues. Functions name a queue by its index, 0 to weir_packets_queues(h) - 1,
 * in the source's order; a packet and a queue's statistics also carry the
 * queue's own number (2 for `eth1@2`).
 *
 * Counting, per queue: received = delivered + filtered + capture_drops +
 * delivery_drops + unread + in_flight, at every read. A trace read at top
 * speed drops nothing: weir waits for the program instead.
 *
 * Errors. int functions return -1 on failure (weir_packets_next has more
 * answers), and weir_packets_error then gives the failure's text. No function
 * lets a Rust panic cross into C: a panic becomes -1 and its text.
 *
 * Threading. Every function but weir_packets_destroy may be called from any
 * thread, at the same time as others: weir_packets_next (one thread per
 * queue), weir_packets_stats and weir_packets_stop are made for that, from
 * callbacks too. Those that set the handle up (set, on_packet, open, run,
 * start) refuse with -1 and a text while a run or a pull holds it, as each
 * says. Functions that wait say on what; the others return at once.
 */
#ifndef WEIR_PACKET_H
#define WEIR_PACKET_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Size of the error buffer weir_packets_create writes into. */
#ifndef WEIR_ERRBUF_SIZE
#define WEIR_ERRBUF_SIZE 256
#endif

/* weir_packets_next: the queue has ended; every packet of it was handed out. */
#define WEIR_END (-2)

/* weir_packets_stats: the total of every queue. */
#define WEIR_ALL_QUEUES (-1)

/* A source and its engine options. Opaque. */
typedef struct weir_packets weir_packets_t;

/* One packet. In a callback it is valid during the call; from
 * weir_packets_next, until the next call for the same queue (see there).
 * Copy what must outlive that. Never write through `data`. */
struct weir_packet {
    const uint8_t *data;  /* the captured bytes, `caplen` of them, starting with the
                             link-layer header (weir_packets_linktype) */
    uint64_t ts_ns;       /* capture time, ns since the Unix epoch */
    uint32_t caplen;      /* bytes at `data` */
    uint32_t wire_len;    /* length on the wire (caplen or more) */
    uint32_t queue;       /* the queue's number in the source (2 for `eth1@2`) */
    uint32_t queue_index; /* the queue's index, 0 .. weir_packets_queues(h) - 1 */
};

/* One queue's counters (weir_packets_stats), in packets unless named bytes. */
typedef struct weir_queue_stats {
    uint32_t queue;           /* the queue's number; UINT32_MAX in a total */
    uint32_t queue_index;     /* its index; UINT32_MAX in a total */
    uint64_t received;        /* seen by the source on this queue */
    uint64_t delivered;       /* handed to the program (a callback made, a pulled packet let go) */
    uint64_t filtered;        /* rejected by the filter (afpacket filters in the kernel:
                                 what it rejects is never received) */
    uint64_t capture_drops;   /* lost for want of a free cell in the queue's pool */
    uint64_t delivery_drops;  /* lost in the kernel's ring before weir read them */
    uint64_t unread;          /* captured, never handed out: a pull finished early */
    uint64_t in_flight;       /* captured, not yet delivered; 0 once it has ended */
    uint64_t received_bytes;  /* wire bytes of the received packets */
    uint64_t delivered_bytes; /* wire bytes of the delivered packets */
    uint64_t offloaded;       /* handed to another queue's worker (not done here: 0) */
    uint64_t bad_recycles;    /* internal check: 0 */
} weir_queue_stats_t;

/* A run's callback: one packet, on its queue's worker thread (see
 * weir_packets_run); `user` is the pointer given with the callback. */
typedef void (*weir_packet_cb)(const struct weir_packet *p, void *user);

/* --- The handle ------------------------------------------------------------ */

/* A handle on `source`, named as `weir count` takes it: `trace.pcap`,
 * `trace.pcap@0-1` (the trace split over two queues by flow), `file:PATH`,
 * `-` (standard input), `afpacket:eth1`, `afpacket:eth1@0-3`, `afxdp:eth1@0-3`.
 * The name is checked here (a trace of that name must exist); the source is
 * opened by weir_packets_open, weir_packets_run or weir_packets_start. On
 * failure returns NULL and writes the reason, NUL-terminated, into `errbuf`
 * (WEIR_ERRBUF_SIZE bytes; may be NULL). */
weir_packets_t *weir_packets_create(const char *source, char *errbuf);

/* Frees the handle (NULL is ignored), finishing a pull first (as
 * weir_packets_finish). A handle whose weir_packets_run still runs is only
 * asked to stop, and is not freed: destroy it after the run returned. Call it
 * once no other thread uses the handle (the pulling threads joined); after
 * it, no pointer the handle gave (packets, error texts) is valid. */
void weir_packets_destroy(weir_packets_t *h);

/* The text of the handle's latest failure, from any thread ("" if none).
 * The text stays valid until weir_packets_destroy. */
const char *weir_packets_error(weir_packets_t *h);

/* One engine option, by name, as text; taken when the source opens, so set
 * them before (-1 once it is open or running):
 *   "filter"       a libpcap filter expression, compiled when the source opens,
 *                  for its link type, as weir compiles it ("" for none);
 *                  packets it rejects count as filtered
 *   "snaplen"      bytes kept of each packet, 1 to 262144 (live sources; a
 *                  trace keeps what it holds)
 *   "promisc"      "1" (the default) or "0": promiscuous mode (live sources)
 *   "netns"        open the interface in this network namespace (a name from
 *                  `ip netns`, or a path)
 *   "pool"         "M,R": each queue's pool, R chunks of M packets (default
 *                  "256,128"); more holds more packets while the program is busy
 *   "count"        stop after this many packets passed the filter, all queues
 *                  together ("0": no limit)
 *   "duration_ms"  stop this long after the start ("0": no limit)
 */
int weir_packets_set(weir_packets_t *h, const char *key, const char *value);

/* Opens the source with the options set: a file or interface that does not
 * open, or a filter that does not compile, fails here with its text. After
 * it, weir_packets_queues and weir_packets_linktype answer. Optional: run and
 * start open the source themselves when it is not open. Blocks while the
 * source opens (a trace on a pipe: until its header comes). */
int weir_packets_open(weir_packets_t *h);

/* The number of queues of the source, once opened (-1 before). It stays
 * that of the last open: a handle keeps its number of queues (an interface
 * opened later with another number fails to open: create a new handle). */
int weir_packets_queues(weir_packets_t *h);

/* The source's link type, once opened (-1 before): a LINKTYPE_ number of
 * tcpdump.org's list (1: Ethernet). */
int weir_packets_linktype(weir_packets_t *h);

/* --- Callbacks --------------------------------------------------------------- */

/* The callback weir_packets_run calls with every packet (NULL removes it),
 * and the pointer handed to it with each (weir never reads it). Not while a
 * run holds the handle. */
int weir_packets_on_packet(weir_packets_t *h, weir_packet_cb cb, void *user);

/* Opens the source if it is not open, and runs it to its end (the end of a
 * trace, a limit, weir_packets_stop, a failure), calling the callback with
 * every packet that passed the filter; returns when every queue's packets
 * have been handed over. Blocks the calling thread throughout.
 *
 * The callback does NOT run on the calling thread: it runs on the engine's
 * worker threads, one per queue. The packets of one queue come from that
 * queue's thread, in capture order, one call at a time; callbacks of
 * different queues run at the same time. So the callback, and what `user`
 * points to, must be safe to use from several threads at once (state kept
 * per queue, indexed by p->queue_index, needs no lock). A slow callback holds
 * its queue's packets back, and they wait in the queue's pool: a live source
 * drops what finds the pool full (capture_drops). A callback may call
 * weir_packets_stop and weir_packets_stats; it must not call weir_packets_run,
 * _start, _finish or _destroy on its handle.
 *
 * Returns 0, or -1 if the source did not open or the run failed (a damaged
 * trace: the packets before the damage were delivered); the statistics are
 * kept either way. The source is opened anew by each run (a trace is read
 * again). Options may change between runs. */
int weir_packets_run(weir_packets_t *h);

/* --- Pulls ------------------------------------------------------------------- */

/* Opens the source if it is not open (blocking as weir_packets_open does),
 * starts capture, and returns: each queue's packets are then held for
 * weir_packets_next until weir_packets_finish. Every queue must be pulled: a queue nobody pulls
 * fills its pool, and then its capture waits (a trace, whose one capture
 * thread feeds every queue, stops for all of them) or drops. */
int weir_packets_start(weir_packets_t *h);

/* The next packet of queue `queue_index`, written into `*out`. Returns 1 (a
 * packet), 0 (none within the timeout), WEIR_END (the queue has ended: the
 * end of a trace, a limit, a stop or a failure, and every packet of it was
 * handed out; every later call says so too, also after weir_packets_finish),
 * or -1 (an error: no pull started, an index out of range, another thread
 * pulling the same queue).
 *
 * Blocks on this queue alone: up to `timeout_ms` milliseconds for a packet
 * of it (0: never waits; negative: until a packet or the end). The index-0
 * queue's WEIR_END also waits for every capture thread to end.
 *
 * Threads: one thread per queue, or any thread at a time per queue; calls
 * for different queues never wait for each other, and a second call for a
 * queue while one runs fails (-1) rather than wait.
 *
 * Lifetime: out->data points into weir's memory, not a copy. It stays valid
 * until the next weir_packets_next for the same queue, or weir_packets_finish,
 * whichever comes first. A queue's memory is reused only once its packets are
 * let go: holding one long holds back its queue (see weir_packets_start). */
int weir_packets_next(weir_packets_t *h, unsigned int queue_index, int timeout_ms, struct weir_packet *out);

/* Ends a pull: stops capture if it still runs, counts the packets captured
 * and not pulled as unread, keeps the final statistics, and returns 0, or -1
 * with the text of a failure of the capture (a damaged trace). Blocks until
 * capture has ended (a live source's within about 50 ms of the stop) and
 * until any weir_packets_next in progress returns. Call it once the threads
 * calling weir_packets_next are done with their packets: after it, no packet
 * pointer is valid. */
int weir_packets_finish(weir_packets_t *h);

/* --- Both ------------------------------------------------------------------- */

/* Asks the run or the pull to stop: capture ends, and what was captured before
 * is still handed out (a run returns, each queue's pull reaches WEIR_END).
 * Only sets a flag, which weir looks at every 20 ms: it may be called from
 * any thread, from a callback, or from a signal handler (async-signal-safe).
 * A stop asked for before a run or pull starts ends it at once; the flag is
 * cleared when a run or a pull ends (weir_packets_run returns, or
 * weir_packets_finish ends the pull). */
void weir_packets_stop(weir_packets_t *h);

/* Queue `queue_index`'s counters now, or with WEIR_ALL_QUEUES the total of
 * every queue, into `*out`. While a run or a pull goes on, they are read as
 * the engine publishes them (each queue's consistent with itself); after, they
 * are the final ones; after weir_packets_open, zero. -1 before the source was
 * first opened, or for an index out of range. Any thread, callbacks included;
 * it does not wait for capture or for the workers. */
int weir_packets_stats(weir_packets_t *h, int queue_index, weir_queue_stats_t *out);

#ifdef __cplusplus
}
#endif

#endif /* WEIR_PACKET_H */
