/*
 * The libnids peer of `weir streams`: the second oracle for reassembled TCP
 * data, and the benchmark peer. libnids 1.26 (Debian's libnids-dev) reads the
 * trace from the pcap handle opened here (nids_params.pcap_desc; TRACE may be
 * "-" for standard input) and reassembles TCP over IPv4.
 *
 * Usage (stable; bench/streams.py and tests/streams/compare.py rely on it):
 *   nids_streams stats TRACE [-n N]           flow statistics, cutoff 0: libnids tracks every
 *                                             connection, no payload is collected or copied
 *   nids_streams data TRACE [-n N]            collect both directions of every connection and
 *                                             read every delivered byte (a running sum); no writing
 *   nids_streams data TRACE -o DIR [-n N]     also write each direction's bytes to DIR, one file
 *                                             per direction that carried data, named as tcpflow
 *                                             1.6.1 names them (SRC.SPORT-DST.DPORT[--TCI][cN])
 *   TRACE may also be live:IFACE: capture on IFACE with libpcap (promiscuous, snap length 65535,
 *          a kernel buffer of 128 MiB, 100 ms timeout) until SIGINT or SIGTERM (bench/streams_live.py);
 *          the JSON then also has "kernel_dropped", what libpcap's pcap_stats counted as dropped.
 *   -n N   libnids' stream table size (nids_params.n_tcp_streams); libnids keeps at most 3N/4
 *          connections open and evicts the oldest beyond that. Default 140000, so 105000
 *          concurrent connections fit.
 * Build: cc -O2 -o nids_streams nids_streams.c -lnids -lpcap (`make nids-streams` puts it in
 *        target/peers/). Debian's libnids.so brings its own libnet, glib and gthread; a static
 *        libnids.a would also need -lnet -lglib-2.0 -lgthread-2.0.
 *
 * Output: one JSON object on stdout at the end:
 *   {"packets":..  frames read from the trace (all of them, TCP or not),
 *    "streams":..  connections libnids established (three-way handshake seen),
 *    "bytes":..    payload bytes delivered, both directions (0 in stats mode),
 *    "sum":..      sum of the values of those bytes, modulo 2^64 (0 in stats mode),
 *    "elapsed_s":.., "cpu_s":.. (user+sys of the process, from nids_init to the end),
 *    "closed":.., "reset":.., "timed_out":.. (evicted by the table limit), "open_at_end":..,
 *    "files":.. (files written with -o), "warnings_ip":.., "warnings_tcp":.. (packets libnids
 *    refused: bad IP header or checksum, bad TCP header...)}
 * Exit 0 on success, 2 on bad usage or a trace libnids cannot open.
 *
 * Settings: TCP checksums are not verified (nids_register_chksum_ctl for 0.0.0.0/0; traces
 * often hold offloaded checksums; libnids always verifies the IPv4 header checksum, that is
 * not configurable), port-scan detection is off (scan_num_hosts 0), no multiprocessing, no
 * tcp_workarounds, n_hosts (IP fragment table) 65536.
 *
 * What libnids delivers, which differs from tcpflow (see tests/streams/compare.py): IPv4 only
 * (Ethernet with at most one 802.1Q tag, Linux cooked, raw, null/loopback, PPP, 802.11);
 * only connections whose three-way handshake it saw; data in sequence order only, stopping
 * at a hole that is never filled; out-of-window segments and PAWS failures dropped; SYN
 * payload ignored; IP fragments reassembled. libnids takes a TCP urgent byte out of the
 * stream and hands it apart; this program collects it and puts it back in place, so the
 * files hold the bytes as sent.
 *
 * The VLAN part of a file name is the 802.1Q tag control information of the packet that
 * completed the handshake, used for both directions (tcpflow takes each direction's first
 * packet; a connection keeps one VLAN in practice). The cN suffix is found as tcpflow finds
 * it: the first name not yet present in DIR.
 */
#include <nids.h>
#include <pcap/pcap.h>
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#define MAX_OPEN_FILES 512

struct dir_out {
    char *path;                 /* NULL until the direction's first byte */
    int fd;                     /* -1 when closed */
};

struct conn {
    int vlan;                   /* 802.1Q TCI or -1 */
    struct dir_out to_server;   /* bytes sent by the client */
    struct dir_out to_client;   /* bytes sent by the server */
};

static int data_mode;
static const char *outdir;
static int linktype = -1;
static int open_files;
static unsigned long long streams, closed, reset, timed_out, open_at_end, files;
static unsigned long long bytes, sum, warnings_ip, warnings_tcp;

static void die(const char *what)
{
    fprintf(stderr, "nids_streams: %s\n", what);
    exit(2);
}

/* libnids reports refused packets through syslog: count them quietly. */
static void count_warning(int type, int errnum, struct ip *iph, void *data)
{
    (void)errnum, (void)iph, (void)data;
    if (type == NIDS_WARN_IP)
        warnings_ip++;
    else if (type == NIDS_WARN_TCP)
        warnings_tcp++;
}

static int current_vlan(void)
{
    const u_char *p = nids_last_pcap_data;
    if (linktype != DLT_EN10MB || !p || nids_last_pcap_header->caplen < 16)
        return -1;
    if (p[12] == 0x81 && p[13] == 0x00)
        return (p[14] << 8) | p[15];
    return -1;
}

static void addr_text(char *buf, size_t size, u_int addr, u_short port)
{
    const unsigned char *a = (const unsigned char *)&addr;
    snprintf(buf, size, "%03d.%03d.%03d.%03d.%05d", a[0], a[1], a[2], a[3], port);
}

/* Create the direction's file under tcpflow's name, as tcpflow does: O_EXCL with
 * connection numbers 0, 1, 2... until a name is free. */
static void create_file(struct dir_out *d, u_int saddr, u_short sport, u_int daddr, u_short dport, int vlan)
{
    char src[32], dst[32], vl[16] = "", name[4200];
    addr_text(src, sizeof src, saddr, sport);
    addr_text(dst, sizeof dst, daddr, dport);
    if (vlan >= 0)
        snprintf(vl, sizeof vl, "--%d", vlan);
    for (unsigned c = 0;; c++) {
        char cn[16] = "";
        if (c > 0)
            snprintf(cn, sizeof cn, "c%u", c);
        snprintf(name, sizeof name, "%s/%s-%s%s%s", outdir, src, dst, vl, cn);
        d->fd = open(name, O_WRONLY | O_CREAT | O_EXCL, 0666);
        if (d->fd >= 0)
            break;
        if (errno != EEXIST) {
            perror(name);
            exit(1);
        }
    }
    d->path = strdup(name);
    open_files++;
    files++;
}

static void write_out(struct dir_out *d, const char *data, int n)
{
    if (d->fd < 0) {
        d->fd = open(d->path, O_WRONLY | O_APPEND);
        if (d->fd < 0) {
            perror(d->path);
            exit(1);
        }
        open_files++;
    }
    while (n > 0) {
        ssize_t w = write(d->fd, data, n);
        if (w < 0) {
            perror(d->path);
            exit(1);
        }
        data += w, n -= (int)w;
    }
    if (open_files > MAX_OPEN_FILES) {
        close(d->fd);
        d->fd = -1;
        open_files--;
    }
}

static void close_out(struct dir_out *d)
{
    if (d->fd >= 0) {
        close(d->fd);
        open_files--;
    }
    free(d->path);
}

static void deliver(struct tcp_stream *t, struct conn *c, int to_client, const char *data, int n)
{
    for (int i = 0; i < n; i++)
        sum += (unsigned char)data[i];
    bytes += n;
    if (!outdir)
        return;
    struct tuple4 *a = &t->addr;
    struct dir_out *d = to_client ? &c->to_client : &c->to_server;
    if (!d->path) {
        if (to_client)
            create_file(d, a->daddr, a->dest, a->saddr, a->source, c->vlan);
        else
            create_file(d, a->saddr, a->source, a->daddr, a->dest, c->vlan);
    }
    write_out(d, data, n);
}

static void on_tcp(struct tcp_stream *t, void **param)
{
    struct conn *c = *param;
    switch (t->nids_state) {
    case NIDS_JUST_EST:
        streams++;
        /* Urgent bytes are collected in both modes: in stats mode that keeps libnids
         * from dropping the connection for want of a listener, without copying data. */
        t->client.collect_urg++;
        t->server.collect_urg++;
        if (data_mode) {
            t->client.collect++;
            t->server.collect++;
        }
        c = calloc(1, sizeof *c);
        if (!c)
            die("out of memory");
        c->vlan = current_vlan();
        c->to_server.fd = c->to_client.fd = -1;
        *param = c;
        return;
    case NIDS_DATA:
        if (!data_mode)
            return;
        if (t->client.count_new_urg)
            deliver(t, c, 1, (const char *)&t->client.urgdata, 1);
        else if (t->server.count_new_urg)
            deliver(t, c, 0, (const char *)&t->server.urgdata, 1);
        else if (t->client.count_new)
            deliver(t, c, 1, t->client.data, t->client.count_new);
        else if (t->server.count_new)
            deliver(t, c, 0, t->server.data, t->server.count_new);
        return;
    case NIDS_CLOSE:
        closed++;
        break;
    case NIDS_RESET:
        reset++;
        break;
    case NIDS_TIMED_OUT:
        timed_out++;
        break;
    case NIDS_EXITING:
        open_at_end++;
        break;
    default:
        return;
    }
    if (c) {
        close_out(&c->to_server);
        close_out(&c->to_client);
        free(c);
        *param = NULL;
    }
}

/* The live handle, for the signal handler: libnids' loop ends at pcap_breakloop. */
static pcap_t *live_handle;

static void on_stop(int sig)
{
    (void)sig;
    if (live_handle)
        pcap_breakloop(live_handle);
}

static pcap_t *open_live(const char *dev, char *errbuf)
{
    pcap_t *p = pcap_create(dev, errbuf);
    if (!p)
        return NULL;
    if (pcap_set_snaplen(p, 65535) || pcap_set_promisc(p, 1) || pcap_set_timeout(p, 100)
        || pcap_set_buffer_size(p, 128 << 20) || pcap_activate(p) < 0) {
        snprintf(errbuf, PCAP_ERRBUF_SIZE, "%s: %s", dev, pcap_geterr(p));
        pcap_close(p);
        return NULL;
    }
    return p;
}

static void usage(void)
{
    fprintf(stderr, "usage: nids_streams stats|data TRACE [-o DIR] [-n N]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    char errbuf[PCAP_ERRBUF_SIZE];
    struct timespec t0, t1;
    struct rusage ru;
    long n_streams = 140000;
    unsigned long long packets = 0;
    int r;

    if (argc < 3)
        usage();
    if (!strcmp(argv[1], "data"))
        data_mode = 1;
    else if (strcmp(argv[1], "stats"))
        usage();
    for (int i = 3; i < argc; i++) {
        if (!strcmp(argv[i], "-o") && i + 1 < argc && data_mode)
            outdir = argv[++i];
        else if (!strcmp(argv[i], "-n") && i + 1 < argc) {
            char *end;
            n_streams = strtol(argv[++i], &end, 10);
            if (*end || n_streams < 4 || n_streams > 100000000)
                die("-n wants a number of streams from 4 to 100000000");
        } else
            usage();
    }
    /* Opened once, here, and handed to libnids (pcap_desc), so that "-" (a
     * trace on standard input, which cannot be opened twice) works too. */
    int live = !strncmp(argv[2], "live:", 5);
    pcap_t *trace = live ? open_live(argv[2] + 5, errbuf) : pcap_open_offline(argv[2], errbuf);
    if (!trace)
        die(errbuf);
    if (live) {
        struct sigaction sa = {0};
        sa.sa_handler = on_stop;
        live_handle = trace;
        sigaction(SIGINT, &sa, NULL);
        sigaction(SIGTERM, &sa, NULL);
    }
    linktype = pcap_datalink(trace);

    clock_gettime(CLOCK_MONOTONIC, &t0);
    nids_params.pcap_desc = trace;
    nids_params.filename = NULL;
    nids_params.device = NULL;
    nids_params.n_tcp_streams = (int)n_streams;
    nids_params.n_hosts = 65536;
    nids_params.scan_num_hosts = 0;
    nids_params.syslog = count_warning;
    nids_params.pcap_filter = NULL;
    nids_params.multiproc = 0;
    nids_params.one_loop_less = 0;
    nids_params.tcp_workarounds = 0;
    if (!nids_init())
        die(nids_errbuf);
    static struct nids_chksum_ctl all = {0, 0, NIDS_DONT_CHKSUM, 0};
    nids_register_chksum_ctl(&all, 1);
    nids_register_tcp(on_tcp);
    /* Live, a dispatch that times out with no packet returns 0: go on until
     * the signal breaks the loop (PCAP_ERROR_BREAK). */
    while ((r = nids_dispatch(-1)) > 0 || (live && r == 0))
        packets += r;
    if (r == PCAP_ERROR_BREAK)
        r = 0;
    struct pcap_stat ps = {0};
    if (live)
        pcap_stats(trace, &ps);
    if (r < 0)
        fprintf(stderr, "nids_streams: %s\n", nids_errbuf);
    nids_exit();                /* NIDS_EXITING for the connections still open */
    clock_gettime(CLOCK_MONOTONIC, &t1);
    getrusage(RUSAGE_SELF, &ru);
    double elapsed = (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
    double cpu = ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
    printf("{\"packets\": %llu, \"streams\": %llu, \"bytes\": %llu, \"sum\": %llu, \"elapsed_s\": %.6f, "
           "\"cpu_s\": %.6f, \"closed\": %llu, \"reset\": %llu, \"timed_out\": %llu, \"open_at_end\": %llu, "
           "\"files\": %llu, \"warnings_ip\": %llu, \"warnings_tcp\": %llu, \"kernel_dropped\": %u}\n",
           packets, streams, bytes, sum, elapsed, cpu, closed, reset, timed_out, open_at_end, files,
           warnings_ip, warnings_tcp, ps.ps_drop);
    return r < 0 ? 1 : 0;
}
