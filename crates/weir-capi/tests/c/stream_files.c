/*
 * stream_files: each stream's data, as the C API delivers it, written to a
 * file of its own, for tests that compare it with what was sent.
 *
 *     stream_files SOURCE DIR
 *
 * Runs the stream layer on SOURCE until SIGINT or SIGTERM (weir_streams_stop
 * from the signal handler) or the end of the input. Each stream with data
 * gets DIR/SPORT-DPORT, written at the pieces' offsets (a gap stays a hole).
 * A line "created PROTO SPORT DPORT" goes to stderr as each stream is
 * created (so a test knows the capture runs); at the end one line of totals
 * goes to stdout:
 *
 *     streams=4 delivered=1234 pieces=5 closed_fin=4 closed_end=0 failures=0
 */
#define _POSIX_C_SOURCE 200809L
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "weir_stream.h"

static weir_streams_t *handle;
static const char *dir;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned long long failures;

static void on_signal(int sig)
{
    (void)sig;
    weir_streams_stop(handle);
}

static void fail(void)
{
    pthread_mutex_lock(&lock);
    failures++;
    pthread_mutex_unlock(&lock);
}

static void created(weir_stream_t *s, void *user)
{
    weir_stream_info_t info;
    (void)user;
    if (weir_stream_info(s, &info) != 0) {
        fail();
        return;
    }
    pthread_mutex_lock(&lock);
    fprintf(stderr, "created %u %u %u\n", info.protocol, info.sport, info.dport);
    fflush(stderr);
    pthread_mutex_unlock(&lock);
}

/* The stream's file, opened at its first piece; its descriptor + 1 is kept
 * in the user slot (NULL: not open yet). */
static void data(weir_stream_t *s, const uint8_t *bytes, size_t len, unsigned long long offset, void *user)
{
    intptr_t fd = (intptr_t)weir_stream_get_user(s) - 1;
    (void)user;
    if (fd < 0) {
        weir_stream_info_t info;
        char path[4096];
        if (weir_stream_info(s, &info) != 0) {
            fail();
            return;
        }
        snprintf(path, sizeof path, "%s/%u-%u", dir, info.sport, info.dport);
        fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0 || weir_stream_set_user(s, (void *)(fd + 1)) != 0) {
            fail();
            return;
        }
    }
    if (pwrite((int)fd, bytes, len, (off_t)offset) != (ssize_t)len)
        fail();
}

static void closed(weir_stream_t *s, void *user)
{
    intptr_t fd = (intptr_t)weir_stream_get_user(s) - 1;
    (void)user;
    if (fd >= 0 && close((int)fd) != 0)
        fail();
}

int main(int argc, char **argv)
{
    char err[WEIR_ERRBUF_SIZE];
    weir_stream_stats_t st;
    if (argc != 3) {
        fprintf(stderr, "usage: %s SOURCE DIR\n", argv[0]);
        return 2;
    }
    dir = argv[2];
    handle = weir_streams_create(argv[1], err);
    if (!handle) {
        fprintf(stderr, "stream_files: %s\n", err);
        return 1;
    }
    if (weir_streams_on_created(handle, created, NULL) != 0 || weir_streams_on_data(handle, data, NULL) != 0 ||
        weir_streams_on_closed(handle, closed, NULL) != 0) {
        fprintf(stderr, "stream_files: %s\n", weir_streams_error(handle));
        return 1;
    }
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    int rc = weir_streams_run(handle);
    if (rc != 0)
        fprintf(stderr, "stream_files: %s\n", weir_streams_error(handle));
    weir_streams_stats(handle, &st);
    printf("streams=%llu delivered=%llu pieces=%llu closed_fin=%llu closed_end=%llu failures=%llu\n",
           (unsigned long long)st.streams, (unsigned long long)st.delivered, (unsigned long long)st.pieces,
           (unsigned long long)st.closed_fin, (unsigned long long)st.closed_end, failures);
    weir_streams_destroy(handle);
    return rc == 0 && failures == 0 ? 0 : 1;
}
