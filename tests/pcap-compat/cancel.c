/*
 * A capture thread cancelled while it reads, as ettercap (at the end of a
 * file) and iftop (at exit) cancel theirs: pcap_loop runs in a thread on a
 * savefile read from standard input, a pipe whose writer stays open after N
 * packets. Once the thread has N packets, the main thread cancels it, joins
 * it, and closes the handle.
 *
 *   cancel wait N [async]      the thread waits in pcap_loop for more packets
 *   cancel callback N [async]  the Nth packet's callback blocks in sem_wait
 *                              (a cancellation point) when the cancel comes
 *
 * "async": the thread uses asynchronous cancellation, as ettercap's do.
 * Prints "cancelled" and exits 0 when the thread ended by its cancellation and
 * the handle closed. Exits 3 if the thread was not cancelled within 5 s (it
 * waits where a cancel is not acted on), 4 if the N packets never came.
 */
#include <errno.h>
#include <pcap/pcap.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static pcap_t *p;
static sem_t got, never;
static long want;
static int in_callback, asynchronous;

static void packet(u_char *user, const struct pcap_pkthdr *h, const u_char *bytes)
{
    static long n;
    (void)user;
    (void)h;
    (void)bytes;
    if (++n == want) {
        sem_post(&got);
        if (in_callback)
            sem_wait(&never);
    }
}

static void *capture(void *arg)
{
    (void)arg;
    if (asynchronous)
        pthread_setcanceltype(PTHREAD_CANCEL_ASYNCHRONOUS, NULL);
    int rc = pcap_loop(p, -1, packet, NULL);
    fprintf(stderr, "cancel: pcap_loop returned %d: %s\n", rc, pcap_geterr(p));
    return NULL;
}

static struct timespec in_seconds(int s)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += s;
    return ts;
}

int main(int argc, char **argv)
{
    char errbuf[PCAP_ERRBUF_SIZE];
    if (argc < 3 || (strcmp(argv[1], "wait") != 0 && strcmp(argv[1], "callback") != 0)) {
        fprintf(stderr, "usage: cancel wait|callback N [async] < savefile-pipe\n");
        return 2;
    }
    in_callback = strcmp(argv[1], "callback") == 0;
    want = atol(argv[2]);
    asynchronous = argc > 3 && strcmp(argv[3], "async") == 0;
    p = pcap_open_offline("-", errbuf);
    if (!p) {
        fprintf(stderr, "cancel: %s\n", errbuf);
        return 1;
    }
    sem_init(&got, 0, 0);
    sem_init(&never, 0, 0);
    pthread_t t;
    pthread_create(&t, NULL, capture, NULL);
    struct timespec ts = in_seconds(5);
    if (sem_timedwait(&got, &ts) != 0) {
        fprintf(stderr, "cancel: the %ld packets did not come\n", want);
        return 4;
    }
    /* Let the thread get back into pcap_loop's wait (or stay in sem_wait). */
    usleep(100 * 1000);
    pthread_cancel(t);
    void *result;
    ts = in_seconds(5);
    int rc = pthread_timedjoin_np(t, &result, &ts);
    if (rc == ETIMEDOUT) {
        fprintf(stderr, "cancel: the thread was not cancelled within 5 s\n");
        return 3;
    }
    if (rc != 0 || result != PTHREAD_CANCELED) {
        fprintf(stderr, "cancel: the thread ended, but not by its cancellation\n");
        return 1;
    }
    pcap_close(p);
    printf("cancelled\n");
    return 0;
}
