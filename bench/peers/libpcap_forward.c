/*
 * The peer of `weir forward` on libpcap: the plainest inline forwarder an
 * application writes with it, pcap_next_ex on IN and pcap_inject of each
 * packet out of OUT, with an optional filter expression on IN (compiled by
 * libpcap, run in the kernel). IN sees incoming packets only. Runs until
 * SIGINT or SIGTERM, then prints one JSON object of its counts.
 *
 *     libpcap_forward IN OUT [FILTER]
 */
#include <pcap/pcap.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

static volatile sig_atomic_t stop;
static pcap_t *in;

/* libpcap retries a poll a signal interrupts: pcap_breakloop (safe in a
 * signal handler) makes pcap_next_ex return. */
static void on_signal(int sig)
{
    (void)sig;
    stop = 1;
    if (in)
        pcap_breakloop(in);
}

static pcap_t *open_iface(const char *name, int buffer)
{
    char errbuf[PCAP_ERRBUF_SIZE];
    pcap_t *p = pcap_create(name, errbuf);
    if (!p) {
        fprintf(stderr, "%s: %s\n", name, errbuf);
        exit(2);
    }
    pcap_set_snaplen(p, 65535);
    pcap_set_promisc(p, 1);
    pcap_set_timeout(p, 1);
    if (buffer)
        pcap_set_buffer_size(p, buffer);
    if (pcap_activate(p) < 0) {
        fprintf(stderr, "%s: %s\n", name, pcap_geterr(p));
        exit(2);
    }
    return p;
}

int main(int argc, char **argv)
{
    struct pcap_pkthdr *hdr;
    const u_char *data;
    struct bpf_program prog;
    unsigned long long received = 0, forwarded = 0, failed = 0;
    struct pcap_stat st = { 0 };
    int rc;

    if (argc < 3) {
        fprintf(stderr, "usage: %s IN OUT [FILTER]\n", argv[0]);
        return 2;
    }
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    in = open_iface(argv[1], 64 << 20);
    pcap_t *out = open_iface(argv[2], 0);
    pcap_setdirection(in, PCAP_D_IN);
    if (argc > 3) {
        if (pcap_compile(in, &prog, argv[3], 1, PCAP_NETMASK_UNKNOWN) != 0 || pcap_setfilter(in, &prog) != 0) {
            fprintf(stderr, "%s\n", pcap_geterr(in));
            return 2;
        }
    }
    fprintf(stderr, "libpcap_forward: listening on %s\n", argv[1]);
    while (!stop) {
        rc = pcap_next_ex(in, &hdr, &data);
        if (rc == 0)
            continue;
        if (rc == PCAP_ERROR_BREAK)
            break;
        if (rc < 0) {
            fprintf(stderr, "%s\n", pcap_geterr(in));
            break;
        }
        received++;
        if (pcap_inject(out, data, hdr->caplen) == (int)hdr->caplen)
            forwarded++;
        else
            failed++;
    }
    pcap_stats(in, &st);
    printf("{\"received\": %llu, \"forwarded\": %llu, \"tx_failed\": %llu, \"kernel_drops\": %u}\n", received, forwarded, failed,
           st.ps_drop);
    return 0;
}
