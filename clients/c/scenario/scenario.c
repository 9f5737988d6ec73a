/*
 * scenario.c - the live conformance scenario of the C client. It runs
 * against a server the harness started and prints one line per scenario,
 * "ok <id>" or "FAIL <id>: <reason>".
 *
 * Environment: LC_ADDR (mutex port), LC_MANAGER_ADDR, LC_DEAD_ADDR (nothing
 * listens there), LC_SILENT_ADDR (accepts and never answers), LC_PROBE
 * (helper that inspects the server).
 */
#define _POSIX_C_SOURCE 200809L

#include "lockingcenter.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const char *addr, *manager_addr, *dead_addr, *silent_addr, *probe;

/* The read timeout of silent-server-times-out, and the bound each call must
 * return well within, in milliseconds. */
#define SILENT_TIMEOUT_MS 1000
#define SILENT_BOUND_MS (10 * SILENT_TIMEOUT_MS)
static char reason[512];

/* failf records why a scenario failed and returns false. */
static bool failf(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(reason, sizeof reason, fmt, ap);
    va_end(ap);
    return false;
}

static bool client(lc_client *c, const char *address, const char *source) {
    lc_status st = lc_client_init(c, address, source, source ? strlen(source) : 0);
    return st == LC_OK || failf("client for %s: %s", address, lc_strerror(st));
}

/* run_probe runs LC_PROBE with args, its first output line to out. It
 * returns the exit status, or -1 when it could not run. */
static int run_probe(char *const args[], char *out, size_t out_size) {
    int fds[2];
    if (pipe(fds) < 0) return -1;
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        dup2(fds[1], STDOUT_FILENO);
        close(fds[0]);
        close(fds[1]);
        execv(probe, args);
        _exit(127);
    }
    close(fds[1]);
    size_t n = 0;
    ssize_t r;
    char buf[256];
    while ((r = read(fds[0], buf, sizeof buf)) > 0) {
        size_t take = (size_t)r < out_size - 1 - n ? (size_t)r : out_size - 1 - n;
        memcpy(out + n, buf, take);
        n += take;
    }
    close(fds[0]);
    out[n] = '\0';
    out[strcspn(out, "\n")] = '\0';
    int status;
    if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status)) return -1;
    return WEXITSTATUS(status);
}

/* waiters waits until key has exactly n parked waiters. */
static bool waiters(const char *key, int n) {
    char count[16], out[64];
    snprintf(count, sizeof count, "%d", n);
    char *args[] = {(char *)probe, "waiters", (char *)manager_addr, (char *)key, count, NULL};
    int rc = run_probe(args, out, sizeof out);
    return rc == 0 || failf("key %s never had %d waiter(s) (probe exit %d)", key, n, rc);
}

/* holder_is checks that the holder of key (bytes) is want ("free" if none). */
static bool holder_is(const void *key, size_t len, const char *want) {
    char hex[2 * LC_MAX_KEY_LEN + 1], out[256];
    for (size_t i = 0; i < len; i++) snprintf(hex + 2 * i, 3, "%02x", ((const unsigned char *)key)[i]);
    hex[2 * len] = '\0';
    char *args[] = {(char *)probe, "holder", (char *)manager_addr, hex, NULL};
    int rc = run_probe(args, out, sizeof out);
    if (rc != 0) return failf("probe holder exit %d", rc);
    return strcmp(out, want) == 0 || failf("holder of %s is %s, want %s", hex, out, want);
}

static bool ok(lc_status st, const char *what) {
    return st == LC_OK || failf("%s: %s", what, lc_strerror(st));
}

/* A lock taken on its own thread. */
typedef struct waiter {
    const lc_client *client;
    const char *key;
    const lc_cancel *cancel;
    int turn;            /* fifo-three: the waiter's number */
    bool release;        /* unlock once granted */
    lc_status result;
    bool done;           /* guarded by mu */
    pthread_t thread;
} waiter;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t changed = PTHREAD_COND_INITIALIZER;
static int order[3], granted; /* fifo-three, guarded by mu */

static void *run_waiter(void *arg) {
    waiter *w = arg;
    lc_status st = lc_lock_cancellable(w->client, w->key, strlen(w->key), w->cancel, -1);
    if (st == LC_OK && w->turn > 0) {
        pthread_mutex_lock(&mu);
        if (granted < 3) order[granted++] = w->turn;
        pthread_mutex_unlock(&mu);
    }
    if (st == LC_OK && w->release) lc_unlock(w->client, w->key, strlen(w->key));
    pthread_mutex_lock(&mu);
    w->result = st;
    w->done = true;
    pthread_cond_broadcast(&changed);
    pthread_mutex_unlock(&mu);
    return NULL;
}

static void start(waiter *w) {
    w->done = false;
    pthread_create(&w->thread, NULL, run_waiter, w);
}

static bool all_done(const waiter *ws, int n) {
    for (int i = 0; i < n; i++) {
        if (!ws[i].done) return false;
    }
    return true;
}

static void in_seconds(struct timespec *t, int seconds) {
    clock_gettime(CLOCK_REALTIME, t);
    t->tv_sec += seconds;
}

/*
 * settle joins the n waiters of a scenario on key. It gives them 10 s to
 * return by themselves (none when the scenario already failed); waiters
 * still parked after that are granted one by one by resets of the key, so
 * no thread is left behind. It reports whether all returned on their own.
 */
static bool settle(const lc_client *c, const char *key, waiter *ws, int n, bool failed) {
    bool on_time = !failed;
    struct timespec limit;
    in_seconds(&limit, 10);
    pthread_mutex_lock(&mu);
    while (!all_done(ws, n)) {
        if (on_time) {
            if (pthread_cond_timedwait(&changed, &mu, &limit) == ETIMEDOUT) on_time = false;
            continue;
        }
        pthread_mutex_unlock(&mu);
        lc_reset_by_key(c, key, strlen(key));
        pthread_mutex_lock(&mu);
        in_seconds(&limit, 1);
        if (!all_done(ws, n)) pthread_cond_timedwait(&changed, &mu, &limit);
    }
    pthread_mutex_unlock(&mu);
    for (int i = 0; i < n; i++) pthread_join(ws[i].thread, NULL);
    return on_time || failed;
}

/* settled is settle for a scenario whose outcome so far is good. */
static bool settled(const lc_client *c, const char *key, waiter *ws, int n, bool good) {
    if (settle(c, key, ws, n, !good)) return good;
    return failf("a waiter on %s did not return within 10 s", key);
}

/* ---- scenarios --------------------------------------------------------- */

static bool lock_unlock(void) {
    const char *k = "c/lock-unlock";
    lc_client c;
    bool acquired = false;
    if (!client(&c, addr, "c-one")) return false;
    if (!ok(lc_lock(&c, k, strlen(k)), "lock") || !ok(lc_unlock(&c, k, strlen(k)), "unlock")) return false;
    if (!ok(lc_trylock(&c, k, strlen(k), &acquired), "trylock")) return false;
    if (!acquired) return failf("trylock after unlock was busy");
    return ok(lc_unlock(&c, k, strlen(k)), "final unlock");
}

static bool trylock_busy(void) {
    const char *k = "c/trylock-busy";
    lc_client a, b;
    bool acquired = true;
    if (!client(&a, addr, "c-a") || !client(&b, addr, "c-b")) return false;
    if (!ok(lc_lock(&a, k, strlen(k)), "lock")) return false;
    lc_status st = lc_trylock(&b, k, strlen(k), &acquired);
    lc_unlock(&a, k, strlen(k));
    if (!ok(st, "trylock of a held key")) return false;
    return !acquired || failf("trylock of a held key acquired it");
}

static bool fifo_three(void) {
    const char *k = "c/fifo-three";
    lc_client holder, w[3];
    if (!client(&holder, addr, "c-holder")) return false;
    for (int i = 0; i < 3; i++) {
        char src[16];
        snprintf(src, sizeof src, "c-w%d", i + 1);
        if (!client(&w[i], addr, src)) return false;
    }
    if (!ok(lc_lock(&holder, k, strlen(k)), "holder lock")) return false;
    granted = 0;
    waiter ws[3];
    int started = 0;
    bool good = true;
    for (int i = 0; i < 3 && good; i++) {
        ws[i] = (waiter){.client = &w[i], .key = k, .turn = i + 1, .release = true};
        start(&ws[i]);
        started++;
        good = waiters(k, i + 1);
    }
    if (good) good = ok(lc_unlock(&holder, k, strlen(k)), "holder unlock");
    good = settled(&holder, k, ws, started, good);
    lc_unlock(&holder, k, strlen(k));
    for (int i = 0; i < started && good; i++) good = ok(ws[i].result, "waiter lock");
    if (good && (granted != 3 || order[0] != 1 || order[1] != 2 || order[2] != 3)) {
        good = failf("granted in order %d,%d,%d (%d grants), want 1,2,3", order[0], order[1], order[2], granted);
    }
    return good;
}

static bool wait_holds_nothing(void) {
    const char *k = "c/wait-holds-nothing";
    lc_client c;
    bool acquired = false;
    if (!client(&c, addr, "c-wait")) return false;
    if (!ok(lc_wait(&c, k, strlen(k)), "wait")) return false;
    if (!ok(lc_trylock(&c, k, strlen(k), &acquired), "trylock after wait")) return false;
    lc_unlock(&c, k, strlen(k));
    return acquired || failf("key still held after wait");
}

static bool reset_key(void) {
    const char *k = "c/reset-key";
    lc_client holder, other;
    if (!client(&holder, addr, "c-holder") || !client(&other, addr, "c-waiter")) return false;
    if (!ok(lc_lock(&holder, k, strlen(k)), "holder lock")) return false;
    waiter w = {.client = &other, .key = k};
    start(&w);
    bool good = waiters(k, 1) && ok(lc_reset_by_key(&holder, k, strlen(k)), "reset by key");
    good = settled(&holder, k, &w, 1, good);
    good = good && ok(w.result, "waiter lock after reset") && holder_is(k, strlen(k), "c-waiter");
    lc_unlock(&holder, k, strlen(k));
    return good;
}

static bool reset_source_withdraws(void) {
    const char *k = "c/reset-source-withdraws";
    lc_client s1, s2;
    if (!client(&s1, addr, "c-s1") || !client(&s2, addr, "c-s2")) return false;
    if (!ok(lc_lock(&s1, k, strlen(k)), "holder lock")) return false;
    waiter w = {.client = &s2, .key = k, .release = true};
    start(&w);
    bool good = waiters(k, 1) && ok(lc_reset_by_source(&s1, "c-s2", 4), "reset by source");
    good = settled(&s1, k, &w, 1, good);
    if (good && w.result != LC_ERR_FAILED) good = failf("withdrawn lock gave %s, want failed", lc_strerror(w.result));
    good = good && holder_is(k, strlen(k), "c-s1");
    lc_unlock(&s1, k, strlen(k));
    return good;
}

static bool key_127_ok_128_refused(void) {
    char key[129];
    memset(key, 'k', sizeof key - 1);
    memcpy(key, "c/key-127/", 10);
    key[128] = '\0';
    lc_client c, dead;
    if (!client(&c, addr, "c-long") || !client(&dead, dead_addr, "c-long")) return false;
    if (!ok(lc_lock(&c, key, 127), "lock 127 bytes") || !ok(lc_unlock(&c, key, 127), "unlock 127 bytes")) {
        return false;
    }
    lc_status st = lc_lock(&dead, key, 128);
    return st == LC_ERR_INVALID_KEY || failf("128-byte key gave %s, want invalid key", lc_strerror(st));
}

static bool binary_key(void) {
    const unsigned char key[] = {0x00, 0xff, 0x80, 'a'};
    lc_client c;
    if (!client(&c, addr, "c-binary")) return false;
    if (!ok(lc_lock(&c, key, sizeof key), "lock")) return false;
    bool good = holder_is(key, sizeof key, "c-binary");
    good = ok(lc_unlock(&c, key, sizeof key), "unlock") && good;
    return good && holder_is(key, sizeof key, "free");
}

static bool refused_connection(void) {
    lc_client c;
    bool acquired = true;
    if (!client(&c, dead_addr, "c-dead")) return false;
    lc_status st = lc_lock(&c, "c/refused", 9);
    if (st == LC_OK || st == LC_ERR_INVALID_KEY) return failf("lock gave %s, want a network error", lc_strerror(st));
    st = lc_trylock(&c, "c/refused", 9, &acquired);
    if (st == LC_OK) return failf("trylock against nothing gave %s", acquired ? "acquired" : "busy");
    return true;
}

static bool cancel_withdraws(void) {
    const char *k = "c/cancel-withdraws";
    lc_client holder, a, b;
    if (!client(&holder, addr, "c-holder") || !client(&a, addr, "c-a") || !client(&b, addr, "c-b")) return false;
    lc_cancel cancel;
    if (!ok(lc_cancel_init(&cancel), "cancel init")) return false;
    if (!ok(lc_lock(&holder, k, strlen(k)), "holder lock")) {
        lc_cancel_destroy(&cancel);
        return false;
    }
    waiter wa = {.client = &a, .key = k, .cancel = &cancel}, wb = {.client = &b, .key = k};
    start(&wa);
    bool good = waiters(k, 1);
    lc_cancel_fire(&cancel); /* also when the scenario failed: it ends the thread */
    pthread_join(wa.thread, NULL);
    lc_cancel_destroy(&cancel);
    if (good && wa.result != LC_ERR_CANCELLED) good = failf("cancelled lock gave %s", lc_strerror(wa.result));
    good = good && waiters(k, 0);
    if (good) {
        start(&wb);
        good = waiters(k, 1) && ok(lc_unlock(&holder, k, strlen(k)), "holder unlock");
        good = settled(&holder, k, &wb, 1, good);
        good = good && ok(wb.result, "second waiter lock") && holder_is(k, strlen(k), "c-b");
    }
    lc_unlock(&holder, k, strlen(k));
    return good;
}

/* A call that does not wait for a key, run on its own thread. */
typedef struct silent_call {
    const lc_client *client;
    const char *name;
    lc_action action;
    lc_status result;
    bool acquired; /* trylock */
    bool done;     /* guarded by mu */
} silent_call;

static void *run_silent_call(void *arg) {
    silent_call *s = arg;
    const char *k = "c/silent";
    switch (s->action) {
    case LC_ACTION_TRYLOCK:
        s->result = lc_trylock(s->client, k, strlen(k), &s->acquired);
        break;
    case LC_ACTION_UNLOCK:
        s->result = lc_unlock(s->client, k, strlen(k));
        break;
    case LC_ACTION_RESET_KEY:
        s->result = lc_reset_by_key(s->client, k, strlen(k));
        break;
    default:
        s->result = lc_reset_by_source(s->client, "c-silent", 8);
        break;
    }
    pthread_mutex_lock(&mu);
    s->done = true;
    pthread_cond_broadcast(&changed);
    pthread_mutex_unlock(&mu);
    return NULL;
}

static int64_t monotonic_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static bool silent_server_times_out(void) {
    lc_client c;
    if (!client(&c, silent_addr, "c-silent")) return false;
    c.read_timeout_ms = SILENT_TIMEOUT_MS;
    static silent_call calls[] = {
        {.name = "trylock", .action = LC_ACTION_TRYLOCK},
        {.name = "unlock", .action = LC_ACTION_UNLOCK},
        {.name = "reset by key", .action = LC_ACTION_RESET_KEY},
        {.name = "reset by source", .action = LC_ACTION_RESET_SOURCE},
    };
    for (size_t i = 0; i < sizeof calls / sizeof calls[0]; i++) {
        silent_call *s = &calls[i];
        s->client = &c;
        int64_t start = monotonic_ms();
        pthread_t t;
        pthread_create(&t, NULL, run_silent_call, s);
        struct timespec limit;
        in_seconds(&limit, SILENT_BOUND_MS / 1000);
        pthread_mutex_lock(&mu);
        while (!s->done && pthread_cond_timedwait(&changed, &mu, &limit) != ETIMEDOUT) {
        }
        bool done = s->done;
        pthread_mutex_unlock(&mu);
        if (!done) {
            /* The thread is left behind; the process ends after this scenario. */
            pthread_detach(t);
            return failf("%s at a silent server did not return within %d ms", s->name, SILENT_BOUND_MS);
        }
        pthread_join(t, NULL);
        int64_t took = monotonic_ms() - start;
        if (s->result == LC_OK) {
            return failf("%s at a silent server succeeded%s", s->name, s->action == LC_ACTION_TRYLOCK && !s->acquired ? " (busy)" : "");
        }
        if (s->result != LC_ERR_READ_TIMEOUT) {
            return failf("%s at a silent server gave %s, want the read timeout", s->name, lc_strerror(s->result));
        }
        if (took >= SILENT_BOUND_MS) {
            return failf("%s at a silent server took %lld ms, want well under %d", s->name, (long long)took, SILENT_BOUND_MS);
        }
    }
    return true;
}

int main(void) {
    addr = getenv("LC_ADDR");
    manager_addr = getenv("LC_MANAGER_ADDR");
    dead_addr = getenv("LC_DEAD_ADDR");
    silent_addr = getenv("LC_SILENT_ADDR");
    probe = getenv("LC_PROBE");
    if (!addr || !manager_addr || !dead_addr || !silent_addr || !probe) {
        fprintf(stderr, "scenario: LC_ADDR, LC_MANAGER_ADDR, LC_DEAD_ADDR, LC_SILENT_ADDR and LC_PROBE must be set\n");
        return 2;
    }
    struct {
        const char *id;
        bool (*run)(void);
    } scenarios[] = {
        {"lock-unlock", lock_unlock},
        {"trylock-busy", trylock_busy},
        {"fifo-three", fifo_three},
        {"wait-holds-nothing", wait_holds_nothing},
        {"reset-key", reset_key},
        {"reset-source-withdraws", reset_source_withdraws},
        {"key-127-ok-128-refused", key_127_ok_128_refused},
        {"binary-key", binary_key},
        {"refused-connection", refused_connection},
        {"cancel-withdraws", cancel_withdraws},
        {"silent-server-times-out", silent_server_times_out},
    };
    int failures = 0;
    for (size_t i = 0; i < sizeof scenarios / sizeof scenarios[0]; i++) {
        reason[0] = '\0';
        if (scenarios[i].run()) {
            printf("ok %s\n", scenarios[i].id);
        } else {
            printf("FAIL %s: %s\n", scenarios[i].id, reason[0] ? reason : "no reason given");
            failures++;
        }
        fflush(stdout);
    }
    return failures == 0 ? 0 : 1;
}
