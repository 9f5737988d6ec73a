/*
 * session_scenario.c - the session scenarios of clients/conformance/SESSIONS.md
 * for the C client, in their order: one line per scenario on stdout, "ok <id>"
 * or "FAIL <id>: <reason>"; chatter on stderr.
 *
 *   session_scenario [ID...]              every scenario, or those named
 *   session_scenario hold ADDR TTL_MS DELAY_MS KEY...
 *                                          (s-kill-client's child: holds the keys,
 *                                          prints "held", waits to be killed)
 *
 * Each scenario reads only the variables it needs (LC_ADDR, LC_MANAGER_ADDR,
 * LC_PROBE, ...). Exits 1 when a scenario failed.
 */
#define _POSIX_C_SOURCE 200809L

#include "lc_session.h"
#include "proc.h"
#include "scenarios.h"

#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static char reason[1024];
static char run_id[16];
static char self[4096];

static bool failf(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(reason, sizeof reason, fmt, ap);
    va_end(ap);
    return false;
}

static void logf_(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "  ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
}

static int64_t now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(int64_t ms) {
    if (ms <= 0) return;
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

static const char *env(const char *name) {
    const char *v = getenv(name);
    if (v == NULL || *v == '\0') {
        failf("%s is not set", name);
        return NULL;
    }
    return v;
}

/* key makes the key of a scenario: c/<name>/<run>. */
static const char *key(char *buf, const char *name) {
    snprintf(buf, 128, "c/%s/%s", name, run_id);
    return buf;
}

/* check fails the scenario unless st is want. */
static bool check(lc_status st, lc_status want, const char *what) {
    if (st == want) return true;
    return failf("%s: %s (%d) [%s], want %s", what, lc_strerror(st), st, lc_last_message(), lc_strerror(want));
}

static bool connect_as(lc_session **s, const char *addr, const char *name, uint32_t ttl_ms) {
    lc_session_options o;
    lc_session_options_init(&o);
    o.name = name;
    o.ttl_ms = ttl_ms;
    o.read_timeout_ms = 5000;
    return check(lc_session_connect(s, addr, &o), LC_OK, "connect");
}

static bool acquire(lc_session *s, const char *k, const lc_acquire_options *o, lc_lock_t **l) {
    return check(lc_acquire(s, k, strlen(k), o, l), LC_OK, "acquire");
}

static bool waiters(const char *manager, const char *k, int n) {
    char out[512], count[16];
    snprintf(count, sizeof count, "%d", n);
    if (run_probe(out, sizeof out, "waiters", manager, k, count, (char *)NULL) != 0)
        return failf("probe waiters %s %d: %s", k, n, out);
    return true;
}

/* holders reads the tokens of the holders of k (at most max) and their count. */
static int holders(const char *manager, const char *k, uint64_t *tokens, int max, char *line, size_t len) {
    char out[4096];
    if (run_probe(out, sizeof out, "holders", manager, k, (char *)NULL) != 0) {
        failf("probe holders %s: %s", k, out);
        return -1;
    }
    if (line != NULL) {
        size_t n = strlen(out) < len - 1 ? strlen(out) : len - 1;
        memcpy(line, out, n);
        line[n] = '\0';
    }
    int n = 0;
    for (char *save = NULL, *l = strtok_r(out, "\n", &save); l != NULL; l = strtok_r(NULL, "\n", &save)) {
        if (n < max) tokens[n] = strtoull(l, NULL, 10);
        n++;
    }
    return n;
}

static bool expect_held(const char *manager, const char *k, uint64_t token) {
    uint64_t got[4];
    int n = holders(manager, k, got, 4, NULL, 0);
    if (n < 0) return false;
    if (n != 1 || got[0] != token)
        return failf("holders of %s: %d, the first %" PRIu64 ", want only %" PRIu64, k, n, n ? got[0] : 0, token);
    return true;
}

/* A scenario on the single lcd: its key, and its sessions there. */
typedef struct world {
    const char *addr, *manager;
    char k[128];
    lc_session *s[4];
    int n;
} world;

/* open_world connects n sessions (n names follow) for the scenario name. */
static bool open_world(world *w, const char *name, int n, ...) {
    memset(w, 0, sizeof *w);
    w->addr = env("LC_ADDR");
    w->manager = env("LC_MANAGER_ADDR");
    if (w->addr == NULL || w->manager == NULL) return false;
    key(w->k, name);
    va_list ap;
    va_start(ap, n);
    bool ok = true;
    for (int i = 0; i < n && ok; i++) {
        ok = connect_as(&w->s[i], w->addr, va_arg(ap, const char *), 0);
        w->n += ok;
    }
    va_end(ap);
    return ok;
}

static void close_world(world *w) {
    for (int i = 0; i < w->n; i++) lc_session_close(w->s[i]);
}

/* ---- acquires in the background -------------------------------------- */

typedef struct bg {
    pthread_t t;
    lc_session *s;
    char key[128];
    lc_acquire_options o;
    bool release; /* release at once when granted */
    pthread_mutex_t mu;
    pthread_cond_t cond;
    bool done;
    lc_status st;
    lc_lock_t *lock;
    uint64_t token;
    int64_t at;
    /* the order of grants, shared by several */
    pthread_mutex_t *order_mu;
    int *order, *n_order, id;
} bg;

static void *bg_run(void *arg) {
    bg *b = arg;
    lc_lock_t *l = NULL;
    lc_status st = lc_acquire(b->s, b->key, strlen(b->key), &b->o, &l);
    if (st == LC_OK && b->order != NULL) {
        pthread_mutex_lock(b->order_mu);
        b->order[(*b->n_order)++] = b->id;
        pthread_mutex_unlock(b->order_mu);
    }
    uint64_t token = l ? lc_lock_token(l) : 0;
    if (st == LC_OK && b->release) {
        lc_lock_free(l);
        l = NULL;
    }
    pthread_mutex_lock(&b->mu);
    b->st = st;
    b->lock = l;
    b->token = token;
    b->at = now_ms();
    b->done = true;
    pthread_cond_broadcast(&b->cond);
    pthread_mutex_unlock(&b->mu);
    return NULL;
}

static void bg_start(bg *b, lc_session *s, const char *k, const lc_acquire_options *o, bool release) {
    memset(b, 0, sizeof *b);
    b->s = s;
    snprintf(b->key, sizeof b->key, "%s", k);
    if (o != NULL) b->o = *o;
    else lc_acquire_options_init(&b->o);
    b->release = release;
    pthread_mutex_init(&b->mu, NULL);
    pthread_cond_init(&b->cond, NULL);
    pthread_create(&b->t, NULL, bg_run, b);
}

/* bg_wait waits up to ms for the acquire to end: true when it did. */
static bool bg_wait(bg *b, int ms) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (long)(ms % 1000) * 1000000;
    if (ts.tv_nsec >= 1000000000) ts.tv_sec++, ts.tv_nsec -= 1000000000;
    pthread_mutex_lock(&b->mu);
    while (!b->done && pthread_cond_timedwait(&b->cond, &b->mu, &ts) == 0) {
    }
    bool done = b->done;
    pthread_mutex_unlock(&b->mu);
    return done;
}

/* bg_join ends the thread (its session closed first, when it still
 * waits) and frees its lock. */
static void bg_join(bg *b) {
    pthread_join(b->t, NULL);
    lc_lock_free(b->lock);
    b->lock = NULL;
}

/* end_parked ends a scenario in which session s parked the acquire w
 * (NULL: not started): the locks l1 and l2 and w's freed, the other
 * session o closed, then s, then w's thread joined. */
static void end_parked(lc_session *s, lc_session *o, bg *w, lc_lock_t *l1, lc_lock_t *l2) {
    lc_lock_free(l1);
    lc_lock_free(l2);
    lc_session_close(o);
    if (w != NULL) {
        lc_lock_free(w->lock);
        w->lock = NULL;
    }
    lc_session_close(s);
    if (w != NULL) bg_join(w);
}

/* ---- the scenarios ---------------------------------------------------- */

static bool s_acquire_release(void) {
    world w;
    lc_lock_t *a = NULL, *b = NULL;
    bool ok = open_world(&w, "acquire-release", 1, "c-ar");
    lc_session *s = w.s[0];
    ok = ok && acquire(s, w.k, NULL, &a) && check(lc_lock_release(a), LC_OK, "release") && acquire(s, w.k, NULL, &b);
    if (ok && lc_lock_token(b) <= lc_lock_token(a))
        ok = failf("second token %" PRIu64 " not above the first %" PRIu64, lc_lock_token(b), lc_lock_token(a));
    ok = ok && check(lc_lock_release(b), LC_OK, "release") && check(lc_lock_release(b), LC_OK, "release again");
    lc_lock_free(a);
    lc_lock_free(b);
    close_world(&w);
    return ok;
}

static bool s_try_busy(void) {
    world w;
    lc_lock_t *l = NULL, *m = NULL;
    bool ok = open_world(&w, "try-busy", 2, "c-holder", "c-try") && acquire(w.s[0], w.k, NULL, &l) &&
              check(lc_try_acquire(w.s[1], w.k, strlen(w.k), NULL, &m), LC_BUSY, "try of a held key");
    if (ok && m != NULL) ok = failf("a busy try gave a lock");
    lc_lock_free(l);
    close_world(&w);
    return ok;
}

static bool s_wait_bound(void) {
    world w;
    lc_lock_t *l = NULL, *m = NULL;
    lc_acquire_options o;
    lc_acquire_options_init(&o);
    o.wait_ms = 500;
    bool ok = open_world(&w, "wait-bound", 2, "c-holder", "c-waiter") && acquire(w.s[0], w.k, NULL, &l);
    int64_t start = now_ms();
    ok = ok && check(lc_acquire(w.s[1], w.k, strlen(w.k), &o, &m), LC_ERR_TIMEOUT, "acquire with a wait of 500 ms");
    int64_t took = now_ms() - start;
    if (ok && (took < 450 || took >= 3000)) ok = failf("the wait bound of 500 ms took %" PRId64 " ms", took);
    ok = ok && waiters(w.manager, w.k, 0);
    lc_lock_free(l);
    close_world(&w);
    return ok;
}

static bool s_cancel(void) {
    world wd;
    lc_lock_t *held = NULL;
    lc_cancel cancel;
    lc_cancel_init(&cancel);
    bool ok = open_world(&wd, "cancel", 2, "c-holder", "c-cancel");
    lc_session *h = wd.s[0], *b = wd.s[1];
    const char *k = wd.k, *manager = wd.manager;
    ok = ok && acquire(h, k, NULL, &held);
    bg w, next;
    bool started = false, next_started = false;
    if (ok) {
        lc_acquire_options o;
        lc_acquire_options_init(&o);
        o.cancel = &cancel;
        bg_start(&w, b, k, &o, false);
        started = true;
        ok = waiters(manager, k, 1);
    }
    if (ok) {
        lc_cancel_fire(&cancel);
        int64_t start = now_ms();
        if (!bg_wait(&w, 5000)) ok = failf("the cancelled acquire did not return");
        ok = ok && check(w.st, LC_ERR_CANCELLED, "the cancelled acquire") && waiters(manager, k, 0);
        if (ok && now_ms() - start > 1000)
            ok = failf("the queue emptied %" PRId64 " ms after the cancel, want 1 s", now_ms() - start);
    }
    if (ok) {
        bg_start(&next, b, k, NULL, false);
        next_started = true;
        ok = waiters(manager, k, 1) && check(lc_lock_release(held), LC_OK, "release");
        if (ok && !bg_wait(&next, 10000)) ok = failf("the next waiter was not granted");
        ok = ok && check(next.st, LC_OK, "the next waiter");
    }
    lc_lock_free(held);
    close_world(&wd);
    if (started) bg_join(&w);
    if (next_started) bg_join(&next);
    lc_cancel_destroy(&cancel);
    return ok;
}

static bool s_stale_release(void) {
    world w;
    lc_lock_t *l = NULL;
    bool ok = open_world(&w, "stale", 2, "c-holder", "c-other") && acquire(w.s[0], w.k, NULL, &l);
    ok = ok && check(lc_release_token(w.s[1], w.k, strlen(w.k), lc_lock_token(l)), LC_ERR_STALE_TOKEN,
                     "release by another session");
    ok = ok && check(lc_release_token(w.s[0], w.k, strlen(w.k), lc_lock_token(l) + 1), LC_ERR_STALE_TOKEN,
                     "release of a wrong token");
    ok = ok && expect_held(w.manager, w.k, lc_lock_token(l));
    if (ok && lc_lock_lost(l) != LC_OK) ok = failf("the holder's lock counts lost: %s", lc_strerror(lc_lock_lost(l)));
    ok = ok && check(lc_lock_release(l), LC_OK, "release by the holder");
    lc_lock_free(l);
    close_world(&w);
    return ok;
}

/* lost_latch is the on_lost callback of s-lease-expiry. */
typedef struct latch {
    pthread_mutex_t mu;
    pthread_cond_t cond;
    bool fired;
    lc_status reason;
    int64_t at;
} latch;

static void on_lost(lc_lock_t *l, lc_status why, void *arg) {
    (void)l;
    latch *t = arg;
    pthread_mutex_lock(&t->mu);
    t->fired = true;
    t->reason = why;
    t->at = now_ms();
    pthread_cond_broadcast(&t->cond);
    pthread_mutex_unlock(&t->mu);
}

static bool s_lease_expiry(void) {
    world wd;
    bool ok = open_world(&wd, "lease", 2, "c-lease", "c-after");
    lc_session *s = wd.s[0], *o = wd.s[1];
    const char *k = wd.k;
    latch t = {.mu = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};
    lc_acquire_options opt;
    lc_acquire_options_init(&opt);
    opt.lease_ms = 500;
    opt.delay_ms = 2000;
    opt.on_lost = on_lost;
    opt.on_lost_arg = &t;
    lc_lock_t *l = NULL, *m = NULL, *after = NULL;
    int64_t start = now_ms();
    ok = ok && acquire(s, k, &opt, &l);
    if (ok) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += 2;
        pthread_mutex_lock(&t.mu);
        while (!t.fired && pthread_cond_timedwait(&t.cond, &t.mu, &ts) == 0) {
        }
        pthread_mutex_unlock(&t.mu);
        if (!t.fired) ok = failf("a 500 ms lease not reported lost within 2 s");
    }
    if (ok) {
        logf_("lease lost after %" PRId64 " ms: %s", t.at - start, lc_strerror(t.reason));
        ok = check(t.reason, LC_ERR_LEASE_EXPIRED, "the callback's reason") &&
             check(lc_lock_lost(l), LC_ERR_LEASE_EXPIRED, "lc_lock_lost");
    }
    ok = ok && check(lc_try_acquire(o, k, strlen(k), NULL, &m), LC_BUSY, "a try at once (the lock-delay)");
    if (ok) {
        lc_acquire_options w;
        lc_acquire_options_init(&w);
        w.wait_ms = 6000;
        ok = acquire(o, k, &w, &after);
        int64_t took = now_ms() - t.at;
        logf_("granted to the second session %" PRId64 " ms after the loss", took);
        if (ok && took > 5000) ok = failf("granted %" PRId64 " ms after the loss, want within 5 s", took);
    }
    lc_lock_free(m);
    lc_lock_free(after);
    lc_lock_free(l);
    close_world(&wd);
    return ok;
}

/* hold_main is s-kill-client's child: hold the keys, say so, wait. */
static int hold_main(int argc, char **argv) {
    if (argc < 6) return 2;
    lc_session *s;
    lc_session_options o;
    lc_session_options_init(&o);
    o.name = "c-kill-child";
    o.ttl_ms = (uint32_t)atoi(argv[3]);
    if (lc_session_connect(&s, argv[2], &o) != LC_OK) return 1;
    lc_acquire_options a;
    lc_acquire_options_init(&a);
    a.delay_ms = (uint32_t)atoi(argv[4]);
    for (int i = 5; i < argc; i++) {
        lc_lock_t *l;
        if (lc_acquire(s, argv[i], strlen(argv[i]), &a, &l) != LC_OK) return 1;
    }
    printf("held\n");
    fflush(stdout);
    for (;;) pause();
}

static bool s_kill_client(void) {
    const char *addr = env("LC_ADDR"), *manager = env("LC_MANAGER_ADDR");
    if (addr == NULL || manager == NULL) return false;
    char keys[3][128], names[3][24];
    for (int i = 0; i < 3; i++) {
        snprintf(names[i], sizeof names[i], "kill-%d", i);
        key(keys[i], names[i]);
    }
    char *argv[] = {self, "hold", (char *)addr, "2000", "1000", keys[0], keys[1], keys[2], NULL};
    child c;
    if (!child_start(&c, argv)) return failf("cannot start the child");
    char line[64];
    if (!child_line(&c, line, sizeof line, 10000) || strcmp(line, "held") != 0) {
        child_wait(&c, 0);
        return failf("the child said %s", line);
    }
    kill(c.pid, SIGKILL);
    int64_t killed = now_ms();
    child_wait(&c, 5000);
    lc_session *s;
    if (!connect_as(&s, addr, "c-after-kill", 0)) return false;
    sleep_ms(killed + 1000 - now_ms());
    bool ok = true;
    for (int i = 0; ok && i < 3; i++) {
        uint64_t t[2];
        int n = holders(manager, keys[i], t, 2, NULL, 0);
        if (n == 0) ok = failf("%s free 1 s after the kill, before its TTL and lock-delay", keys[i]);
        else if (n < 0) ok = false;
    }
    for (int i = 0; ok && i < 3; i++) {
        lc_acquire_options o;
        lc_acquire_options_init(&o);
        o.wait_ms = killed + 5000 - now_ms() > 0 ? killed + 5000 - now_ms() : 0;
        lc_lock_t *l = NULL;
        lc_status st = lc_acquire(s, keys[i], strlen(keys[i]), &o, &l);
        if (st != LC_OK) ok = failf("%s not acquired by 5 s after the kill: %s", keys[i], lc_strerror(st));
        else logf_("%s free %" PRId64 " ms after the kill", keys[i], now_ms() - killed);
        lc_lock_free(l);
    }
    lc_session_close(s);
    return ok;
}

static bool s_resume(void) {
    const char *addr = env("LC_ADDR"), *manager = env("LC_MANAGER_ADDR"), *proxy = env("LC_PROXY_ADDR"),
               *ctl = env("LC_PROXY_CTL");
    if (addr == NULL || manager == NULL || proxy == NULL || ctl == NULL) return false;
    char ka[128], kb[128], out[512];
    key(ka, "resume-a");
    key(kb, "resume-b");
    lc_session *s, *o = NULL;
    if (!connect_as(&s, proxy, "c-resume", 5000)) return false;
    lc_lock_t *a = NULL, *b_held = NULL;
    bg w;
    bool started = false;
    bool ok = connect_as(&o, addr, "c-b", 0) && acquire(s, ka, NULL, &a) && acquire(o, kb, NULL, &b_held);
    if (ok) {
        bg_start(&w, s, kb, NULL, false);
        started = true;
        ok = waiters(manager, kb, 1);
    }
    if (ok && run_probe(out, sizeof out, "cut", ctl, (char *)NULL) != 0) ok = failf("probe cut: %s", out);
    ok = ok && check(lc_lock_release(b_held), LC_OK, "release of B by the other session");
    if (ok && !bg_wait(&w, 10000)) ok = failf("the parked acquire of B was not granted after the cut");
    ok = ok && check(w.st, LC_OK, "the parked acquire after the cut") && expect_held(manager, ka, lc_lock_token(a)) &&
         expect_held(manager, kb, w.token);
    if (ok && lc_lock_lost(a) != LC_OK) ok = failf("lock A lost over the cut: %s", lc_strerror(lc_lock_lost(a)));
    end_parked(s, o, started ? &w : NULL, a, b_held);
    return ok;
}

/* leader_manager finds the manager of the leader among the managers of
 * the cluster other than skip (-1: none). */
static bool leader_manager(int skip, char *buf, size_t len) {
    const char *all = env("LC_CLUSTER_MANAGER");
    if (all == NULL) return false;
    char copy[1024], list[1024] = "", *items[8];
    int n = 0;
    snprintf(copy, sizeof copy, "%s", all);
    for (char *save = NULL, *m = strtok_r(copy, ",", &save); m != NULL && n < 8; m = strtok_r(NULL, ",", &save)) {
        if (n != skip) {
            if (list[0] != '\0') strncat(list, ",", sizeof list - strlen(list) - 1);
            strncat(list, m, sizeof list - strlen(list) - 1);
        }
        items[n++] = m;
    }
    char out[256];
    if (run_probe(out, sizeof out, "leader", list, (char *)NULL) != 0) return failf("probe leader: %s", out);
    int idx = atoi(out), seen = 0;
    for (int i = 0; i < n; i++) {
        if (i == skip) continue;
        if (seen++ == idx) {
            snprintf(buf, len, "%s", items[i]);
            return true;
        }
    }
    return failf("probe leader said %s", out);
}

static bool s_leader_stop(void) {
    const char *cluster = env("LC_CLUSTER");
    if (cluster == NULL) return false;
    char k[128], out[256], mgr[256];
    key(k, "leader-stop");
    lc_session *s;
    if (!connect_as(&s, cluster, "c-ls", 3000)) return false;
    lc_lock_t *l = NULL;
    bool ok = acquire(s, k, NULL, &l);
    int stopped = -1;
    if (ok) {
        if (run_probe(out, sizeof out, "signal-leader", "STOP", (char *)NULL) != 0) {
            ok = failf("probe signal-leader STOP: %s", out);
        } else {
            stopped = atoi(out);
            logf_("stopped node %d", stopped);
            sleep_ms(6000);
            if (run_probe(out, sizeof out, "signal-leader", "CONT", (char *)NULL) != 0)
                ok = failf("probe signal-leader CONT: %s", out);
        }
    }
    if (ok && lc_session_status(s) != LC_OK) ok = failf("the session ended: %s", lc_strerror(lc_session_status(s)));
    if (ok && lc_lock_lost(l) != LC_OK) ok = failf("the lock was lost: %s", lc_strerror(lc_lock_lost(l)));
    ok = ok && leader_manager(stopped, mgr, sizeof mgr) && expect_held(mgr, k, lc_lock_token(l));
    if (ok) {
        char at[256];
        lc_session_address(s, at, sizeof at);
        logf_("session on %s", at);
    }
    lc_lock_free(l);
    lc_session_close(s);
    return ok;
}

static bool s_leader_kill(void) {
    const char *cluster = env("LC_CLUSTER");
    if (cluster == NULL) return false;
    char k1[128], k2[128], out[256], mgr[256];
    key(k1, "leader-kill-1");
    key(k2, "leader-kill-2");
    lc_session *s, *o = NULL;
    if (!connect_as(&s, cluster, "c-lk", 5000)) return false;
    lc_lock_t *held = NULL, *other = NULL;
    bg w;
    bool started = false;
    bool ok = connect_as(&o, cluster, "c-lk-2", 5000) && acquire(s, k1, NULL, &held) && acquire(o, k2, NULL, &other);
    if (ok) {
        bg_start(&w, s, k2, NULL, false);
        started = true;
        ok = leader_manager(-1, mgr, sizeof mgr) && waiters(mgr, k2, 1);
    }
    int killed = -1;
    if (ok) {
        if (run_probe(out, sizeof out, "signal-leader", "KILL", (char *)NULL) != 0) ok = failf("probe signal-leader KILL: %s", out);
        else killed = atoi(out);
        logf_("killed node %d", killed);
    }
    ok = ok && leader_manager(killed, mgr, sizeof mgr) && expect_held(mgr, k1, lc_lock_token(held)) &&
         check(lc_lock_release(other), LC_OK, "release by the second session");
    if (ok && !bg_wait(&w, 15000)) ok = failf("the parked acquire was not granted after the failover");
    ok = ok && check(w.st, LC_OK, "the parked acquire") && leader_manager(killed, mgr, sizeof mgr) &&
         expect_held(mgr, k2, w.token);
    if (ok && lc_lock_lost(held) != LC_OK) ok = failf("the held lock was lost: %s", lc_strerror(lc_lock_lost(held)));
    end_parked(s, o, started ? &w : NULL, held, other);
    return ok;
}

static bool s_tls_token(void) {
    const char *addr = env("LC_TLS_ADDR"), *ca = env("LC_CA_FILE"), *token = env("LC_TOKEN");
    if (addr == NULL || ca == NULL || token == NULL) return false;
    if (!lc_tls_available()) return failf("the C client was built without OpenSSL");
    lc_session_options o;
    lc_session_options_init(&o);
    o.name = "c-tls";
    o.tls = true;
    o.ca_file = ca;
    o.token = token;
    o.server_name = "localhost";
    o.read_timeout_ms = 5000;
    lc_session *s;
    if (!check(lc_session_connect(&s, addr, &o), LC_OK, "connect with TLS and the token")) return false;
    char k[128];
    key(k, "tls");
    lc_lock_t *l = NULL, *m = NULL;
    bool ok = acquire(s, k, NULL, &l) && check(lc_lock_release(l), LC_OK, "release");
    ok = ok && check(lc_acquire(s, "outside/c", 9, NULL, &m), LC_ERR_FORBIDDEN, "a key outside c/");
    lc_lock_free(l);
    lc_lock_free(m);
    lc_session_close(s);
    char wrong[1100];
    snprintf(wrong, sizeof wrong, "%s-wrong", token);
    o.token = wrong;
    lc_session *bad = NULL;
    ok = ok && check(lc_session_connect(&bad, addr, &o), LC_ERR_UNAUTHENTICATED, "a wrong token");
    lc_session_close(bad);
    return ok;
}

static bool s_modes(void) {
    world w;
    bool ok = open_world(&w, "shared", 3, "c-m0", "c-m1", "c-m2");
    lc_session *a = w.s[0], *b = w.s[1], *c = w.s[2];
    const char *manager = w.manager, *ks = w.k;
    char kp[128], kr[128], kq[128];
    key(kp, "pool");
    key(kr, "reentrant");
    key(kq, "priority");
    lc_lock_t *r1 = NULL, *r2 = NULL, *p1 = NULL, *p2 = NULL, *p3 = NULL, *x = NULL, *y = NULL, *h = NULL;
    lc_acquire_options o;
    lc_acquire_options_init(&o);
    o.shared = true;
    ok = ok && acquire(a, ks, &o, &r1) && acquire(b, ks, &o, &r2);
    uint64_t t[4];
    if (ok && holders(manager, ks, t, 4, NULL, 0) != 2) ok = failf("shared: not two holders");
    ok = ok && check(lc_lock_release(r1), LC_OK, "release") && check(lc_lock_release(r2), LC_OK, "release");
    lc_acquire_options_init(&o);
    o.limit = 2;
    ok = ok && acquire(a, kp, &o, &p1) && acquire(b, kp, &o, &p2) &&
         check(lc_try_acquire(c, kp, strlen(kp), &o, &p3), LC_BUSY, "a third try of a semaphore of 2");
    ok = ok && check(lc_lock_release(p1), LC_OK, "release") && check(lc_lock_release(p2), LC_OK, "release");
    lc_acquire_options_init(&o);
    o.reentrant = true;
    o.owner = "job";
    ok = ok && acquire(a, kr, &o, &x) && acquire(a, kr, &o, &y);
    if (ok && lc_lock_token(x) != lc_lock_token(y))
        ok = failf("reentrant tokens %" PRIu64 " and %" PRIu64, lc_lock_token(x), lc_lock_token(y));
    if (ok && lc_lock_count(y) != 2) ok = failf("reentrant count %u, want 2", lc_lock_count(y));
    ok = ok && check(lc_lock_release(y), LC_OK, "release") && expect_held(manager, kr, lc_lock_token(x)) &&
         check(lc_lock_release(x), LC_OK, "release");
    bg low, high;
    int order[2], n_order = 0;
    pthread_mutex_t order_mu = PTHREAD_MUTEX_INITIALIZER;
    bool started = false;
    if (ok && acquire(a, kq, NULL, &h)) {
        lc_acquire_options lo, hi;
        lc_acquire_options_init(&lo);
        lc_acquire_options_init(&hi);
        lo.priority = 1;
        hi.priority = 5;
        bg_start(&low, b, kq, &lo, true);
        low.order_mu = &order_mu, low.order = order, low.n_order = &n_order, low.id = 1;
        started = true;
        ok = waiters(manager, kq, 1);
        bg_start(&high, c, kq, &hi, true);
        high.order_mu = &order_mu, high.order = order, high.n_order = &n_order, high.id = 5;
        ok = ok && waiters(manager, kq, 2) && check(lc_lock_release(h), LC_OK, "release");
        if (ok && (!bg_wait(&low, 10000) || !bg_wait(&high, 10000))) ok = failf("a priority waiter was not granted");
        ok = ok && check(low.st, LC_OK, "the low waiter") && check(high.st, LC_OK, "the high waiter");
        if (ok && (n_order != 2 || order[0] != 5)) ok = failf("the higher priority was not granted first");
    } else {
        ok = false;
    }
    lc_lock_t *all[] = {r1, r2, p1, p2, p3, x, y, h};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) lc_lock_free(all[i]);
    close_world(&w);
    if (started) {
        bg_join(&low);
        bg_join(&high);
    }
    return ok;
}

static bool s_note(void) {
    const char *note = "nightly build 42 on ci-7, \xc3\xbc" "n\xc3\xaf" "code";
    char line[2048], want[2048];
    world w;
    lc_acquire_options o;
    lc_acquire_options_init(&o);
    o.note = note;
    lc_lock_t *l = NULL;
    uint64_t t[2];
    bool ok = open_world(&w, "note", 1, "c-note") && acquire(w.s[0], w.k, &o, &l) &&
              holders(w.manager, w.k, t, 2, line, sizeof line) == 1;
    if (ok) {
        snprintf(want, sizeof want, "%" PRIu64 " %" PRIu64 " %s\n", lc_lock_token(l), lc_session_id(w.s[0]), note);
        if (strcmp(line, want) != 0) ok = failf("probe holders: %s, want %s", line, want);
    }
    lc_lock_free(l);
    close_world(&w);
    return ok;
}

static bool s_big_token(void) {
    const char *addr = env("LC_BIG_ADDR");
    if (addr == NULL) return false;
    char k[128];
    key(k, "big");
    lc_session *s;
    if (!connect_as(&s, addr, "c-big", 0)) return false;
    lc_lock_t *l = NULL;
    bool ok = acquire(s, k, NULL, &l);
    if (ok && lc_lock_token(l) <= (uint64_t)1 << 63) ok = failf("token %" PRIu64 " is not above 2^63", lc_lock_token(l));
    lc_holder hs[2];
    size_t n = 0;
    ok = ok && check(lc_describe(s, k, strlen(k), hs, 2, &n, NULL), LC_OK, "describe");
    if (ok && (n != 1 || hs[0].token != lc_lock_token(l))) ok = failf("describe shows %zu holders", n);
    const char *manager = getenv("LC_BIG_MANAGER");
    if (ok && manager != NULL && *manager != '\0') ok = expect_held(manager, k, lc_lock_token(l));
    if (ok) logf_("token %" PRIu64 " (2^63 + %" PRIu64 ")", lc_lock_token(l), lc_lock_token(l) - ((uint64_t)1 << 63));
    lc_lock_free(l);
    lc_session_close(s);
    return ok;
}

static bool s_silent_server(void) {
    const char *addr = env("LC_SILENT_ADDR");
    if (addr == NULL) return false;
    lc_session_options o;
    lc_session_options_init(&o);
    o.name = "c-silent";
    o.read_timeout_ms = 3000;
    lc_session *s = NULL;
    int64_t start = now_ms();
    lc_status st = lc_session_connect(&s, addr, &o);
    int64_t took = now_ms() - start;
    lc_session_close(s);
    if (!check(st, LC_ERR_READ_TIMEOUT, "connect to a silent server")) return false;
    if (took > 10000) return failf("the timeout took %" PRId64 " ms", took);
    return true;
}

static bool s_fifo_mixed(void) {
    const char *probe = env("LC_PROBE");
    world w;
    bool ok = probe != NULL && open_world(&w, "fifo-mixed", 4, "c-f0", "c-f1", "c-f2", "c-f3");
    lc_session *h = w.s[0], **mine = w.s + 1;
    const char *addr = w.addr, *manager = w.manager, *k = w.k;
    lc_lock_t *held = NULL;
    ok = ok && acquire(h, k, NULL, &held);
    bg ws[3];
    child probes[2];
    int n_ws = 0, n_probes = 0;
    uint64_t tokens[5] = {0};
    for (int i = 0; ok && i < 5; i++) {
        if (i % 2 == 0) {
            bg_start(&ws[n_ws], mine[i / 2], k, NULL, true);
            n_ws++;
        } else {
            char *argv[] = {(char *)probe, "session-lock", (char *)addr, (char *)k, NULL};
            if (!child_start(&probes[n_probes], argv)) ok = failf("cannot start probe session-lock");
            else n_probes++;
        }
        ok = ok && waiters(manager, k, i + 1);
    }
    ok = ok && check(lc_lock_release(held), LC_OK, "release");
    for (int i = 0; ok && i < n_probes; i++) {
        char line[128];
        if (!child_line(&probes[i], line, sizeof line, 15000) || strncmp(line, "granted ", 8) != 0) {
            ok = failf("probe session-lock said %s", line);
            break;
        }
        tokens[2 * i + 1] = strtoull(line + 8, NULL, 10);
        child_close_input(&probes[i]);
    }
    for (int i = 0; ok && i < n_ws; i++) {
        if (!bg_wait(&ws[i], 10000)) ok = failf("a C waiter was not granted");
        ok = ok && check(ws[i].st, LC_OK, "a C waiter");
        tokens[2 * i] = ws[i].token;
    }
    for (int i = 1; ok && i < 5; i++)
        if (tokens[i] <= tokens[i - 1]) ok = failf("waiter %d was granted before waiter %d", i, i - 1);
    for (int i = 0; i < n_probes; i++) child_wait(&probes[i], 10000);
    lc_lock_free(held);
    close_world(&w);
    for (int i = 0; i < n_ws; i++) bg_join(&ws[i]);
    return ok;
}

static const struct {
    const char *id;
    bool (*fn)(void);
} scenarios[] = {
#define LC_ENTRY(id, fn) {id, fn},
    LC_SESSION_SCENARIOS(LC_ENTRY)
#undef LC_ENTRY
};

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "hold") == 0) return hold_main(argc, argv);
    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGPIPE, SIG_IGN);
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) snprintf(self, sizeof self, "%s", argv[0]);
    srand((unsigned)(time(NULL) ^ getpid()));
    snprintf(run_id, sizeof run_id, "%06x", (unsigned)rand() & 0xffffff);
    int status = 0;
    size_t count = sizeof scenarios / sizeof scenarios[0];
    for (int a = 1; a < argc; a++) {
        bool known = false;
        for (size_t i = 0; i < count; i++) known |= strcmp(argv[a], scenarios[i].id) == 0;
        if (!known) {
            fprintf(stderr, "session_scenario: unknown scenario %s\n", argv[a]);
            return 2;
        }
    }
    for (size_t i = 0; i < count; i++) {
        bool chosen = argc == 1;
        for (int a = 1; a < argc; a++) chosen |= strcmp(argv[a], scenarios[i].id) == 0;
        if (!chosen) continue;
        fprintf(stderr, "== %s\n", scenarios[i].id);
        int64_t start = now_ms();
        reason[0] = '\0';
        if (scenarios[i].fn()) {
            printf("ok %s\n", scenarios[i].id);
        } else {
            for (char *p = reason; *p; p++)
                if (*p == '\n') *p = ' ';
            printf("FAIL %s: %s\n", scenarios[i].id, reason[0] ? reason : "failed");
            status = 1;
        }
        logf_("%.2f s", (double)(now_ms() - start) / 1000);
    }
    return status;
}
