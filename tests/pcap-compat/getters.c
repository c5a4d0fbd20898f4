/*
 * Every getter and setter of the libpcap 1.10 API on one handle, one line per
 * call with its result and, where the call failed, the error text:
 *
 *   CALL = RESULT [| ERROR]
 *
 * Run against the system libpcap and against weir's, the two outputs must be
 * the same line for line. Descriptors are shown by kind, not by number (see
 * fd_kind). pcap_get_selectable_fd's is shown by kind on a savefile (the
 * file's, pcap_file's descriptor, as in libpcap); elsewhere it is only told
 * apart from -1 and the standard descriptors: weir's is an eventfd where
 * libpcap's is the socket, and the two poll alike. pcap_perror's line goes
 * to standard error, after pcap_inject's error.
 *
 *   getters -r FILE        a savefile (pcap_open_offline)
 *   getters -f FILE        a savefile opened on a stream (pcap_fopen_offline)
 *   getters -d DLT         pcap_open_dead
 *   getters -D DLT         pcap_open_dead_with_tstamp_precision, nanoseconds
 *   getters -c IFACE       pcap_create, not activated
 *   getters -i IFACE       pcap_create and pcap_activate
 *   getters -e FILE        pcap_open_offline's error for FILE, or for each
 *                          packet pcap_next_ex reads its length, where
 *                          pcap_file's stream stands after it (ftell) and
 *                          pcap_bufsize; then how reading ends (its error)
 *   getters -n FILE        the descriptors a savefile handle holds once read
 *                          to its end, pcap_file and pcap_get_selectable_fd
 *                          asked for: their number and kinds
 */
#include <pcap/pcap.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <linux/if_ether.h>

static pcap_t *p;
static int savefile;

static void result(const char *call, long rc)
{
    if (rc < 0)
        printf("%s = %ld | %s\n", call, rc, pcap_geterr(p));
    else
        printf("%s = %ld\n", call, rc);
}

/* A descriptor by kind: "-1", "fd 0" to "fd 2" (the standard ones, which a
 * handle may name without owning), or what /proc/self/fd says it is: "file",
 * "socket", "anon_inode:[eventfd]", ... */
static const char *fd_kind(int fd)
{
    static char out[300];
    char path[64];
    if (fd < 0)
        return "-1";
    if (fd <= 2) {
        snprintf(out, sizeof out, "fd %d", fd);
        return out;
    }
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(path, out, sizeof out - 1);
    if (n < 0)
        return "not open";
    out[n] = 0;
    if (out[0] == '/')
        return "file";
    char *bracket = strchr(out, '[');
    if (bracket && strncmp(out, "anon_inode:", 11) != 0)
        *bracket = 0;
    return out;
}

static void list(const char *call, int n, int *values)
{
    printf("%s = %d", call, n);
    if (n < 0)
        printf(" | %s", pcap_geterr(p));
    for (int i = 0; i < n; i++)
        printf(" %d", values[i]);
    printf("\n");
}

static void probe(void)
{
    char errbuf[PCAP_ERRBUF_SIZE];
    int *values;
    struct pcap_stat ps;

    result("pcap_datalink", pcap_datalink(p));
    result("pcap_datalink_ext", pcap_datalink_ext(p));
    result("pcap_snapshot", pcap_snapshot(p));
    result("pcap_bufsize", pcap_bufsize(p));
    result("pcap_is_swapped", pcap_is_swapped(p));
    result("pcap_major_version", pcap_major_version(p));
    result("pcap_minor_version", pcap_minor_version(p));
    result("pcap_get_tstamp_precision", pcap_get_tstamp_precision(p));
    FILE *f = pcap_file(p);
    printf("pcap_file = %s\n", f ? "a stream" : "NULL");
    if (f)
        printf("ftell(pcap_file) = %ld\n", ftell(f));
    printf("pcap_fileno = %s\n", fd_kind(pcap_fileno(p)));
    int fd = pcap_get_selectable_fd(p);
    if (savefile)
        printf("pcap_get_selectable_fd = %s, pcap_file's: %s\n", fd_kind(fd), f && fd == fileno(f) ? "yes" : "no");
    else
        printf("pcap_get_selectable_fd = %s\n", fd < 0 ? "-1" : fd <= 2 ? fd_kind(fd) : "a descriptor");
    const struct timeval *tv = pcap_get_required_select_timeout(p);
    printf("pcap_get_required_select_timeout = %s\n", tv ? "a timeout" : "NULL");

    errbuf[0] = 0;
    printf("pcap_getnonblock = %d | %s\n", pcap_getnonblock(p, errbuf), errbuf);
    errbuf[0] = 0;
    printf("pcap_setnonblock(1) = %d | %s\n", pcap_setnonblock(p, 1, errbuf), errbuf);
    errbuf[0] = 0;
    printf("pcap_getnonblock = %d | %s\n", pcap_getnonblock(p, errbuf), errbuf);
    errbuf[0] = 0;
    printf("pcap_setnonblock(0) = %d | %s\n", pcap_setnonblock(p, 0, errbuf), errbuf);
    errbuf[0] = 0;
    printf("pcap_getnonblock = %d | %s\n", pcap_getnonblock(p, errbuf), errbuf);

    int n = pcap_list_datalinks(p, &values);
    list("pcap_list_datalinks", n, values);
    if (n > 0)
        pcap_free_datalinks(values);
    n = pcap_list_tstamp_types(p, &values);
    list("pcap_list_tstamp_types", n, values);
    if (n > 0)
        pcap_free_tstamp_types(values);

    int rc = pcap_stats(p, &ps);
    if (rc == 0)
        printf("pcap_stats = 0\n");
    else
        result("pcap_stats", rc);

    result("pcap_can_set_rfmon", pcap_can_set_rfmon(p));
    result("pcap_set_snaplen(100)", pcap_set_snaplen(p, 100));
    result("pcap_set_promisc(1)", pcap_set_promisc(p, 1));
    result("pcap_set_rfmon(0)", pcap_set_rfmon(p, 0));
    result("pcap_set_timeout(10)", pcap_set_timeout(p, 10));
    result("pcap_set_buffer_size(1<<20)", pcap_set_buffer_size(p, 1 << 20));
    result("pcap_set_immediate_mode(1)", pcap_set_immediate_mode(p, 1));
    result("pcap_set_tstamp_type(HOST)", pcap_set_tstamp_type(p, PCAP_TSTAMP_HOST));
    result("pcap_set_tstamp_precision(MICRO)", pcap_set_tstamp_precision(p, PCAP_TSTAMP_PRECISION_MICRO));
    result("pcap_set_protocol_linux(ETH_P_ALL)", pcap_set_protocol_linux(p, ETH_P_ALL));
    result("pcap_setdirection(INOUT)", pcap_setdirection(p, PCAP_D_INOUT));
    result("pcap_set_datalink(DLT_EN10MB)", pcap_set_datalink(p, DLT_EN10MB));

    struct bpf_program prog;
    rc = pcap_compile(p, &prog, "ip or not ip", 1, PCAP_NETMASK_UNKNOWN);
    result("pcap_compile", rc);
    if (rc == 0) {
        result("pcap_setfilter", pcap_setfilter(p, &prog));
        pcap_freecode(&prog);
    }
    static const u_char frame[60] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 2, 0, 0, 0, 0, 1, 0x88, 0xb5};
    result("pcap_inject", pcap_inject(p, frame, sizeof frame));
    fflush(stdout);
    pcap_perror(p, NULL);
    pcap_perror(p, "pcap_perror");
    result("pcap_sendpacket", pcap_sendpacket(p, frame, sizeof frame));
    result("pcap_activate", pcap_activate(p));
}

/* Only for handles that have nothing to read (dead, not activated): what
 * reading a savefile or an interface returns is not a getter's business. */
static void probe_read(void)
{
    struct pcap_pkthdr *h;
    const u_char *data;
    result("pcap_next_ex", pcap_next_ex(p, &h, &data));
}

/* The descriptors open beyond the standard ones, as "N:kind kind ...". */
static const char *descriptors(void)
{
    static char out[4096];
    int n = 0;
    size_t used = 0;
    out[0] = 0;
    for (int fd = 3; fd < 1024; fd++) {
        const char *kind = fd_kind(fd);
        if (strcmp(kind, "not open") == 0)
            continue;
        n++;
        used += snprintf(out + used, sizeof out - used > 0 ? sizeof out - used : 0, " %s", kind);
        if (used >= sizeof out)
            used = sizeof out - 1;
    }
    static char counted[4200];
    snprintf(counted, sizeof counted, "%d:%s", n, out);
    return counted;
}

int main(int argc, char **argv)
{
    char errbuf[PCAP_ERRBUF_SIZE] = "";
    if (argc != 3 || argv[1][0] != '-') {
        fprintf(stderr, "usage: getters -r|-f|-e|-n FILE | -d|-D DLT | -c|-i IFACE\n");
        return 2;
    }
    const char *arg = argv[2];
    int dead = 0;
    switch (argv[1][1]) {
    case 'r':
        p = pcap_open_offline(arg, errbuf);
        savefile = 1;
        break;
    case 'e': {
        p = pcap_open_offline(arg, errbuf);
        printf("pcap_open_offline = %s | %s\n", p ? "a handle" : "NULL", errbuf);
        if (!p)
            return 0;
        struct pcap_pkthdr *h;
        const u_char *data;
        long packets = 0;
        int rc;
        while ((rc = pcap_next_ex(p, &h, &data)) == 1)
            printf("packet %ld: caplen %u len %u, then ftell %ld, bufsize %d\n", ++packets, h->caplen, h->len,
                   ftell(pcap_file(p)), pcap_bufsize(p));
        printf("pcap_next_ex read %ld packets, then", packets);
        result("", rc);
        pcap_close(p);
        return 0;
    }
    case 'n': {
        char before[4200];
        snprintf(before, sizeof before, "%s", descriptors());
        p = pcap_open_offline(arg, errbuf);
        if (!p) {
            fprintf(stderr, "getters: %s: %s\n", arg, errbuf);
            return 1;
        }
        struct pcap_pkthdr *h;
        const u_char *data;
        while (pcap_next_ex(p, &h, &data) == 1)
            ;
        FILE *f = pcap_file(p);
        printf("pcap_file = %s\n", f ? "a stream" : "NULL");
        printf("pcap_get_selectable_fd = %s\n", fd_kind(pcap_get_selectable_fd(p)));
        printf("descriptors before the open: %s\n", before);
        printf("descriptors with the handle: %s\n", descriptors());
        pcap_close(p);
        printf("descriptors after pcap_close: %s\n", descriptors());
        return 0;
    }
    case 'f': {
        FILE *fp = fopen(arg, "rb");
        if (!fp) {
            fprintf(stderr, "getters: %s: %s\n", arg, strerror(errno));
            return 1;
        }
        p = pcap_fopen_offline(fp, errbuf);
        savefile = 1;
        break;
    }
    case 'd':
        p = pcap_open_dead(atoi(arg), 1000);
        dead = 1;
        break;
    case 'D':
        p = pcap_open_dead_with_tstamp_precision(atoi(arg), 1000, PCAP_TSTAMP_PRECISION_NANO);
        dead = 1;
        break;
    case 'c':
        p = pcap_create(arg, errbuf);
        dead = 1;
        break;
    case 'i':
        p = pcap_create(arg, errbuf);
        if (p && pcap_activate(p) < 0) {
            fprintf(stderr, "getters: %s: %s\n", arg, pcap_geterr(p));
            return 1;
        }
        break;
    default:
        fprintf(stderr, "getters: unknown option %s\n", argv[1]);
        return 2;
    }
    if (!p) {
        fprintf(stderr, "getters: %s: %s\n", arg, errbuf);
        return 1;
    }
    if (dead)
        probe_read();
    probe();
    pcap_close(p);
    return 0;
}
