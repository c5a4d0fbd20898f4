/*
 * libpcap's data symbols and the functions around the filter compiler that
 * programs call directly, one line per result, to be compared between the
 * system libpcap and weir's:
 *
 *   - pcap_version and eproto_db, the two exported data symbols (through a
 *     copy relocation, as any program that names them gets them);
 *   - the name lookups (pcap_nametoport, pcap_nametoportrange,
 *     pcap_nametoproto, pcap_nametoeproto, pcap_nametollc, pcap_nametoaddr,
 *     pcap_nametonetaddr, pcap_ether_aton, pcap_ether_hostton,
 *     pcap_next_etherent on an ethers file);
 *   - bpf_validate and bpf_filter on a compiled program and on FILE's packets,
 *     as pcapy and pmacctd's tag maps call them.
 *
 *   namedb FILE ETHERS
 */
#include <pcap/pcap.h>
#include <pcap/namedb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Not declared by libpcap's headers: programs that use them declare them
 * themselves, as tcpreplay does. */
extern char pcap_version[];
struct eproto {
    const char *s;
    u_short p;
};
extern struct eproto eproto_db[];

/* pcap_nametoaddr is deprecated, and still exported and called. */
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

static void mac(const char *what, const u_char *m)
{
    if (!m) {
        printf("%s = NULL\n", what);
        return;
    }
    printf("%s = %02x:%02x:%02x:%02x:%02x:%02x\n", what, m[0], m[1], m[2], m[3], m[4], m[5]);
}

int main(int argc, char **argv)
{
    char errbuf[PCAP_ERRBUF_SIZE];
    if (argc != 3) {
        fprintf(stderr, "usage: namedb FILE ETHERS\n");
        return 2;
    }
    printf("pcap_version = \"%s\" (%zu bytes)\n", pcap_version, strlen(pcap_version) + 1);
    for (const struct eproto *e = eproto_db; e->s; e++)
        printf("eproto_db: %s = 0x%04x\n", e->s, e->p);

    int port, port2, proto;
    int rc = pcap_nametoport("http", &port, &proto);
    printf("pcap_nametoport(http) = %d: %d/%d\n", rc, port, proto);
    rc = pcap_nametoport("no-such-service", &port, &proto);
    printf("pcap_nametoport(no-such-service) = %d\n", rc);
    rc = pcap_nametoportrange("1000-2000", &port, &port2, &proto);
    printf("pcap_nametoportrange(1000-2000) = %d: %d-%d/%d\n", rc, port, port2, proto);
    printf("pcap_nametoproto(udp) = %d\n", pcap_nametoproto("udp"));
    printf("pcap_nametoeproto(arp) = %d\n", pcap_nametoeproto("arp"));
    printf("pcap_nametoeproto(nothing) = %d\n", pcap_nametoeproto("nothing"));
    printf("pcap_nametollc(stp) = %d\n", pcap_nametollc("stp"));
    bpf_u_int32 **addrs = pcap_nametoaddr("localhost");
    printf("pcap_nametoaddr(localhost) = %s", addrs ? "" : "NULL");
    for (; addrs && *addrs; addrs++)
        printf("%08x ", **addrs);
    printf("\n");
    printf("pcap_nametonetaddr(loopback) = %08x\n", pcap_nametonetaddr("loopback"));
    u_char *m = pcap_ether_aton("02:77:65:69:72:01");
    mac("pcap_ether_aton", m);
    free(m);
    m = pcap_ether_hostton("weir-ethers-test");
    mac("pcap_ether_hostton(weir-ethers-test)", m);
    free(m);
    FILE *ethers = fopen(argv[2], "r");
    if (!ethers) {
        perror(argv[2]);
        return 1;
    }
    struct pcap_etherent *ent;
    while ((ent = pcap_next_etherent(ethers)) != NULL) {
        printf("pcap_next_etherent: %s ", ent->name);
        mac("", ent->addr);
    }
    fclose(ethers);

    pcap_t *p = pcap_open_offline(argv[1], errbuf);
    if (!p) {
        fprintf(stderr, "namedb: %s\n", errbuf);
        return 1;
    }
    struct bpf_program prog;
    if (pcap_compile(p, &prog, "tcp port 80 and greater 100", 1, PCAP_NETMASK_UNKNOWN) != 0) {
        fprintf(stderr, "namedb: %s\n", pcap_geterr(p));
        return 1;
    }
    printf("bpf_validate(compiled) = %d\n", bpf_validate(prog.bf_insns, (int)prog.bf_len));
    struct bpf_insn bad[] = {{0x06, 0, 0, 0}, {0x15, 5, 5, 0}};
    printf("bpf_validate(jump past the end) = %d\n", bpf_validate(bad + 1, 1));
    struct pcap_pkthdr *h;
    const u_char *data;
    long packets = 0, kept = 0, sum = 0;
    while (pcap_next_ex(p, &h, &data) == 1) {
        u_int r = bpf_filter(prog.bf_insns, data, h->len, h->caplen);
        packets++;
        kept += r != 0;
        sum += r;
    }
    printf("bpf_filter: %ld packets, %ld kept, return values add up to %ld\n", packets, kept, sum);
    pcap_freecode(&prog);
    pcap_close(p);
    return 0;
}
