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
 * With "blocking", the handle is left blocking with no timeout, as softflowd
 * opens it (pcap_open_live with to_ms 0), and each pcap_dispatch follows a
 * readable poll: libpcap promises such a read does not wait, so the longest
 * one is printed too (longest=MS), and if the loop is stuck in a read when
 * SECONDS+5 have passed it prints "stuck in pcap_dispatch" and exits 3.
 *
 *   pollcap IFACE SECONDS [blocking]
 */
#include <pcap/pcap.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static void count(u_char *user, const struct pcap_pkthdr *h, const u_char *bytes)
{
    (void)h;
    (void)bytes;
    ++*(unsigned long *)user;
}

static volatile sig_atomic_t reading;

static void stuck(int sig)
{
    static const char in_read[] = "pollcap: stuck in pcap_dispatch after a readable poll\n";
    static const char elsewhere[] = "pollcap: did not finish in time\n";
    (void)sig;
    if (reading)
        write(1, in_read, sizeof in_read - 1);
    else
        write(1, elsewhere, sizeof elsewhere - 1);
    _exit(3);
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
    if (argc < 3 || argc > 4 || (argc == 4 && strcmp(argv[3], "blocking") != 0)) {
        fprintf(stderr, "usage: pollcap IFACE SECONDS [blocking]\n");
        return 2;
    }
    int blocking = argc == 4;
    pcap_t *p = pcap_create(argv[1], err);
    if (p == NULL || pcap_set_snaplen(p, 262144) != 0 || pcap_set_timeout(p, blocking ? 0 : 1000) != 0 || pcap_activate(p) < 0) {
        fprintf(stderr, "pollcap: %s: %s\n", argv[1], p ? pcap_geterr(p) : err);
        return 1;
    }
    if (!blocking && pcap_setnonblock(p, 1, err) != 0) {
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
    fprintf(stderr, "pollcap: listening on %s, poll timeout %d ms%s\n", argv[1], wait_ms, blocking ? ", blocking reads" : "");

    unsigned long packets = 0, wakeups = 0, empty = 0, timeouts = 0;
    double longest = 0;
    double end = now() + atof(argv[2]);
    signal(SIGALRM, stuck);
    alarm((unsigned)atof(argv[2]) + 5);
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
        /* A blocking read only after a readable poll; a nonblocking one after
         * a timeout too, since a locality batch is handed out by a call. */
        if (blocking && r == 0)
            continue;
        double start = now();
        reading = 1;
        int n = pcap_dispatch(p, -1, count, (u_char *)&packets);
        reading = 0;
        if (now() - start > longest)
            longest = now() - start;
        if (n < 0) {
            fprintf(stderr, "pollcap: dispatch: %s\n", pcap_geterr(p));
            return 1;
        }
        if (r > 0 && n == 0)
            ++empty;
    }
    printf("packets=%lu wakeups=%lu empty=%lu timeouts=%lu longest=%.0f\n", packets, wakeups, empty, timeouts, longest * 1000);
    pcap_close(p);
    return 0;
}
