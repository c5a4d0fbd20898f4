/*
 * Writes into every packet a savefile hands out, as programs do (arpwatch
 * puts an ethertype at offset 12, pmacctd copies a port header into IP
 * fragments): libpcap's packet data is writable, so weir's must be too, and a
 * write must change neither the file nor what another handle reads.
 *
 *   writable FILE...
 *
 * For each FILE, three reads, one summary line each:
 *   loop     pcap_loop; the callback hashes the packet, writes every byte of
 *            it (inverted) and an ethertype at offset 12, then hashes it again;
 *   next_ex  the same through pcap_next_ex;
 *   twice    two handles on the file in step: the first one's packet is
 *            written before the second one reads its own copy, which must
 *            read as the first one's did before the write.
 * Each line has the packet count, the hashes (FNV-1a over the packets'
 * hashes), and how reading ended. The output on the system libpcap and on
 * weir's must be the same (tests/pcap-compat/savefile_write_check.py).
 */
#include <pcap/pcap.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

struct tally {
    long packets;
    uint64_t before, after;
};

static uint64_t fnv(uint64_t h, const u_char *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

static const uint64_t FNV_START = 0xcbf29ce484222325ULL;

static void fold(uint64_t *total, uint64_t one)
{
    *total = fnv(*total, (const u_char *)&one, sizeof one);
}

/* Hash the packet, write into all of it, hash it again. */
static void write_into(struct tally *t, const struct pcap_pkthdr *h, const u_char *data)
{
    u_char *w = (u_char *)data; /* what the programs do */
    fold(&t->before, fnv(FNV_START, data, h->caplen));
    for (bpf_u_int32 i = 0; i < h->caplen; i++)
        w[i] = (u_char)~w[i];
    if (h->caplen >= 14) {
        w[12] = 0x08;
        w[13] = 0x06;
    }
    fold(&t->after, fnv(FNV_START, data, h->caplen));
    t->packets++;
}

static void on_packet(u_char *user, const struct pcap_pkthdr *h, const u_char *data)
{
    write_into((struct tally *)user, h, data);
}

static void report(const char *how, struct tally *t, int rc, pcap_t *p)
{
    printf("  %s: %ld packets, read %016llx, written %016llx, ended %d%s%s\n", how, t->packets,
           (unsigned long long)t->before, (unsigned long long)t->after, rc, rc == PCAP_ERROR ? " " : "",
           rc == PCAP_ERROR ? pcap_geterr(p) : "");
}

static pcap_t *open_one(const char *file)
{
    char errbuf[PCAP_ERRBUF_SIZE] = "";
    pcap_t *p = pcap_open_offline(file, errbuf);
    if (!p)
        printf("  open: %s\n", errbuf);
    return p;
}

int main(int argc, char **argv)
{
    for (int a = 1; a < argc; a++) {
        const char *file = argv[a];
        printf("%s\n", file);
        fflush(stdout);

        pcap_t *p = open_one(file);
        if (!p)
            continue;
        struct tally t = {0, FNV_START, FNV_START};
        int rc = pcap_loop(p, -1, on_packet, (u_char *)&t);
        report("loop", &t, rc, p);
        pcap_close(p);
        fflush(stdout);

        if (!(p = open_one(file)))
            continue;
        struct tally n = {0, FNV_START, FNV_START};
        struct pcap_pkthdr *h;
        const u_char *data;
        while ((rc = pcap_next_ex(p, &h, &data)) == 1)
            write_into(&n, h, data);
        report("next_ex", &n, rc, p);
        pcap_close(p);
        fflush(stdout);

        pcap_t *first = open_one(file), *second = first ? open_one(file) : NULL;
        if (!second) {
            if (first)
                pcap_close(first);
            continue;
        }
        struct tally f = {0, FNV_START, FNV_START};
        long unlike = 0;
        int rc2 = 1;
        while ((rc = pcap_next_ex(first, &h, &data)) == 1) {
            uint64_t was = fnv(FNV_START, data, h->caplen);
            write_into(&f, h, data);
            struct pcap_pkthdr *h2;
            const u_char *data2;
            if ((rc2 = pcap_next_ex(second, &h2, &data2)) != 1)
                break;
            unlike += h2->caplen != h->caplen || fnv(FNV_START, data2, h2->caplen) != was;
        }
        report("twice", &f, rc, first);
        printf("  twice: the second handle read %ld packets unlike the first's before its write (its last read: %d)\n",
               unlike, rc2);
        pcap_close(first);
        pcap_close(second);
        fflush(stdout);
    }
    return 0;
}
