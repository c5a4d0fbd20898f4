/*
 * packet_count: weir's packets from C (weir_packet.h), counted per queue.
 *
 *     packet_count [--pull] SOURCE [FILTER]
 *
 * Opens SOURCE (a trace, `trace.pcap@0-1` for two queues, `afpacket:eth1@0-3`...)
 * with the libpcap FILTER if one is given, counts the packets and their
 * captured bytes of each queue, and prints a line per queue and one of totals,
 * each with weir's counters for it:
 *
 *     queue index=0 queue=0 packets=1480 bytes=... received=1480 delivered=1480 filtered=0 ...
 *     queue index=1 queue=1 packets=1520 bytes=... received=1520 delivered=1520 filtered=0 ...
 *     total queues=2 packets=3000 bytes=... received=3000 delivered=3000 filtered=0 ...
 *
 * By default a callback counts, on each queue's worker thread (so the
 * counts need no lock: each queue's are touched by its own thread only).
 * With --pull, the program starts a thread of its own per queue, which pulls
 * that queue's packets with weir_packets_next. Either way it checks that each
 * packet came to the queue it says, and in time order within its queue (a
 * trace written in time order keeps it per queue): order_errors and
 * misplaced count what did not. Ctrl-C stops a live capture
 * (weir_packets_stop from the signal handler).
 *
 * Build: cc -std=c99 -Iinclude examples/packet_count.c -L$TARGET/debug -lweirstream -lpthread
 *   or, installed: cc -std=c99 packet_count.c $(pkg-config --cflags --libs weirpacket) -lpthread
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weir_packet.h"

/* One queue's counts, on a cache line of its own: the queues' threads write
 * theirs at the same time. */
struct queue_count {
    unsigned long long packets, bytes, wire_bytes, last_ts, order_errors, misplaced, failures;
    unsigned int queue; /* the queue's number, from its statistics */
};

struct counts {
    int queues;
    struct queue_count *q;
};

/* For a pulling thread: its queue, and where to count. */
struct puller {
    pthread_t thread;
    unsigned int index;
    struct queue_count *count;
};

static weir_packets_t *handle; /* for the signal handler and the pullers */

static void on_signal(int sig)
{
    (void)sig;
    weir_packets_stop(handle); /* sets a flag: async-signal-safe */
}

static void count(struct queue_count *c, const struct weir_packet *p, unsigned int index)
{
    if (p->queue_index != index || p->queue != c->queue)
        c->misplaced++;
    if (p->ts_ns < c->last_ts)
        c->order_errors++;
    c->last_ts = p->ts_ns;
    c->packets++;
    c->bytes += p->caplen;
    c->wire_bytes += p->wire_len;
}

/* The run's callback, on the worker of the packet's queue. */
static void on_packet(const struct weir_packet *p, void *user)
{
    struct counts *t = user;
    if ((int)p->queue_index >= t->queues)
        return; /* never: weir_packets_queues said how many */
    count(&t->q[p->queue_index], p, p->queue_index);
}

/* A pulling thread: its queue's packets until the end. */
static void *pull(void *arg)
{
    struct puller *me = arg;
    struct weir_packet p;
    for (;;) {
        int rc = weir_packets_next(handle, me->index, 100, &p);
        if (rc == 1)
            count(me->count, &p, me->index);
        else if (rc == WEIR_END)
            break;
        else if (rc < 0) {
            fprintf(stderr, "packet_count: queue index %u: %s\n", me->index, weir_packets_error(handle));
            me->count->failures++;
            break;
        }
        /* rc == 0: nothing within 100 ms; a live source may be quiet. */
    }
    return NULL;
}

static void print_stats(const weir_queue_stats_t *s)
{
    printf(" received=%llu delivered=%llu filtered=%llu capture_drops=%llu delivery_drops=%llu unread=%llu"
           " in_flight=%llu received_bytes=%llu delivered_bytes=%llu\n",
           (unsigned long long)s->received, (unsigned long long)s->delivered, (unsigned long long)s->filtered,
           (unsigned long long)s->capture_drops, (unsigned long long)s->delivery_drops,
           (unsigned long long)s->unread, (unsigned long long)s->in_flight,
           (unsigned long long)s->received_bytes, (unsigned long long)s->delivered_bytes);
}

/* Pulls with a thread per queue; 0, or -1 after printing why not. */
static int pull_all(struct counts *t)
{
    struct puller *pullers = calloc((size_t)t->queues, sizeof *pullers);
    int rc = 0, started = 0;
    if (!pullers) {
        fprintf(stderr, "packet_count: out of memory\n");
        return -1;
    }
    if (weir_packets_start(handle) != 0) {
        fprintf(stderr, "packet_count: %s\n", weir_packets_error(handle));
        free(pullers);
        return -1;
    }
    for (int i = 0; i < t->queues; i++) {
        pullers[i].index = (unsigned int)i;
        pullers[i].count = &t->q[i];
        if (pthread_create(&pullers[i].thread, NULL, pull, &pullers[i]) != 0) {
            fprintf(stderr, "packet_count: cannot start a thread for queue index %d\n", i);
            weir_packets_stop(handle);
            rc = -1;
            break;
        }
        started++;
    }
    for (int i = 0; i < started; i++)
        pthread_join(pullers[i].thread, NULL);
    /* Every puller is done with its packets: the pull may end. */
    if (weir_packets_finish(handle) != 0) {
        fprintf(stderr, "packet_count: %s\n", weir_packets_error(handle));
        rc = -1;
    }
    free(pullers);
    return rc;
}

int main(int argc, char **argv)
{
    char err[WEIR_ERRBUF_SIZE];
    struct counts t;
    weir_queue_stats_t st;
    int pulling = 0, arg = 1, rc;

    if (argc > 1 && strcmp(argv[1], "--pull") == 0) {
        pulling = 1;
        arg++;
    }
    if (argc - arg < 1 || argc - arg > 2) {
        fprintf(stderr, "usage: %s [--pull] SOURCE [FILTER]\n", argv[0]);
        return 2;
    }
    handle = weir_packets_create(argv[arg], err);
    if (!handle) {
        fprintf(stderr, "packet_count: %s\n", err);
        return 1;
    }
    /* Options first; then open, to learn the number of queues. */
    if ((argc - arg == 2 && weir_packets_set(handle, "filter", argv[arg + 1]) != 0) || weir_packets_open(handle) != 0) {
        fprintf(stderr, "packet_count: %s\n", weir_packets_error(handle));
        weir_packets_destroy(handle);
        return 1;
    }
    t.queues = weir_packets_queues(handle);
    t.q = calloc((size_t)t.queues, sizeof *t.q);
    if (!t.q) {
        fprintf(stderr, "packet_count: out of memory\n");
        weir_packets_destroy(handle);
        return 1;
    }
    for (int i = 0; i < t.queues; i++) {
        if (weir_packets_stats(handle, i, &st) != 0) {
            fprintf(stderr, "packet_count: %s\n", weir_packets_error(handle));
            weir_packets_destroy(handle);
            free(t.q);
            return 1;
        }
        t.q[i].queue = st.queue;
    }
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);

    if (pulling) {
        rc = pull_all(&t);
    } else {
        rc = weir_packets_on_packet(handle, on_packet, &t);
        if (rc == 0)
            rc = weir_packets_run(handle);
        if (rc != 0)
            fprintf(stderr, "packet_count: %s\n", weir_packets_error(handle));
    }

    struct queue_count sum;
    memset(&sum, 0, sizeof sum);
    for (int i = 0; i < t.queues; i++) {
        struct queue_count *c = &t.q[i];
        if (weir_packets_stats(handle, i, &st) != 0) {
            fprintf(stderr, "packet_count: %s\n", weir_packets_error(handle));
            rc = -1;
            break;
        }
        printf("queue index=%d queue=%u packets=%llu bytes=%llu wire_bytes=%llu order_errors=%llu misplaced=%llu", i,
               (unsigned)st.queue, c->packets, c->bytes, c->wire_bytes, c->order_errors, c->misplaced);
        print_stats(&st);
        sum.packets += c->packets;
        sum.bytes += c->bytes;
        sum.wire_bytes += c->wire_bytes;
        sum.order_errors += c->order_errors;
        sum.misplaced += c->misplaced;
        sum.failures += c->failures;
    }
    if (weir_packets_stats(handle, WEIR_ALL_QUEUES, &st) != 0) {
        fprintf(stderr, "packet_count: %s\n", weir_packets_error(handle));
        rc = -1;
    } else {
        printf("total queues=%d linktype=%d packets=%llu bytes=%llu wire_bytes=%llu order_errors=%llu misplaced=%llu"
               " failures=%llu",
               t.queues, weir_packets_linktype(handle), sum.packets, sum.bytes, sum.wire_bytes, sum.order_errors,
               sum.misplaced, sum.failures);
        print_stats(&st);
    }
    weir_packets_destroy(handle);
    free(t.q);
    return rc == 0 ? 0 : 1;
}
