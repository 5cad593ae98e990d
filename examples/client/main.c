/*
 * examples/client/main.c — libsluice from several threads: each thread sends
 * events to one set, the delivery callback counts the results, and main
 * flushes and prints them.
 *
 *   client [ADDRESS [SET [THREADS [EVENTS_PER_THREAD]]]]
 *
 * ADDRESS is http://127.0.0.1:8080 (a sluice server) by default, or the
 * agent's socket (unix:/run/sluice.sock, tcp:127.0.0.1:7070). Exits 0 when
 * every event was stored.
 */
#define _POSIX_C_SOURCE 200809L /* nanosleep under -std=c11 */

#include <sluice.h>

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static atomic_long delivered, failed;

/* Runs on the client's I/O thread, once per event. */
static void on_delivery(void *opaque, uint64_t id, int status, const char *error,
                        const char *message)
{
    (void)opaque;
    if (status == 0) {
        atomic_fetch_add(&delivered, 1);
        return;
    }
    /* Show the first few failures only: a down bus would flood the terminal. */
    if (atomic_fetch_add(&failed, 1) < 5)
        fprintf(stderr, "event %" PRIu64 " failed: %s: %s\n", id, error, message);
}

typedef struct worker {
    sl_client *c;
    const char *set;
    int thread, events;
} worker;

static void *run(void *arg)
{
    worker *w = arg;
    for (int i = 0; i < w->events; i++) {
        char ev[256];
        snprintf(ev, sizeof ev,
                 "{\"specversion\":\"1.0\",\"id\":\"t%d-%d\",\"source\":\"/examples/client\","
                 "\"type\":\"example.tick\",\"data\":{\"thread\":%d,\"n\":%d}}",
                 w->thread, i, w->thread, i);
        int64_t id;
        /* EFULL: more is waiting for acknowledgement than queue_bytes allows;
         * wait for the I/O thread to drain some and try again. */
        while ((id = sl_client_send(w->c, w->set, ev, NULL)) == SL_CLIENT_EFULL)
            nanosleep(&(struct timespec){.tv_nsec = 1000000}, NULL);
        if (id < 0) {
            fprintf(stderr, "send: %s\n", sl_client_strerror((int)id));
            atomic_fetch_add(&failed, 1);
        }
    }
    return NULL;
}

int main(int argc, char **argv)
{
    const char *addr = argc > 1 ? argv[1] : "http://127.0.0.1:8080";
    const char *set = argc > 2 ? argv[2] : "example";
    int nthreads = argc > 3 ? atoi(argv[3]) : 4;
    int events = argc > 4 ? atoi(argv[4]) : 1000;
    if (nthreads < 1 || nthreads > 64 || events < 0) {
        fprintf(stderr, "usage: %s [ADDRESS [SET [THREADS(1-64) [EVENTS_PER_THREAD]]]]\n", argv[0]);
        return 2;
    }
    char err[256];
    sl_client_options o = {.on_delivery = on_delivery, .timeout_ms = 5000};
    sl_client *c = sl_client_open_opts(addr, &o, err, sizeof err);
    if (!c) {
        fprintf(stderr, "sl_client_open: %s\n", err);
        return 1;
    }
    pthread_t th[64];
    worker w[64];
    for (int t = 0; t < nthreads; t++) {
        w[t] = (worker){.c = c, .set = set, .thread = t, .events = events};
        pthread_create(&th[t], NULL, run, &w[t]);
    }
    for (int t = 0; t < nthreads; t++)
        pthread_join(th[t], NULL);
    int rc = sl_client_flush(c, 30000);
    if (rc < 0)
        fprintf(stderr, "flush: %s\n", sl_client_strerror(rc));
    sl_client_close(c); /* anything still pending is failed with ESHUTDOWN here */
    long ok = atomic_load(&delivered), bad = atomic_load(&failed);
    printf("sent %ld events to %s on %s: %ld delivered, %ld failed\n", (long)nthreads * events, set,
           addr, ok, bad);
    return ok == (long)nthreads * events ? 0 : 1;
}
