/*
 * What the read that meets the end of a savefile does before it returns:
 * libpcap returns at once, with nothing freed (its buffer goes at
 * pcap_close). A program may act on its last packet on another thread while
 * that read is still under way (ettercap cancels the reading thread as soon
 * as its callback has seen the last one), so the end must come as promptly.
 * Here the memory mapped into the process is compared when the last packet
 * was handed out and when the read that met the end returned: a teardown
 * (unmapping buffers, a mapped file) shows as pages fewer.
 *
 *   endread FILE
 *
 * Through pcap_loop, then pcap_next_ex, one line each:
 *   HOW: N packets, ended RC, mapped pages at the end: unchanged | N fewer
 * The first packet's callback (or read) waits 300 ms, so that a library
 * reading ahead on threads of its own has read the whole file by the last one.
 */
#include <pcap/pcap.h>
#include <stdio.h>
#include <unistd.h>

static long mapped_pages(void)
{
    long pages = -1;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f) {
        if (fscanf(f, "%ld", &pages) != 1)
            pages = -1;
        fclose(f);
    }
    return pages;
}

static long packets, at_last;

static void on_packet(u_char *user, const struct pcap_pkthdr *h, const u_char *data)
{
    (void)user;
    (void)h;
    (void)data;
    if (packets++ == 0)
        usleep(300 * 1000);
    at_last = mapped_pages();
}

static void report(const char *how, int rc)
{
    long now = mapped_pages();
    if (now == at_last)
        printf("%s: %ld packets, ended %d, mapped pages at the end: unchanged\n", how, packets, rc);
    else
        printf("%s: %ld packets, ended %d, mapped pages at the end: %ld %s\n", how, packets, rc,
               now < at_last ? at_last - now : now - at_last, now < at_last ? "fewer" : "more");
}

int main(int argc, char **argv)
{
    char errbuf[PCAP_ERRBUF_SIZE];
    if (argc != 2) {
        fprintf(stderr, "usage: endread FILE\n");
        return 2;
    }
    pcap_t *p = pcap_open_offline(argv[1], errbuf);
    if (!p) {
        fprintf(stderr, "endread: %s\n", errbuf);
        return 1;
    }
    int rc = pcap_loop(p, -1, on_packet, NULL);
    report("pcap_loop", rc);
    pcap_close(p);

    if (!(p = pcap_open_offline(argv[1], errbuf))) {
        fprintf(stderr, "endread: %s\n", errbuf);
        return 1;
    }
    packets = 0;
    struct pcap_pkthdr *h;
    const u_char *data;
    while ((rc = pcap_next_ex(p, &h, &data)) == 1)
        on_packet(NULL, h, data);
    report("pcap_next_ex", rc);
    pcap_close(p);
    return 0;
}
