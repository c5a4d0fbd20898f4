/*
 * weir_stream.h: the C API of weir's stream layer (libweirstream.so).
 *
 * A Scap-like interface: open a source, set up the stream layer, register
 * callbacks, run. Each stream is one direction of a connection (TCP, UDP or
 * another IP protocol); TCP streams are reassembled, and the application
 * receives their bytes in stream order, in pieces.
 *
 *     char err[WEIR_ERRBUF_SIZE];
 *     weir_streams_t *h = weir_streams_create("trace.pcap", err);
 *     if (!h) { fprintf(stderr, "%s\n", err); return 1; }
 *     weir_streams_set_cutoff(h, 4096);
 *     weir_streams_on_data(h, my_data, &my_state);
 *     if (weir_streams_run(h) != 0) fprintf(stderr, "%s\n", weir_streams_error(h));
 *     weir_stream_stats_t st;
 *     weir_streams_stats(h, &st);
 *     weir_streams_destroy(h);
 *
 * Threading. weir_streams_run blocks the calling thread until the input ends
 * (or weir_streams_stop is called). The callbacks do NOT run on that thread:
 * they run on the engine's worker threads, one per queue of the source
 * (`trace.pcap@0-3` has four). A stream belongs to one queue, so all the
 * callbacks of one stream come from the same thread, in order (created, data...,
 * closed), never concurrently. Callbacks of streams of different queues run
 * concurrently: callbacks and the `user` pointers given with them must be
 * safe to use from several threads at once (per-queue state can be kept per
 * stream with weir_stream_set_user). A callback must not call
 * weir_streams_run or weir_streams_destroy on its handle.
 *
 * Errors. Functions returning int return 0 on success and -1 on failure; the
 * failure's text is then given by weir_streams_error (for weir_stream_*
 * functions the failure is a NULL argument or a call outside its callback,
 * and no text is kept). No function lets a Rust panic cross into C: a panic
 * becomes -1 (or, inside the engine, a run error).
 */
#ifndef WEIR_STREAM_H
#define WEIR_STREAM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Size of the error buffer weir_streams_create writes into. */
#define WEIR_ERRBUF_SIZE 256

/* Stream priorities under memory pressure: 0 (lowest, the default) to
 * WEIR_PRIORITIES - 1. */
#define WEIR_PRIORITIES 4

/* A class setting left as the engine's (weir_streams_add_class). */
#define WEIR_UNSET (-2)

/* Reassembly modes (weir_streams_set_mode). */
enum weir_mode {
    /* Streams are tracked (records, cutoff) but no payload is rebuilt: no
     * data callbacks. */
    WEIR_MODE_PACKETS = 0,
    /* TCP bytes in order as they come; out-of-order bytes are held up to a
     * limit, then the hole becomes a gap. Picks up streams midstream. The
     * default. */
    WEIR_MODE_TCP_FAST = 1,
    /* TCP bytes as the receiving TCP accepts them: nothing before the
     * handshake. */
    WEIR_MODE_TCP_STRICT = 2
};

/* Why a stream was closed (weir_stream_info_t.close_reason). */
enum weir_close_reason {
    WEIR_CLOSE_OPEN = 0,         /* not closed yet (created and data callbacks) */
    WEIR_CLOSE_FIN = 1,          /* its FIN was reached */
    WEIR_CLOSE_RST = 2,          /* a RST ended its connection */
    WEIR_CLOSE_IDLE = 3,         /* no packet for the idle timeout (packet time) */
    WEIR_CLOSE_EVICTED = 4,      /* the table was full and it was seen least recently */
    WEIR_CLOSE_END_OF_INPUT = 5, /* the input ended (or the run was stopped) */
    WEIR_CLOSE_REUSED = 6        /* a new SYN reused its addresses and ports */
};

/* Number of close reasons, WEIR_CLOSE_OPEN included (for arrays indexed by them). */
#define WEIR_CLOSE_REASONS 7

/* Which side of its connection a stream is (weir_stream_info_t.direction). */
enum weir_direction {
    WEIR_DIR_INITIATOR = 0, /* sent by the side that opened the connection */
    WEIR_DIR_RESPONDER = 1  /* sent by the other side */
};

/* A stream layer over one source. Opaque. */
typedef struct weir_streams weir_streams_t;

/* A stream, as a callback sees it. Opaque; valid only during the callback it
 * is given to. */
typedef struct weir_stream weir_stream_t;

/* The record of a stream (weir_stream_info). Byte counts are TCP or datagram
 * payload bytes. */
typedef struct weir_stream_info {
    int family;           /* 4 (IPv4: the first 4 bytes of src and dst) or 6 */
    uint8_t src[16];      /* sender's address, network order */
    uint8_t dst[16];      /* receiver's address, network order */
    uint16_t sport;       /* sender's port, host order (0 without ports) */
    uint16_t dport;       /* receiver's port, host order */
    uint8_t protocol;     /* IP protocol number (6 TCP, 17 UDP, ...) */
    int direction;        /* enum weir_direction */
    unsigned int queue;   /* queue whose worker runs the stream */
    uint64_t first_ns;    /* packet time of its first packet, ns since the epoch */
    uint64_t last_ns;     /* packet time of its latest packet */
    uint64_t packets;     /* packets seen */
    uint64_t bytes;       /* payload bytes captured */
    uint64_t delivered;   /* bytes handed to the application as data */
    uint64_t gap;         /* offsets never seen, reported as gaps */
    uint64_t duplicate;   /* bytes seen again (first copy wins) */
    uint64_t discarded;   /* bytes past the cutoff, or all of a stream in packets
                             mode: counted, never copied */
    uint64_t dropped;     /* bytes dropped for lack of memory */
    uint64_t refused;     /* bytes that were not stream data */
    int64_t cutoff;       /* its cutoff in bytes, -1: none */
    int priority;         /* 0 .. WEIR_PRIORITIES - 1 */
    int mode;             /* enum weir_mode */
    int close_reason;     /* enum weir_close_reason */
} weir_stream_info_t;

/* Totals of the stream layer over all queues (weir_streams_stats). */
typedef struct weir_stream_stats {
    uint64_t packets;           /* packets that reached the layer */
    uint64_t not_ip;            /* not IPv4 or IPv6 */
    uint64_t malformed;         /* IP with bad or cut headers */
    uint64_t fragments;         /* IP fragments not themselves completing a datagram */
    uint64_t untracked;         /* TCP packets without SYN or payload for no open stream */
    uint64_t to_stream;         /* packets taken by their stream */
    uint64_t discarded_packets; /* packets whose every payload byte was past the cutoff */
    uint64_t dropped_packets;   /* packets with bytes dropped for memory */
    uint64_t streams;           /* streams created (each direction counts) */
    uint64_t connections;       /* connections created */
    uint64_t closed_fin;        /* streams closed, by reason */
    uint64_t closed_rst;
    uint64_t closed_idle;
    uint64_t evicted;
    uint64_t closed_end;
    uint64_t closed_reused;
    uint64_t bytes;             /* payload bytes captured */
    uint64_t delivered;         /* bytes delivered as data */
    uint64_t gap;               /* offsets reported as gaps */
    uint64_t duplicate;         /* duplicate bytes */
    uint64_t discarded;         /* bytes past the cutoff or in packets mode */
    uint64_t dropped;           /* bytes dropped for memory */
    uint64_t refused;           /* bytes that were not stream data */
    uint64_t pieces;            /* data callbacks made */
    uint64_t memory_peak;       /* most reassembly memory in use (queues added) */
} weir_stream_stats_t;

/* Callbacks; `user` is the pointer given when the callback was set. */
typedef void (*weir_created_cb)(weir_stream_t *s, void *user);
/* A piece of the stream's data at stream offset `offset` (0 is the first byte
 * after the SYN), in stream order. `data` is valid during the call only. With
 * a piece overlap set, the first `overlap` bytes repeat the previous piece's
 * end. */
typedef void (*weir_data_cb)(weir_stream_t *s, const uint8_t *data, size_t len, unsigned long long offset,
                             void *user);
/* The stream is closed (its info says why); nothing follows. The per-stream
 * user slot is read here for the last time. */
typedef void (*weir_closed_cb)(weir_stream_t *s, void *user);

/* --- The stream layer ------------------------------------------------------ */

/* A stream layer over `source`, named as `weir count` takes it: `trace.pcap`,
 * `trace.pcap@0-1` (the trace split over two queues), `file:PATH`, `-`,
 * `afpacket:eth0`, `afxdp:eth1@0-3`. The name is checked here (a file or an
 * interface of that name must exist); the source is opened, and its contents
 * first read, by weir_streams_run. On failure returns NULL and writes the reason,
 * NUL-terminated, into `errbuf` (WEIR_ERRBUF_SIZE bytes; may be NULL). */
weir_streams_t *weir_streams_create(const char *source, char *errbuf);

/* Frees the handle (NULL is ignored). Call it after weir_streams_run has
 * returned: a handle still running is only asked to stop, and is not freed. */
void weir_streams_destroy(weir_streams_t *h);

/* The text of the handle's latest failure ("" if none). Valid until the
 * next failing call on the handle or weir_streams_destroy. */
const char *weir_streams_error(weir_streams_t *h);

/* Settings, taken by the next weir_streams_run. Values are checked against
 * each other when the run starts; a value wrong in itself fails here. While a
 * run is on, settings and callbacks cannot change (-1). */

/* Reassembly mode, enum weir_mode (default WEIR_MODE_TCP_FAST). */
int weir_streams_set_mode(weir_streams_t *h, int mode);
/* Bytes of each stream delivered before the rest is discarded (counted, not
 * copied); 0: statistics only; -1: no cutoff (the default). */
int weir_streams_set_cutoff(weir_streams_t *h, long long bytes);
/* A class of streams, selected by a libpcap filter expression on a stream's
 * first packet, with its own cutoff (-1: none). Classes are tried in the
 * order added; the first match wins. The expression is compiled at the run. */
int weir_streams_add_cutoff_class(weir_streams_t *h, const char *filter_expression, long long bytes);
/* A class with any of its own cutoff, mode and priority: each argument given
 * as WEIR_UNSET leaves that setting as for the streams of no class (the
 * engine's cutoff and mode, priority 0). `cutoff`: bytes, -1 (none) or
 * WEIR_UNSET; `mode`: enum weir_mode or WEIR_UNSET; `priority`: 0 ..
 * WEIR_PRIORITIES - 1 or WEIR_UNSET. A class in WEIR_MODE_PACKETS gets no
 * data callbacks for its streams; under memory pressure, streams of lower
 * priority lose held bytes first. weir_streams_add_cutoff_class(h, e, n) is
 * weir_streams_add_class(h, e, n, WEIR_UNSET, WEIR_UNSET). For example, UDP
 * tracked only, and HTTP kept whole and last to lose data:
 *
 *     weir_streams_add_class(h, "udp", WEIR_UNSET, WEIR_MODE_PACKETS, WEIR_UNSET);
 *     weir_streams_add_class(h, "tcp port 80", -1, WEIR_UNSET, WEIR_PRIORITIES - 1);
 */
int weir_streams_add_class(weir_streams_t *h, const char *filter_expression, long long cutoff, int mode,
                           int priority);
/* Bytes per data callback (1 to 16 MiB; default 16384) and bytes of the
 * previous piece repeated at the start of the next (less than `bytes`;
 * default 0). */
int weir_streams_set_piece(weir_streams_t *h, size_t bytes, size_t overlap);
/* A partial piece whose oldest byte waited this long (packet time) is
 * delivered at the next packet of its queue, or, when no packet comes, by
 * the idle worker: packet time then moves on with the wall clock, and the
 * piece comes within about 0.1 s of the timeout. 0: only when full or at
 * the end (the default). */
int weir_streams_set_flush_timeout_ms(weir_streams_t *h, unsigned long long ms);
/* A stream without a packet for this long (packet time, moving on with the
 * wall clock while no packet comes, as for the flush timeout) is closed;
 * more than 0 (default 300000). */
int weir_streams_set_idle_timeout_ms(weir_streams_t *h, unsigned long long ms);
/* Most connections tracked at once, all queues together (default 1000000);
 * the least recently seen is evicted past it. */
int weir_streams_set_max_streams(weir_streams_t *h, size_t connections);
/* Reassembly memory in bytes, all queues together (default 1 GiB). */
int weir_streams_set_memory(weir_streams_t *h, unsigned long long bytes);
/* The engine's filter (libpcap syntax): packets it rejects never reach the
 * stream layer. NULL or "" removes it. Compiled when the run opens the source. */
int weir_streams_set_filter(weir_streams_t *h, const char *expr);

/* Callbacks (NULL removes one). See the threading note above. */
int weir_streams_on_created(weir_streams_t *h, weir_created_cb cb, void *user);
int weir_streams_on_data(weir_streams_t *h, weir_data_cb cb, void *user);
int weir_streams_on_closed(weir_streams_t *h, weir_closed_cb cb, void *user);

/* Opens the source and runs the stream layer to the end of the input (or
 * weir_streams_stop), calling the callbacks on the workers; returns when the
 * last stream is closed. -1 if the run could not start (the source does not
 * open, a setting is refused) or went wrong (a malformed trace: what came
 * before the damage was delivered); the statistics are kept either way. One
 * run at a time per handle; a handle may run again (a trace is read anew). */
int weir_streams_run(weir_streams_t *h);

/* Asks the run to stop: the streams still open are closed (end of input) and
 * weir_streams_run returns. Only sets a flag, so it may be called from any
 * thread, from a callback, or from a signal handler (async-signal-safe). A stop
 * asked for before a run ends that run at once; the flag is cleared when the
 * run returns. */
void weir_streams_stop(weir_streams_t *h);

/* The totals of the latest run (all queues), zero before one. */
int weir_streams_stats(weir_streams_t *h, weir_stream_stats_t *out);

/* --- A stream, from inside a callback ------------------------------------- */
/* A weir_stream_t * is valid during the callback it was given to, on that
 * callback's thread. Kept past it (called from another callback's thread, or
 * after weir_streams_run returned), every function below answers -1 (get_user:
 * NULL); it never reads a stream that is gone. */

/* Its record now. */
int weir_stream_info(weir_stream_t *s, weir_stream_info_t *out);
/* Sets its cutoff (-1: none); applied when the callback returns: bytes
 * already delivered stay delivered. Not from the closed callback. */
int weir_stream_set_cutoff(weir_stream_t *s, long long bytes);
/* Discards the rest of the stream (a cutoff of 0 from now on: its bytes are
 * counted as discarded, no more data callbacks). Not from the closed callback. */
int weir_stream_discard(weir_stream_t *s);
/* Sets its priority under memory pressure (0 .. WEIR_PRIORITIES - 1; higher
 * values are taken as the highest). Not from the closed callback. */
int weir_stream_set_priority(weir_stream_t *s, int priority);
/* The per-stream user slot: NULL when the stream is created, kept until it
 * is closed (read it in the closed callback to free what it points to). */
int weir_stream_set_user(weir_stream_t *s, void *user);
void *weir_stream_get_user(weir_stream_t *s);

#ifdef __cplusplus
}
#endif

#endif /* WEIR_STREAM_H */
