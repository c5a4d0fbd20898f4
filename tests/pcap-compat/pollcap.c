/*
 * A poll loop as event-driven monitors write one: a nonblocking pcap handle,
 * its selectable descriptor in poll(2) with pcap_get_required_select_timeout
 * as the longest sleep, pcap_dispatch on every wake-up. Runs for SECONDS and
 * prints what it counted:
 *
 *   packets=N wakeups=W empty=E timeouts=T
 *
 * "empty" wake-ups are those where the descriptor said readable and nothing
 * was read: a descriptor that is always readable makes this loop spin, and
 * E then counts in the millions.
 *
 *   pollcap IFACE SECONDS
 */
#include <pcap/pcap.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/time.h>
#include <time.h>

static void count(u_char *user, const struct pcap_pkthdr *h, const u_char *bytes)
{
    (void)h;
    (void)bytes;
    ++*(unsigned long *)user;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    char err[PCAP_ERRBUF_SIZE];
    if (argc != 3) {
        fprintf(stderr, "usage: pollcap IFACE SECONDS\n");
        return 2;
    }
    pcap_t *p = pcap_create(argv[1], err);
    if (p == NULL || pcap_set_snaplen(p, 262144) != 0 || pcap_set_timeout(p, 1000) != 0 || pcap_activate(p) < 0) {
        fprintf(stderr, "pollcap: %s: %s\n", argv[1], p ? pcap_geterr(p) : err);
        return 1;
    }
    if (pcap_setnonblock(p, 1, err) != 0) {
        fprintf(stderr, "pollcap: setnonblock: %s\n", err);
        return 1;
    }
    int fd = pcap_get_selectable_fd(p);
    if (fd < 0) {
        fprintf(stderr, "pollcap: no selectable descriptor: %s\n", pcap_geterr(p));
        return 1;
    }
    const struct timeval *need = pcap_get_required_select_timeout(p);
    int wait_ms = need ? (int)(need->tv_sec * 1000 + need->tv_usec / 1000) : 1000;
    if (wait_ms < 1)
        wait_ms = 1;
    fprintf(stderr, "pollcap: listening on %s, poll timeout %d ms\n", argv[1], wait_ms);

    unsigned long packets = 0, wakeups = 0, empty = 0, timeouts = 0;
    double end = now() + atof(argv[2]);
    while (now() < end) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int r = poll(&pfd, 1, wait_ms);
        if (r < 0) {
            perror("pollcap: poll");
            return 1;
        }
        if (r == 0)
            ++timeouts;
        else
            ++wakeups;
        /* After a timeout too: a locality batch is handed out by a call. */
        int n = pcap_dispatch(p, -1, count, (u_char *)&packets);
        if (n < 0) {
            fprintf(stderr, "pollcap: dispatch: %s\n", pcap_geterr(p));
            return 1;
        }
        if (r > 0 && n == 0)
            ++empty;
    }
    printf("packets=%lu wakeups=%lu empty=%lu timeouts=%lu\n", packets, wakeups, empty, timeouts);
    pcap_close(p);
    return 0;
}
