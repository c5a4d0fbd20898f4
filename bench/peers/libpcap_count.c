/*
 * The peer of `weir count` for trace files: the plainest libpcap reading loop,
 * pcap_next_ex over the whole file, counting packets and wire bytes. With a
 * filter expression it also runs pcap_offline_filter on every packet, as a
 * libpcap application filtering a trace does. Prints one JSON object.
 */
#include <pcap/pcap.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

int main(int argc, char **argv)
{
    char errbuf[PCAP_ERRBUF_SIZE];
    struct bpf_program prog;
    struct pcap_pkthdr *hdr;
    const u_char *data;
    struct timespec t0, t1;
    unsigned long long packets = 0, bytes = 0, matched = 0;
    int use_filter = argc > 2, rc;

    if (argc < 2) {
        fprintf(stderr, "usage: %s TRACE [FILTER]\n", argv[0]);
        return 2;
    }
    clock_gettime(CLOCK_MONOTONIC, &t0);
    pcap_t *p = pcap_open_offline(argv[1], errbuf);
    if (!p) {
        fprintf(stderr, "%s\n", errbuf);
        return 2;
    }
    if (use_filter && pcap_compile(p, &prog, argv[2], 1, PCAP_NETMASK_UNKNOWN) != 0) {
        fprintf(stderr, "%s\n", pcap_geterr(p));
        return 2;
    }
    while ((rc = pcap_next_ex(p, &hdr, &data)) == 1) {
        packets++;
        bytes += hdr->len;
        if (use_filter && pcap_offline_filter(&prog, hdr, data))
            matched++;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (rc == -1)
        fprintf(stderr, "%s\n", pcap_geterr(p));
    double s = (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
    printf("{\"packets\": %llu, \"bytes\": %llu, \"matched\": %llu, \"elapsed_s\": %.6f, \"bpf_len\": %u}\n",
           packets, bytes, use_filter ? matched : packets, s, use_filter ? prog.bf_len : 0);
    pcap_close(p);
    return rc == -1 ? 1 : 0;
}
