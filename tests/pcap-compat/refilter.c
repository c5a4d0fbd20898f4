/*
 * A program that changes its filter while it reads, as a monitor does when
 * told to watch something else: read N1 packets with FILTER1, call
 * pcap_setfilter with FILTER2, read N2 more (a file: to its end). One line per
 * packet on stdout:
 *
 *   PHASE CAPLEN LEN SEC.USEC DPORT
 *
 * DPORT is the IPv4 UDP/TCP destination port, or -1. "switched" goes to stderr
 * (flushed) once FILTER2 is set, so a sender can wait for it; "done" at the end.
 * A live read gives up after 20 s without reaching its counts (exit 3).
 *
 *   refilter -r FILE  FILTER1 N1 FILTER2
 *   refilter -i IFACE FILTER1 N1 FILTER2 N2
 */
#include <pcap/pcap.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int dport(const struct pcap_pkthdr *h, const u_char *p)
{
    if (h->caplen < 14 + 20 + 4 || p[12] != 0x08 || p[13] != 0x00 || (p[14] >> 4) != 4)
        return -1;
    unsigned ihl = (p[14] & 0x0f) * 4;
    if (p[23] != 6 && p[23] != 17)
        return -1;
    if (h->caplen < 14 + ihl + 4)
        return -1;
    return (p[14 + ihl + 2] << 8) | p[14 + ihl + 3];
}

static int set(pcap_t *p, const char *expr)
{
    struct bpf_program prog;
    if (pcap_compile(p, &prog, expr, 1, PCAP_NETMASK_UNKNOWN) != 0 || pcap_setfilter(p, &prog) != 0) {
        fprintf(stderr, "refilter: %s: %s\n", expr, pcap_geterr(p));
        return -1;
    }
    pcap_freecode(&prog);
    return 0;
}

/* Read up to `want` packets (-1: to the end of a file); returns how many. */
static long phase(pcap_t *p, int n, long want, time_t deadline)
{
    long got = 0;
    while (want < 0 || got < want) {
        struct pcap_pkthdr *h;
        const u_char *bytes;
        int rc = pcap_next_ex(p, &h, &bytes);
        if (rc == PCAP_ERROR_BREAK)
            break;
        if (rc < 0) {
            fprintf(stderr, "refilter: %s\n", pcap_geterr(p));
            exit(2);
        }
        if (rc == 0) {
            if (time(NULL) > deadline)
                break;
            continue;
        }
        printf("%d %u %u %ld.%06ld %d\n", n, h->caplen, h->len, (long)h->ts.tv_sec, (long)h->ts.tv_usec, dport(h, bytes));
        got++;
    }
    return got;
}

int main(int argc, char **argv)
{
    char err[PCAP_ERRBUF_SIZE];
    int live = argc == 7 && strcmp(argv[1], "-i") == 0;
    if (!live && !(argc == 6 && strcmp(argv[1], "-r") == 0)) {
        fprintf(stderr, "usage: refilter -r FILE FILTER1 N1 FILTER2 | -i IFACE FILTER1 N1 FILTER2 N2\n");
        return 2;
    }
    pcap_t *p = live ? pcap_open_live(argv[2], 65535, 1, 100, err) : pcap_open_offline(argv[2], err);
    if (!p) {
        fprintf(stderr, "refilter: %s\n", err);
        return 2;
    }
    if (set(p, argv[3]) != 0)
        return 2;
    if (live)
        fprintf(stderr, "refilter: listening on %s\n", argv[2]);
    time_t deadline = time(NULL) + 20;
    long n1 = atol(argv[4]);
    long got1 = phase(p, 1, n1, deadline);
    fflush(stdout);
    if (set(p, argv[5]) != 0)
        return 2;
    fprintf(stderr, "switched\n");
    fflush(stderr);
    long n2 = live ? atol(argv[6]) : -1;
    long got2 = phase(p, 2, n2, deadline);
    fprintf(stderr, "done: %ld + %ld\n", got1, got2);
    pcap_close(p);
    return live && (got1 < n1 || got2 < n2) ? 3 : 0;
}
