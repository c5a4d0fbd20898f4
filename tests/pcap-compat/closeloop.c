/*
 * pcap_close from a signal handler while pcap_loop waits for packets, as
 * ngrep and sipgrep do on SIGINT: pcap_loop reads a savefile from standard
 * input (a pipe whose writer stays open) and dumps every packet to OUT with
 * pcap_dump, printing "packet N" (flushed) for each. On SIGINT the handler
 * closes the handle, then the dump file, prints "closed" and exits 0; the
 * dump file must then hold every packet printed.
 *
 *   closeloop OUT.pcap < savefile-pipe
 */
#include <pcap/pcap.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pcap_t *p;
static pcap_dumper_t *d;

static void packet(u_char *user, const struct pcap_pkthdr *h, const u_char *bytes)
{
    static long n;
    pcap_dump(user, h, bytes);
    printf("packet %ld\n", ++n);
    fflush(stdout);
}

static void on_sigint(int sig)
{
    (void)sig;
    pcap_close(p);
    pcap_dump_close(d);
    printf("closed\n");
    exit(0);
}

int main(int argc, char **argv)
{
    char errbuf[PCAP_ERRBUF_SIZE];
    if (argc != 2) {
        fprintf(stderr, "usage: closeloop OUT.pcap < savefile-pipe\n");
        return 2;
    }
    p = pcap_open_offline("-", errbuf);
    if (!p) {
        fprintf(stderr, "closeloop: %s\n", errbuf);
        return 1;
    }
    d = pcap_dump_open(p, argv[1]);
    if (!d) {
        fprintf(stderr, "closeloop: %s\n", pcap_geterr(p));
        return 1;
    }
    signal(SIGINT, on_sigint);
    int rc = pcap_loop(p, -1, packet, (u_char *)d);
    fprintf(stderr, "closeloop: pcap_loop returned %d before any SIGINT\n", rc);
    return 1;
}
