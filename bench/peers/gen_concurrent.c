/*
 * gen_concurrent: a pcap of N TCP connections that are all open at once, for
 * the stream layer's concurrency benchmark (bench/streams.py). Plain C and
 * stdio, no libpcap; memory is O(1) in N (every header is computed from the
 * flow's index), so it writes 10^7 concurrent connections as easily as 100.
 *
 * The trace is written in rounds: round k holds packet k of every flow, flows
 * in index order. With S data segments per direction (--segments), a flow is
 *
 *   round 0         client -> server  SYN              seq=C
 *   round 1         server -> client  SYN|ACK          seq=S        ack=C+1
 *   round 2         client -> server  ACK              seq=C+1      ack=S+1
 *   2 rounds per segment, S times:
 *                   client -> server  PSH|ACK payload  (acks all the server sent)
 *                   server -> client  PSH|ACK payload  (acks all the client sent)
 *   then            client -> server  FIN|ACK
 *                   server -> client  FIN|ACK          (acks the client's FIN)
 *                   client -> server  ACK              (acks the server's FIN)
 *
 * so 6 + 2S packets per flow, all N handshakes before any data, all data
 * before any FIN: N streams are open from the end of round 0 to the first FIN
 * round. Each data segment acknowledges all the peer has sent, so nothing is
 * ever outside the receiver's window (65535, no scaling) however large S is.
 *
 * With -e E (epochs), that is done E times over, each epoch with N new
 * connections (flow indices e*N .. e*N+N-1) that start after the last one
 * closed: E*N connections, never more than N open at once, the same mix of
 * packets per connection whatever N is. The benchmark uses it to give small N
 * as many packets as large N.
 *
 * Addresses are in 198.18.0.0/15 only: flow i's client is
 * 198.18.(1 + i mod 65534) port 1024 + i / 65534 (unique for i < 64,000 *
 * 65534 ~ 4.2e9), its server 198.19.x.y (x.y a hash of i, never .0.0) on port
 * 80, 443, 8080 or 8443. Ethernet II, IPv4 (DF, TTL 64, IP ID per packet),
 * TCP without options. IPv4 and TCP checksums are correct (libnids drops
 * segments whose checksum is wrong unless told not to check).
 *
 * Payload bytes are a fixed pattern ('a'..'z' from the client, 'A'..'Z' from
 * the server), the same in every segment, so the totals are known beforehand:
 * every direction carries S * payload bytes.
 *
 * Timestamps start at 2024-01-01 00:00:00 UTC and rise evenly across -d
 * seconds of packet time (default 10), but never less than 1 us apart (the
 * pcap's resolution), so above 10^7 packets the trace spans packets x 1 us
 * (8e7 packets: 80 s). A flow's consecutive packets are span / (6 + 2S) apart
 * (10 s at 10^7 flows and S = 1), so no idle timeout of 60 s or more closes a
 * stream inside the trace.
 *
 * usage: gen_concurrent -n FLOWS [-e EPOCHS] [-s SEGMENTS] [-p PAYLOAD] [-d DURATION_S] [-o FILE|-]
 * Prints a JSON summary of what it wrote on stderr.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define ETH 14
#define IPH 20
#define TCPH 20
#define MAXPAY 1460

#define F_FIN 0x01
#define F_SYN 0x02
#define F_PSH 0x08
#define F_ACK 0x10

static uint8_t frame[16 + ETH + IPH + TCPH + MAXPAY];
static uint8_t pay_c[MAXPAY], pay_s[MAXPAY];
static uint32_t sum_c, sum_s; /* one's-complement partial sums of the two payloads */

static uint32_t sum16(const uint8_t *p, size_t n)
{
    uint32_t s = 0;
    for (size_t i = 0; i + 1 < n; i += 2)
        s += (uint32_t)p[i] << 8 | p[i + 1];
    if (n & 1)
        s += (uint32_t)p[n - 1] << 8;
    return s;
}

static uint16_t fold(uint64_t s)
{
    while (s >> 16)
        s = (s & 0xffff) + (s >> 16);
    return (uint16_t)~s;
}

static void put16(uint8_t *p, uint16_t v) { p[0] = v >> 8; p[1] = v; }
static void put32(uint8_t *p, uint32_t v) { p[0] = v >> 24; p[1] = v >> 16; p[2] = v >> 8; p[3] = v; }
static void le32(uint8_t *p, uint32_t v) { p[0] = v; p[1] = v >> 8; p[2] = v >> 16; p[3] = v >> 24; }

static uint32_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return (uint32_t)x;
}

struct flow {
    uint32_t cip, sip;
    uint16_t cport, sport;
    uint32_t cisn, sisn;
};

static void flow_of(uint64_t i, struct flow *f)
{
    uint32_t h = mix(i);
    static const uint16_t ports[4] = {80, 443, 8080, 8443};
    f->cip = 0xC6120000u | (uint32_t)(1 + i % 65534);          /* 198.18.0.0/16 */
    f->cport = (uint16_t)(1024 + i / 65534);
    f->sip = 0xC6130000u | (1 + (h & 0xffff) % 65534);          /* 198.19.0.0/16 */
    f->sport = ports[(h >> 16) & 3];
    f->cisn = mix(i ^ 0x5eed0001ULL);
    f->sisn = mix(i ^ 0x5eed0002ULL);
}

int main(int argc, char **argv)
{
    uint64_t flows = 0, segments = 1, epochs = 1;
    unsigned payload = 64;
    double duration = 10.0;
    const char *out = "-";
    int c;
    while ((c = getopt(argc, argv, "n:e:s:p:d:o:h")) != -1) {
        switch (c) {
        case 'n': flows = strtoull(optarg, NULL, 10); break;
        case 'e': epochs = strtoull(optarg, NULL, 10); break;
        case 's': segments = strtoull(optarg, NULL, 10); break;
        case 'p': payload = (unsigned)strtoul(optarg, NULL, 10); break;
        case 'd': duration = strtod(optarg, NULL); break;
        case 'o': out = optarg; break;
        default:
            fprintf(stderr, "usage: %s -n FLOWS [-e EPOCHS, default 1] [-s SEGMENTS per direction, default 1] [-p PAYLOAD bytes, "
                            "1..1460, default 64] [-d DURATION seconds of packet time, default 10] [-o FILE|-]\n",
                    argv[0]);
            return c == 'h' ? 0 : 2;
        }
    }
    if (flows == 0 || epochs == 0 || flows * epochs > 4000000000ULL || payload < 1 || payload > MAXPAY || duration <= 0 || segments > 100000) {
        fprintf(stderr, "gen_concurrent: need 1 <= -n, 1 <= -e, -n x -e <= 4e9, 1 <= -p <= %d, -d > 0, -s <= 100000\n", MAXPAY);
        return 2;
    }
    FILE *fp = strcmp(out, "-") ? fopen(out, "wb") : stdout;
    if (!fp) {
        fprintf(stderr, "gen_concurrent: %s: %s\n", out, strerror(errno));
        return 2;
    }
    static char buf[1 << 20];
    setvbuf(fp, buf, _IOFBF, sizeof buf);

    for (unsigned k = 0; k < payload; k++) {
        pay_c[k] = 'a' + k % 26;
        pay_s[k] = 'A' + k % 26;
    }
    sum_c = sum16(pay_c, payload);
    sum_s = sum16(pay_s, payload);

    /* pcap file header: microseconds, snaplen 65535, Ethernet */
    uint8_t gh[24] = {0};
    le32(gh, 0xa1b2c3d4);
    gh[4] = 2; gh[6] = 4;
    le32(gh + 16, 65535);
    le32(gh + 20, 1);
    fwrite(gh, 1, 24, fp);

    /* the parts of the frame that never change */
    uint8_t *eth = frame + 16, *ip = eth + ETH, *tcp = ip + IPH;
    static const uint8_t mac_c[6] = {0x02, 0, 0, 0, 0, 1}, mac_s[6] = {0x02, 0, 0, 0, 0, 2};
    eth[12] = 0x08; eth[13] = 0x00;
    ip[0] = 0x45; ip[6] = 0x40; ip[8] = 64; ip[9] = 6;
    tcp[12] = 5 << 4;
    put16(tcp + 14, 65535);

    const uint64_t rounds = 6 + 2 * segments, total = rounds * flows * epochs;
    const uint64_t t0_us = 1704067200ULL * 1000000ULL;
    uint64_t step_ns = (uint64_t)(duration * 1e9 / (double)total);
    if (step_ns < 1000)
        step_ns = 1000;
    uint64_t bytes = 24, pkt = 0;
    uint16_t ipid = 0;
    struct flow f;

    for (uint64_t ep = 0; ep < epochs; ep++)
    for (uint64_t r = 0; r < rounds; r++) {
        /* what round r is: direction, flags, how much each side has sent before it */
        int from_client, flags, data = 0;
        uint32_t cseq_off, sseq_off; /* seq offsets from ISN of the sender, ack from the other's ISN */
        uint64_t seg = 0;
        if (r == 0) { from_client = 1; flags = F_SYN; }
        else if (r == 1) { from_client = 0; flags = F_SYN | F_ACK; }
        else if (r == 2) { from_client = 1; flags = F_ACK; }
        else if (r < 3 + 2 * segments) {
            seg = (r - 3) / 2;
            from_client = (r - 3) % 2 == 0;
            flags = F_PSH | F_ACK;
            data = 1;
        } else {
            uint64_t e = r - (3 + 2 * segments);
            from_client = e != 1;
            flags = e == 2 ? F_ACK : F_FIN | F_ACK;
        }
        /* bytes of sequence space each side has used before this packet (SYN counts 1) */
        uint64_t c_sent, s_sent;
        if (r <= 2) {
            c_sent = r == 0 ? 0 : 1;
            s_sent = r <= 1 ? 0 : 1;
        } else if (data) {
            c_sent = 1 + (seg + (from_client ? 0 : 1)) * payload;
            s_sent = 1 + seg * payload;
        } else {
            uint64_t e = r - (3 + 2 * segments);
            c_sent = 1 + segments * payload + (e >= 1);
            s_sent = 1 + segments * payload + (e >= 2);
        }
        /* a SYN|ACK acknowledges the SYN; the first ACK too: the peer's sent count already covers it */
        cseq_off = (uint32_t)c_sent;
        sseq_off = (uint32_t)s_sent;
        unsigned plen = data ? payload : 0;
        unsigned caplen = ETH + IPH + TCPH + plen;
        le32(frame + 8, caplen);
        le32(frame + 12, caplen);
        put16(ip + 2, IPH + TCPH + plen);
        tcp[13] = flags;
        memcpy(eth, from_client ? mac_s : mac_c, 6);
        memcpy(eth + 6, from_client ? mac_c : mac_s, 6);
        if (plen)
            memcpy(tcp + TCPH, from_client ? pay_c : pay_s, plen);
        uint32_t psum = plen ? (from_client ? sum_c : sum_s) : 0;

        for (uint64_t i = ep * flows; i < (ep + 1) * flows; i++, pkt++) {
            flow_of(i, &f);
            uint64_t t_ns = pkt * step_ns;
            uint64_t us = t0_us + t_ns / 1000;
            le32(frame, (uint32_t)(us / 1000000));
            le32(frame + 4, (uint32_t)(us % 1000000));
            uint32_t src = from_client ? f.cip : f.sip, dst = from_client ? f.sip : f.cip;
            uint16_t sp = from_client ? f.cport : f.sport, dp = from_client ? f.sport : f.cport;
            uint32_t seq = from_client ? f.cisn + cseq_off : f.sisn + sseq_off;
            uint32_t ack = from_client ? f.sisn + sseq_off : f.cisn + cseq_off;
            if (r == 0)
                ack = 0;
            put16(ip + 4, ipid++);
            put32(ip + 12, src);
            put32(ip + 16, dst);
            ip[10] = ip[11] = 0;
            put16(ip + 10, fold(sum16(ip, IPH)));
            put16(tcp, sp);
            put16(tcp + 2, dp);
            put32(tcp + 4, seq);
            put32(tcp + 8, ack);
            tcp[16] = tcp[17] = 0;
            uint64_t s = (uint64_t)sum16(tcp, TCPH) + psum + (src >> 16) + (src & 0xffff) + (dst >> 16) +
                         (dst & 0xffff) + 6 + TCPH + plen;
            put16(tcp + 16, fold(s));
            if (fwrite(frame, 1, 16 + caplen, fp) != 16 + caplen) {
                fprintf(stderr, "gen_concurrent: write: %s\n", strerror(errno));
                return 1;
            }
            bytes += 16 + caplen;
        }
    }
    if (fflush(fp) != 0 || (fp != stdout && fclose(fp) != 0)) {
        fprintf(stderr, "gen_concurrent: write: %s\n", strerror(errno));
        return 1;
    }
    fprintf(stderr,
            "{\"flows\":%llu,\"epochs\":%llu,\"packets\":%llu,\"bytes\":%llu,\"payload_bytes\":%llu,\"segments\":%llu,"
            "\"payload\":%u,\"span_s\":%.6f}\n",
            (unsigned long long)flows, (unsigned long long)epochs, (unsigned long long)total, (unsigned long long)bytes,
            (unsigned long long)(flows * epochs * segments * payload * 2), (unsigned long long)segments, payload,
            (double)(total ? total - 1 : 0) * step_ns / 1e9);
    return 0;
}
