/*
 * session_bench.c - acquire+release cycles per second through one shared
 * session: N threads, each on its own key, against the lcd at ADDRESS.
 *
 *   session_bench ADDRESS [THREADS=16] [SECONDS=5]
 *
 * Prints the cycles per second.
 */
#define _POSIX_C_SOURCE 200809L

#include "lc_session.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static lc_session *session;
static atomic_bool stop;
static atomic_long cycles;
static atomic_int failures;

static void *work(void *arg) {
    char key[64];
    snprintf(key, sizeof key, "c/bench/t%ld", (long)(intptr_t)arg);
    long n = 0;
    while (!atomic_load(&stop)) {
        lc_lock_t *l;
        lc_status st = lc_acquire(session, key, strlen(key), NULL, &l);
        if (st == LC_OK) st = lc_lock_release(l);
        lc_lock_free(l);
        if (st != LC_OK) {
            fprintf(stderr, "session_bench: %s %s\n", lc_strerror(st), lc_last_message());
            atomic_fetch_add(&failures, 1);
            break;
        }
        n++;
    }
    atomic_fetch_add(&cycles, n);
    return NULL;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: session_bench ADDRESS [THREADS] [SECONDS]\n");
        return 2;
    }
    int threads = argc > 2 ? atoi(argv[2]) : 16;
    double seconds = argc > 3 ? atof(argv[3]) : 5;
    lc_session_options o;
    lc_session_options_init(&o);
    o.name = "bench-c";
    lc_status st = lc_session_connect(&session, argv[1], &o);
    if (st != LC_OK) {
        fprintf(stderr, "session_bench: connect: %s\n", lc_strerror(st));
        return 1;
    }
    pthread_t *ts = calloc((size_t)threads, sizeof *ts);
    double start = now_s();
    for (int i = 0; i < threads; i++) pthread_create(&ts[i], NULL, work, (void *)(intptr_t)i);
    struct timespec d = {.tv_sec = (time_t)seconds, .tv_nsec = (long)((seconds - (time_t)seconds) * 1e9)};
    nanosleep(&d, NULL);
    atomic_store(&stop, true);
    for (int i = 0; i < threads; i++) pthread_join(ts[i], NULL);
    double took = now_s() - start;
    printf("%.0f\n", (double)atomic_load(&cycles) / took);
    free(ts);
    lc_session_close(session);
    return atomic_load(&failures) == 0 ? 0 : 1;
}
