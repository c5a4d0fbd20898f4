/*
 * The first pcap_next_ex on a live handle opened with to_ms 0, as urlsnarf
 * opens one (it reads while pcap_next_ex returns 1): it must wait for the
 * first packet, however long that takes, and return 1, as on libpcap.
 *
 *   firstread IFACE
 *
 * Prints "open" once the handle is open (traffic may start after that),
 * then "pcap_next_ex = RC after S s", RC's error if any, and exits 0.
 */
#include <pcap/pcap.h>
#include <stdio.h>
#include <time.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    char errbuf[PCAP_ERRBUF_SIZE] = "";
    if (argc != 2) {
        fprintf(stderr, "usage: firstread IFACE\n");
        return 2;
    }
    pcap_t *p = pcap_open_live(argv[1], 65535, 1, 0, errbuf);
    if (!p) {
        fprintf(stderr, "firstread: %s\n", errbuf);
        return 1;
    }
    printf("open\n");
    fflush(stdout);
    double start = now();
    struct pcap_pkthdr *h;
    const u_char *data;
    int rc = pcap_next_ex(p, &h, &data);
    printf("pcap_next_ex = %d after %.1f s%s%s\n", rc, now() - start, rc < 0 ? ": " : "", rc < 0 ? pcap_geterr(p) : "");
    pcap_close(p);
    return 0;
}
