/*
 * stream_dump: the stream layer of weir from C (weir_stream.h).
 *
 *     stream_dump SOURCE CUTOFF
 *
 * Reassembles every stream of SOURCE (a trace, `trace.pcap@0-1`, or
 * `afpacket:eth0`...) with a cutoff of CUTOFF bytes per stream (-1: none),
 * discards the SSH streams (port 22, both directions) as they are created,
 * counts streams and delivered bytes per close reason, and prints one line:
 *
 *     streams=6 delivered=3900 sum=... discarded=6000 ssh_streams=2 ssh_discarded=1200 fin=4 fin_bytes=2400 ...
 *
 * followed by the layer's own totals (stats_*) and self-checks: pieces out of
 * order (order_errors), streams whose data did not add up to their record's
 * delivered count (mismatches), and data past a stream's cutoff
 * (cutoff_violations). Ctrl-C stops a live capture (weir_streams_stop from the
 * signal handler).
 *
 * Build: cc -std=c99 -Iinclude examples/stream_dump.c -L$TARGET/debug -lweirstream -lpthread
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weir_stream.h"

/* Per stream, in its user slot. Touched only on its queue's worker. */
struct stream_state {
    unsigned long long next_offset; /* where the next piece must start */
    unsigned long long bytes;       /* data bytes seen */
    unsigned long long sum;         /* sum of those bytes */
    int ssh;
};

/* Totals: callbacks of different queues run at once, hence the lock. */
struct totals {
    pthread_mutex_t lock;
    long long cutoff;
    unsigned long long streams, delivered, sum, discarded, ssh_streams, ssh_discarded;
    unsigned long long closed[WEIR_CLOSE_REASONS], closed_bytes[WEIR_CLOSE_REASONS];
    unsigned long long order_errors, mismatches, cutoff_violations, failures;
};

static const char *reason_names[WEIR_CLOSE_REASONS] = {"open", "fin", "rst", "idle", "evicted", "end", "reused"};

static weir_streams_t *handle; /* for the signal handler */

static void on_signal(int sig)
{
    (void)sig;
    weir_streams_stop(handle); /* sets a flag: async-signal-safe */
}

static void created(weir_stream_t *s, void *user)
{
    struct totals *t = user;
    weir_stream_info_t info;
    struct stream_state *st = calloc(1, sizeof *st);
    if (!st || weir_stream_info(s, &info) != 0 || weir_stream_set_user(s, st) != 0) {
        pthread_mutex_lock(&t->lock);
        t->failures++;
        pthread_mutex_unlock(&t->lock);
        free(st);
        return;
    }
    if (info.protocol == 6 && (info.sport == 22 || info.dport == 22)) {
        st->ssh = 1;
        if (weir_stream_discard(s) != 0) {
            pthread_mutex_lock(&t->lock);
            t->failures++;
            pthread_mutex_unlock(&t->lock);
        }
    }
}

static void data(weir_stream_t *s, const uint8_t *bytes, size_t len, unsigned long long offset, void *user)
{
    struct stream_state *st = weir_stream_get_user(s);
    (void)user;
    if (!st)
        return;
    if (offset != st->next_offset)
        st->next_offset = ~0ULL; /* reported at close */
    else
        st->next_offset = offset + len;
    for (size_t i = 0; i < len; i++)
        st->sum += bytes[i];
    st->bytes += len;
}

static void closed(weir_stream_t *s, void *user)
{
    struct totals *t = user;
    struct stream_state *st = weir_stream_get_user(s);
    weir_stream_info_t info;
    int ok = weir_stream_info(s, &info) == 0;
    /* The closed callback may read a stream, not steer it. */
    int steer_refused = weir_stream_discard(s) == -1;
    pthread_mutex_lock(&t->lock);
    if (!st || !ok || !steer_refused) {
        t->failures++;
    } else {
        int r = info.close_reason >= 0 && info.close_reason < WEIR_CLOSE_REASONS ? info.close_reason : 0;
        t->streams++;
        t->delivered += st->bytes;
        t->sum += st->sum;
        t->discarded += info.discarded;
        t->closed[r]++;
        t->closed_bytes[r] += st->bytes;
        if (st->ssh) {
            t->ssh_streams++;
            t->ssh_discarded += info.discarded;
        }
        if (st->next_offset == ~0ULL)
            t->order_errors++;
        if (st->bytes != info.delivered)
            t->mismatches++;
        if (t->cutoff >= 0 && st->bytes > (unsigned long long)t->cutoff)
            t->cutoff_violations++;
    }
    pthread_mutex_unlock(&t->lock);
    free(st);
}

int main(int argc, char **argv)
{
    char err[WEIR_ERRBUF_SIZE];
    struct totals t;
    weir_stream_stats_t stats;

    if (argc != 3) {
        fprintf(stderr, "usage: %s SOURCE CUTOFF   (CUTOFF in bytes, -1: none)\n", argv[0]);
        return 2;
    }
    memset(&t, 0, sizeof t);
    pthread_mutex_init(&t.lock, NULL);
    t.cutoff = strtoll(argv[2], NULL, 10);

    handle = weir_streams_create(argv[1], err);
    if (!handle) {
        fprintf(stderr, "stream_dump: %s\n", err);
        return 1;
    }
    if (weir_streams_set_cutoff(handle, t.cutoff) != 0 || weir_streams_set_mode(handle, WEIR_MODE_TCP_FAST) != 0 ||
        weir_streams_on_created(handle, created, &t) != 0 || weir_streams_on_data(handle, data, &t) != 0 ||
        weir_streams_on_closed(handle, closed, &t) != 0) {
        fprintf(stderr, "stream_dump: %s\n", weir_streams_error(handle));
        weir_streams_destroy(handle);
        return 1;
    }
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);

    int rc = weir_streams_run(handle);
    if (rc != 0)
        fprintf(stderr, "stream_dump: %s\n", weir_streams_error(handle));
    weir_streams_stats(handle, &stats);

    printf("streams=%llu delivered=%llu sum=%llu discarded=%llu ssh_streams=%llu ssh_discarded=%llu", t.streams,
           t.delivered, t.sum, t.discarded, t.ssh_streams, t.ssh_discarded);
    for (int r = 1; r < WEIR_CLOSE_REASONS; r++)
        printf(" %s=%llu %s_bytes=%llu", reason_names[r], t.closed[r], reason_names[r], t.closed_bytes[r]);
    printf(" order_errors=%llu mismatches=%llu cutoff_violations=%llu failures=%llu", t.order_errors, t.mismatches,
           t.cutoff_violations, t.failures);
    printf(" stats_packets=%llu stats_streams=%llu stats_connections=%llu stats_delivered=%llu stats_discarded=%llu"
           " stats_closed_fin=%llu stats_closed_end=%llu\n",
           (unsigned long long)stats.packets, (unsigned long long)stats.streams,
           (unsigned long long)stats.connections, (unsigned long long)stats.delivered,
           (unsigned long long)stats.discarded, (unsigned long long)stats.closed_fin,
           (unsigned long long)stats.closed_end);

    weir_streams_destroy(handle);
    pthread_mutex_destroy(&t.lock);
    return rc == 0 ? 0 : 1;
}
