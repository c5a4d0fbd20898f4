/*
 * What one run of libpcap's own BPF interpreter (bpf_filter, the engine of
 * pcap_offline_filter) costs per packet: the libpcap side of bench/jit.py,
 * whose weir side is crates/weir/examples/filter_cost.rs and works the same
 * way. Reads the first PACKETS packets of a trace into memory, compiles EXPR
 * (optimizer on, netmask unknown), runs bpf_filter over all of them once to
 * warm the caches, then ROUNDS times, timed. Prints one JSON object.
 *
 * usage: libpcap_filter_cost TRACE EXPR [PACKETS] [ROUNDS]
 */
#include <pcap/pcap.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct packet {
    u_char *data;
    u_int caplen, len;
};

static unsigned long long round_(const struct bpf_program *prog, const struct packet *pkts, size_t n)
{
    unsigned long long matched = 0;
    for (size_t i = 0; i < n; i++)
        matched += bpf_filter(prog->bf_insns, pkts[i].data, pkts[i].len, pkts[i].caplen) != 0;
    return matched;
}

int main(int argc, char **argv)
{
    char errbuf[PCAP_ERRBUF_SIZE];
    struct bpf_program prog;
    struct pcap_pkthdr *hdr;
    const u_char *data;
    struct timespec t0, t1;

    if (argc < 3) {
        fprintf(stderr, "usage: %s TRACE EXPR [PACKETS] [ROUNDS]\n", argv[0]);
        return 2;
    }
    size_t limit = argc > 3 ? strtoul(argv[3], NULL, 10) : 20000;
    unsigned long rounds = argc > 4 ? strtoul(argv[4], NULL, 10) : 100;
    pcap_t *p = pcap_open_offline(argv[1], errbuf);
    if (!p) {
        fprintf(stderr, "%s\n", errbuf);
        return 2;
    }
    if (pcap_compile(p, &prog, argv[2], 1, PCAP_NETMASK_UNKNOWN) != 0) {
        fprintf(stderr, "%s\n", pcap_geterr(p));
        return 2;
    }
    struct packet *pkts = calloc(limit, sizeof *pkts);
    size_t n = 0;
    if (!pkts) {
        perror("calloc");
        return 1;
    }
    while (n < limit && pcap_next_ex(p, &hdr, &data) == 1) {
        pkts[n].data = malloc(hdr->caplen ? hdr->caplen : 1);
        if (!pkts[n].data) {
            perror("malloc");
            return 1;
        }
        memcpy(pkts[n].data, data, hdr->caplen);
        pkts[n].caplen = hdr->caplen;
        pkts[n].len = hdr->len;
        n++;
    }
    unsigned long long matched = round_(&prog, pkts, n), sink = 0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (unsigned long r = 0; r < rounds; r++)
        sink += round_(&prog, pkts, n);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double ns = ((t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec)) / (double)(rounds * (n ? n : 1));
    if (sink != matched * rounds) {
        fprintf(stderr, "bpf_filter gave different verdicts in different rounds\n");
        return 1;
    }
    printf("{\"engine\": \"libpcap\", \"insns\": %u, \"packets\": %zu, \"rounds\": %lu, \"matched\": %llu, \"ns_per_packet\": %.3f}\n",
           prog.bf_len, n, rounds, matched, ns);
    pcap_freecode(&prog);
    pcap_close(p);
    return 0;
}
