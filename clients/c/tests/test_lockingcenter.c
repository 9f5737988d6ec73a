/*
 * Unit tests of the C client: the encoder and the answer table against
 * clients/testdata/vectors.json, byte for byte, and the network path
 * against a scripted server on 127.0.0.1.
 *
 * Usage: test_lockingcenter [path/to/vectors.json]
 */
#define _POSIX_C_SOURCE 200809L

#include "lockingcenter.h"
#include "check.h"
#include "json.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

/* ---- vectors ---------------------------------------------------------- */

static json_value vectors;

typedef struct bytes {
    unsigned char b[512];
    size_t n;
} bytes;

/* hex_field decodes the hex string member name of v; absent means empty. */
static bool hex_field(const json_value *v, const char *name, bytes *out) {
    out->n = 0;
    const json_value *s = json_get(v, name);
    return s == NULL || unhex(s, out->b, sizeof out->b, &out->n);
}

static const json_value *list(const char *name) {
    const json_value *v = json_get(&vectors, name);
    return v != NULL && v->type == JSON_ARRAY ? v : NULL;
}

/* action_of maps an action name of the vector file to its byte, from the
 * file's own "actions" table. */
static int action_of(const char *name) {
    const json_value *v = json_get(json_get(&vectors, "actions"), name);
    return v != NULL && v->type == JSON_NUMBER ? (int)v->number : -1;
}

static const char *string_field(const json_value *v, const char *name) {
    const json_value *s = json_get(v, name);
    return s != NULL && s->type == JSON_STRING ? s->string : "";
}

static bool load_vectors(const char *path) { return load_json(path, &vectors); }

/* ---- a scripted server ------------------------------------------------- */

enum reply { REPLY_ANSWER, REPLY_HANG, REPLY_CLOSE };

typedef struct fake {
    int listener;
    char addr[64];
    int conns;           /* connections to serve, one request each */
    enum reply reply[4]; /* per connection */
    unsigned char answer;
    bool gated;          /* answers wait until fake_open */
    bool open;           /* guarded by mu */
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cond;
    bytes got[4];        /* requests received, in order */
    int requests;        /* complete requests received */
    bool eof_after_hang; /* REPLY_HANG: the peer closed while unanswered */
} fake;

static int listen_loopback(char *addr, size_t addr_size) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof sa;
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(fd, 8) < 0 ||
        getsockname(fd, (struct sockaddr *)&sa, &len) < 0) {
        perror("listen");
        exit(2);
    }
    snprintf(addr, addr_size, "127.0.0.1:%d", ntohs(sa.sin_port));
    return fd;
}

/* request_len returns the length of the complete request at the start of
 * b[0..n), or 0 while more bytes are needed. */
static size_t request_len(const unsigned char *b, size_t n) {
    if (n < 1) return 0;
    bool key = b[0] != LC_ACTION_RESET_SOURCE;
    bool source = b[0] == LC_ACTION_LOCK || b[0] == LC_ACTION_TRYLOCK || b[0] == LC_ACTION_RESET_SOURCE;
    size_t at = 1;
    if (key) {
        if (n < at + 1 || n < at + 1 + b[at]) return 0;
        at += 1 + b[at];
    }
    if (source) {
        if (n < at + 1 || n < at + 1 + b[at]) return 0;
        at += 1 + b[at];
    }
    return at;
}

static void *fake_serve(void *arg) {
    fake *f = arg;
    for (int i = 0; i < f->conns; i++) {
        int c = accept(f->listener, NULL, NULL);
        if (c < 0) return NULL;
        /* A client that sends too little or never closes fails its test
         * instead of hanging it. */
        struct timeval limit = {.tv_sec = 10};
        setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
        bytes *b = &f->got[i];
        while (request_len(b->b, b->n) == 0) {
            ssize_t r = recv(c, b->b + b->n, sizeof b->b - b->n, 0);
            if (r <= 0) break;
            b->n += (size_t)r;
        }
        pthread_mutex_lock(&f->mu);
        f->requests++;
        pthread_cond_broadcast(&f->cond);
        pthread_mutex_unlock(&f->mu);
        if (f->reply[i] == REPLY_ANSWER) {
            pthread_mutex_lock(&f->mu);
            while (f->gated && !f->open) pthread_cond_wait(&f->cond, &f->mu);
            pthread_mutex_unlock(&f->mu);
            ssize_t w = send(c, &f->answer, 1, 0);
            (void)w;
        } else if (f->reply[i] == REPLY_HANG) {
            unsigned char x;
            ssize_t r = recv(c, &x, 1, 0);
            bool eof = r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
            pthread_mutex_lock(&f->mu);
            f->eof_after_hang = eof;
            pthread_mutex_unlock(&f->mu);
        }
        close(c);
    }
    return NULL;
}

/* fake_start_each serves conns connections (at most 4), the i-th as
 * reply[i] says; with gated, answers wait until fake_open. */
static void fake_start_each(fake *f, int conns, const enum reply *reply, unsigned char answer, bool gated) {
    memset(f, 0, sizeof *f);
    f->listener = listen_loopback(f->addr, sizeof f->addr);
    f->conns = conns;
    for (int i = 0; i < conns; i++) f->reply[i] = reply[i];
    f->answer = answer;
    f->gated = gated;
    pthread_mutex_init(&f->mu, NULL);
    pthread_cond_init(&f->cond, NULL);
    pthread_create(&f->thread, NULL, fake_serve, f);
}

static void fake_start(fake *f, int conns, enum reply reply, unsigned char answer) {
    enum reply each[4] = {reply, reply, reply, reply};
    fake_start_each(f, conns, each, answer, false);
}

/* fake_open lets a gated server answer. */
static void fake_open(fake *f) {
    pthread_mutex_lock(&f->mu);
    f->open = true;
    pthread_cond_broadcast(&f->cond);
    pthread_mutex_unlock(&f->mu);
}

/* fake_wait_requests blocks until n complete requests have arrived. */
static void fake_wait_requests(fake *f, int n) {
    pthread_mutex_lock(&f->mu);
    while (f->requests < n) pthread_cond_wait(&f->cond, &f->mu);
    pthread_mutex_unlock(&f->mu);
}

/* fake_stop joins the server. Connections not yet made are refused, so a
 * client that never connected cannot hang the test. */
static void fake_stop(fake *f) {
    shutdown(f->listener, SHUT_RDWR);
    pthread_join(f->thread, NULL);
    close(f->listener);
    pthread_mutex_destroy(&f->mu);
    pthread_cond_destroy(&f->cond);
}

/* silent_listener listens on 127.0.0.1, never accepting, and points c at
 * it with the given source: nothing_pending then tells whether a call
 * connected. */
static int silent_listener(lc_client *c, const char *source) {
    char addr[64];
    int listener = listen_loopback(addr, sizeof addr);
    if (lc_client_init(c, addr, source, source != NULL ? strlen(source) : 0) != LC_OK) exit(2);
    return listener;
}

/* nothing_pending reports whether no connection reached the listener, and
 * closes it. */
static bool nothing_pending(int listener) {
    fcntl(listener, F_SETFL, fcntl(listener, F_GETFL) | O_NONBLOCK);
    int c = accept(listener, NULL, NULL);
    bool none = c < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
    if (c >= 0) close(c);
    close(listener);
    return none;
}

static bool same(const bytes *a, const unsigned char *b, size_t n) {
    return a->n == n && memcmp(a->b, b, n) == 0;
}

/* perform runs the client call for action; for trylock *acquired is set. */
static lc_status perform(const lc_client *c, int action, const bytes *key, const bytes *source, bool *acquired) {
    *acquired = false;
    switch (action) {
    case LC_ACTION_LOCK:
        return lc_lock(c, key->b, key->n);
    case LC_ACTION_UNLOCK:
        return lc_unlock(c, key->b, key->n);
    case LC_ACTION_RESET_KEY:
        return lc_reset_by_key(c, key->b, key->n);
    case LC_ACTION_RESET_SOURCE:
        return lc_reset_by_source(c, source->b, source->n);
    case LC_ACTION_TRYLOCK:
        return lc_trylock(c, key->b, key->n, acquired);
    }
    return LC_ERR_INVALID_ARGUMENT;
}

/* ---- tests ------------------------------------------------------------- */

static bool test_encoder_matches_vectors(void) {
    const json_value *reqs = list("requests");
    CHECK(reqs != NULL && reqs->len > 0, "no requests in the vector file");
    bool seen[6] = {false};
    for (size_t i = 0; i < reqs->len; i++) {
        const json_value *v = &reqs->items[i];
        const char *name = string_field(v, "name");
        bytes key, source, want;
        CHECK(hex_field(v, "key_hex", &key) && hex_field(v, "source_hex", &source) &&
                  hex_field(v, "request_hex", &want),
              "%s: bad hex", name);
        int action = action_of(string_field(v, "action"));
        const json_value *ab = json_get(v, "action_byte");
        CHECK(action > 0 && action <= 5, "%s: unknown action", name);
        CHECK(ab != NULL && (int)ab->number == action, "%s: action_byte disagrees with actions", name);
        unsigned char out[LC_MAX_REQUEST_LEN];
        size_t n = 0;
        lc_status st = lc_encode_request((lc_action)action, key.b, key.n, source.b, source.n, out, &n);
        CHECK(st == LC_OK, "%s: encode: %s", name, lc_strerror(st));
        CHECK(same(&want, out, n), "%s: encoded bytes differ", name);
        seen[action] = true;
    }
    for (int a = 1; a <= 5; a++) CHECK(seen[a], "no vector for action %d", a);
    return true;
}

static bool test_answers_match_vectors(void) {
    const json_value *answers = list("answers");
    CHECK(answers != NULL && answers->len > 0, "no answers in the vector file");
    for (size_t i = 0; i < answers->len; i++) {
        const json_value *v = &answers->items[i];
        int action = action_of(string_field(v, "action"));
        const char *result = string_field(v, "result");
        bytes answer;
        CHECK(hex_field(v, "answer_hex", &answer) && answer.n == 1, "answer %zu: bad answer_hex", i);
        bool busy = true;
        lc_status st = lc_decode_answer((lc_action)action, answer.b[0], &busy);
        const char *got = st != LC_OK ? "failed" : busy ? "busy" : "ok";
        CHECK(strcmp(got, result) == 0, "action %d answer %02x: got %s, want %s", action, answer.b[0], got, result);
    }
    return true;
}

/* Every request vector goes through the client to a server, which must
 * receive exactly its bytes. */
static bool test_client_sends_vector_bytes(void) {
    const json_value *reqs = list("requests");
    CHECK(reqs != NULL, "no requests");
    for (size_t i = 0; i < reqs->len; i++) {
        const json_value *v = &reqs->items[i];
        const char *name = string_field(v, "name");
        bytes key, source, want;
        hex_field(v, "key_hex", &key);
        hex_field(v, "source_hex", &source);
        hex_field(v, "request_hex", &want);
        int action = action_of(string_field(v, "action"));
        fake f;
        fake_start(&f, 1, REPLY_ANSWER, LC_ANSWER_OK);
        lc_client c;
        lc_status st = lc_client_init(&c, f.addr, source.b, source.n);
        bool acquired;
        if (st == LC_OK) st = perform(&c, action, &key, &source, &acquired);
        fake_stop(&f);
        CHECK(st == LC_OK, "%s: %s", name, lc_strerror(st));
        CHECK(same(&f.got[0], want.b, want.n), "%s: server received other bytes", name);
        CHECK(action != LC_ACTION_TRYLOCK || acquired, "%s: trylock '+' not acquired", name);
    }
    return true;
}

/* Every answer vector, delivered by a server, gives its result. */
static bool test_client_maps_answers(void) {
    const json_value *answers = list("answers");
    CHECK(answers != NULL, "no answers");
    bytes key = {.b = "k", .n = 1}, source = {.n = 0};
    for (size_t i = 0; i < answers->len; i++) {
        const json_value *v = &answers->items[i];
        int action = action_of(string_field(v, "action"));
        const char *result = string_field(v, "result");
        bytes answer;
        hex_field(v, "answer_hex", &answer);
        fake f;
        fake_start(&f, 1, REPLY_ANSWER, answer.b[0]);
        lc_client c;
        lc_client_init(&c, f.addr, NULL, 0);
        bool acquired;
        lc_status st = perform(&c, action, &key, &source, &acquired);
        fake_stop(&f);
        const char *got = st != LC_OK ? "failed" : (action == LC_ACTION_TRYLOCK && !acquired) ? "busy" : "ok";
        CHECK(strcmp(got, result) == 0, "action %d answer %02x: got %s (%s), want %s", action, answer.b[0], got,
              lc_strerror(st), result);
        if (answer.b[0] == LC_ANSWER_FAILED) CHECK(st == LC_ERR_FAILED, "'-' gave %s", lc_strerror(st));
    }
    return true;
}

static bool test_invalid_keys_are_never_sent(void) {
    const json_value *keys = list("invalid_keys");
    CHECK(keys != NULL && keys->len > 0, "no invalid keys in the vector file");
    lc_client c;
    int listener = silent_listener(&c, "src");
    lc_cancel cancel;
    lc_cancel_init(&cancel);
    for (size_t i = 0; i < keys->len; i++) {
        const json_value *v = &keys->items[i];
        const char *name = string_field(v, "name");
        bytes key;
        CHECK(hex_field(v, "key_hex", &key), "%s: bad hex", name);
        bool acquired = true;
        lc_status got[] = {
            lc_lock(&c, key.b, key.n),
            lc_lock_cancellable(&c, key.b, key.n, &cancel, 1000),
            lc_trylock(&c, key.b, key.n, &acquired),
            lc_unlock(&c, key.b, key.n),
            lc_wait(&c, key.b, key.n),
            lc_reset_by_key(&c, key.b, key.n),
        };
        for (size_t j = 0; j < sizeof got / sizeof got[0]; j++) {
            CHECK(got[j] == LC_ERR_INVALID_KEY, "%s: call %zu gave %s", name, j, lc_strerror(got[j]));
        }
        CHECK(!acquired, "%s: trylock reported acquired", name);
        unsigned char out[LC_MAX_REQUEST_LEN];
        size_t n;
        CHECK(lc_encode_request(LC_ACTION_LOCK, key.b, key.n, NULL, 0, out, &n) == LC_ERR_INVALID_KEY,
              "%s: encoded", name);
    }
    lc_cancel_destroy(&cancel);
    CHECK(nothing_pending(listener), "a connection reached the server");
    return true;
}

static bool test_invalid_sources_are_never_sent(void) {
    const json_value *sources = list("invalid_sources");
    CHECK(sources != NULL && sources->len > 0, "no invalid sources in the vector file");
    lc_client c;
    int listener = silent_listener(&c, NULL);
    for (size_t i = 0; i < sources->len; i++) {
        const json_value *v = &sources->items[i];
        const char *name = string_field(v, "name");
        bytes source;
        CHECK(hex_field(v, "source_hex", &source), "%s: bad hex", name);
        lc_client other;
        CHECK(lc_client_init(&other, "127.0.0.1:1", source.b, source.n) == LC_ERR_INVALID_SOURCE, "%s: init", name);
        lc_status st = lc_reset_by_source(&c, source.b, source.n);
        CHECK(st == LC_ERR_INVALID_SOURCE, "%s: reset by source gave %s", name, lc_strerror(st));
        unsigned char out[LC_MAX_REQUEST_LEN];
        size_t n;
        st = lc_encode_request(LC_ACTION_TRYLOCK, "k", 1, source.b, source.n, out, &n);
        CHECK(st == LC_ERR_INVALID_SOURCE, "%s: encode gave %s", name, lc_strerror(st));
    }
    CHECK(nothing_pending(listener), "a connection reached the server");
    return true;
}

typedef struct lock_job {
    lc_client *client;
    lc_cancel *cancel;
    int timeout_ms;
    lc_status result;
} lock_job;

static void *run_lock(void *arg) {
    lock_job *j = arg;
    j->result = lc_lock_cancellable(j->client, "k", 1, j->cancel, j->timeout_ms);
    return NULL;
}

static bool test_cancel_closes_connection(void) {
    fake f;
    fake_start(&f, 1, REPLY_HANG, 0);
    lc_client c;
    lc_client_init(&c, f.addr, NULL, 0);
    lc_cancel cancel;
    CHECK(lc_cancel_init(&cancel) == LC_OK, "cancel init");
    lock_job job = {.client = &c, .cancel = &cancel, .timeout_ms = -1};
    pthread_t t;
    pthread_create(&t, NULL, run_lock, &job);
    fake_wait_requests(&f, 1);
    lc_cancel_fire(&cancel);
    lc_cancel_fire(&cancel);
    pthread_join(t, NULL);
    fake_stop(&f);
    CHECK(job.result == LC_ERR_CANCELLED, "lock gave %s", lc_strerror(job.result));
    CHECK(f.eof_after_hang, "server did not see the connection close");
    /* A fired handle stays fired and stops a call before it connects. */
    int listener = silent_listener(&c, NULL);
    lc_status st = lc_wait_cancellable(&c, "k", 1, &cancel, -1);
    lc_cancel_destroy(&cancel);
    CHECK(nothing_pending(listener), "a cancelled call connected");
    CHECK(st == LC_ERR_CANCELLED, "second call gave %s", lc_strerror(st));
    return true;
}

static bool test_deadline_closes_connection(void) {
    fake f;
    fake_start(&f, 1, REPLY_HANG, 0);
    lc_client c;
    lc_client_init(&c, f.addr, NULL, 0);
    lock_job job = {.client = &c, .timeout_ms = 50};
    run_lock(&job);
    fake_stop(&f);
    CHECK(job.result == LC_ERR_TIMEOUT, "lock gave %s", lc_strerror(job.result));
    CHECK(f.eof_after_hang, "server did not see the connection close");
    return true;
}

static bool test_wait_locks_then_unlocks(void) {
    fake f;
    fake_start(&f, 2, REPLY_ANSWER, LC_ANSWER_OK);
    lc_client c;
    lc_client_init(&c, f.addr, "s", 1);
    lc_status st = lc_wait(&c, "key", 3);
    fake_stop(&f);
    CHECK(st == LC_OK, "wait gave %s", lc_strerror(st));
    CHECK(same(&f.got[0], (const unsigned char *)"\x01\x03key\x01s", 7), "first request is not lock");
    CHECK(same(&f.got[1], (const unsigned char *)"\x02\x03key", 5), "second request is not unlock");
    return true;
}

static bool test_closed_without_answer(void) {
    fake f;
    fake_start(&f, 1, REPLY_CLOSE, 0);
    lc_client c;
    lc_client_init(&c, f.addr, NULL, 0);
    bool acquired = true;
    lc_status st = lc_trylock(&c, "k", 1, &acquired);
    fake_stop(&f);
    CHECK(st == LC_ERR_CLOSED, "trylock gave %s", lc_strerror(st));
    CHECK(!acquired, "trylock reported acquired");
    return true;
}

static bool test_read_timeout_ends_calls_that_do_not_wait(void) {
    struct {
        const char *name;
        int action;
    } calls[] = {
        {"trylock", LC_ACTION_TRYLOCK},
        {"unlock", LC_ACTION_UNLOCK},
        {"reset by key", LC_ACTION_RESET_KEY},
        {"reset by source", LC_ACTION_RESET_SOURCE},
    };
    bytes k = {.b = {'k'}, .n = 1}, src = {.b = {'s'}, .n = 1};
    for (size_t i = 0; i < sizeof calls / sizeof calls[0]; i++) {
        /* The server gives up after 10 s and closes: without a read
         * timeout the call fails with LC_ERR_CLOSED instead. */
        fake f;
        fake_start(&f, 1, REPLY_HANG, 0);
        lc_client c;
        lc_client_init(&c, f.addr, NULL, 0);
        c.read_timeout_ms = 50;
        bool acquired = true;
        lc_status st = perform(&c, calls[i].action, &k, &src, &acquired);
        fake_stop(&f);
        CHECK(st == LC_ERR_READ_TIMEOUT, "%s gave %s", calls[i].name, lc_strerror(st));
        CHECK(!acquired, "%s reported acquired", calls[i].name);
        CHECK(f.eof_after_hang, "%s: server did not see the connection close", calls[i].name);
    }
    return true;
}

static bool test_read_timeout_ends_the_release_of_wait(void) {
    /* The lock is granted at once; the unlock after it is never answered. */
    enum reply replies[2] = {REPLY_ANSWER, REPLY_HANG};
    fake f;
    fake_start_each(&f, 2, replies, LC_ANSWER_OK, false);
    lc_client c;
    lc_client_init(&c, f.addr, NULL, 0);
    c.read_timeout_ms = 50;
    lc_status st = lc_wait(&c, "k", 1);
    fake_stop(&f);
    CHECK(st == LC_ERR_READ_TIMEOUT, "wait gave %s", lc_strerror(st));
    CHECK(f.requests == 2 && f.got[1].b[0] == LC_ACTION_UNLOCK, "the unlock never arrived");
    return true;
}

static bool test_lock_has_no_read_timeout(void) {
    enum reply replies[1] = {REPLY_ANSWER};
    fake f;
    fake_start_each(&f, 1, replies, LC_ANSWER_OK, true);
    lc_client c;
    lc_client_init(&c, f.addr, NULL, 0);
    c.read_timeout_ms = 10;
    lock_job job = {.client = &c, .timeout_ms = -1};
    pthread_t t;
    pthread_create(&t, NULL, run_lock, &job);
    fake_wait_requests(&f, 1);
    /* Fifty read timeouts pass before the grant. */
    struct timespec pause = {.tv_nsec = 500 * 1000 * 1000};
    nanosleep(&pause, NULL);
    fake_open(&f);
    pthread_join(t, NULL);
    fake_stop(&f);
    CHECK(job.result == LC_OK, "lock gave %s", lc_strerror(job.result));
    return true;
}

static bool test_refused_connection_is_a_failure(void) {
    char addr[64];
    close(listen_loopback(addr, sizeof addr)); /* the port is now closed */
    lc_client c;
    lc_client_init(&c, addr, NULL, 0);
    bool acquired = true;
    lc_status st = lc_trylock(&c, "k", 1, &acquired);
    CHECK(st == LC_ERR_CONNECT, "trylock gave %s", lc_strerror(st));
    CHECK(errno == ECONNREFUSED, "errno %d", errno);
    CHECK(!acquired, "trylock reported acquired");
    return true;
}

static bool test_addresses(void) {
    struct {
        const char *addr;
        lc_status want;
        const char *host, *port;
    } cases[] = {
        {"localhost:22119", LC_OK, "localhost", "22119"},
        {"127.0.0.1:1", LC_OK, "127.0.0.1", "1"},
        {"[::1]:22119", LC_OK, "::1", "22119"},
        {":22119", LC_OK, "", "22119"},
        {"localhost", LC_ERR_INVALID_ADDRESS, NULL, NULL},
        {"localhost:", LC_ERR_INVALID_ADDRESS, NULL, NULL},
        {"localhost:0", LC_ERR_INVALID_ADDRESS, NULL, NULL},
        {"localhost:65536", LC_ERR_INVALID_ADDRESS, NULL, NULL},
        {"localhost:12x", LC_ERR_INVALID_ADDRESS, NULL, NULL},
        {"::1:22119", LC_ERR_INVALID_ADDRESS, NULL, NULL},
        {"[::1:22119", LC_ERR_INVALID_ADDRESS, NULL, NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        lc_client c;
        lc_status st = lc_client_init(&c, cases[i].addr, NULL, 0);
        CHECK(st == cases[i].want, "%s: got %s", cases[i].addr, lc_strerror(st));
        if (st != LC_OK) continue;
        CHECK(strcmp(c.host, cases[i].host) == 0 && strcmp(c.port, cases[i].port) == 0, "%s: parsed %s / %s",
              cases[i].addr, c.host, c.port);
        CHECK(c.connect_timeout_ms == LC_DEFAULT_CONNECT_TIMEOUT_MS, "default connect timeout");
        CHECK(c.read_timeout_ms == LC_DEFAULT_READ_TIMEOUT_MS, "default read timeout");
    }
    lc_client c;
    CHECK(lc_client_init(&c, NULL, NULL, 0) == LC_ERR_INVALID_ARGUMENT, "NULL address");
    CHECK(lc_client_init(&c, "h:1", NULL, 3) == LC_ERR_INVALID_ARGUMENT, "NULL source with a length");
    return true;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *path = argc > 1 ? argv[1] : "../testdata/vectors.json";
    if (!load_vectors(path)) {
        printf("0 passed, 1 failed\n");
        return 1;
    }
    static const test tests[] = {
        {"encoder_matches_vectors", test_encoder_matches_vectors},
        {"answers_match_vectors", test_answers_match_vectors},
        {"client_sends_vector_bytes", test_client_sends_vector_bytes},
        {"client_maps_answers", test_client_maps_answers},
        {"invalid_keys_are_never_sent", test_invalid_keys_are_never_sent},
        {"invalid_sources_are_never_sent", test_invalid_sources_are_never_sent},
        {"cancel_closes_connection", test_cancel_closes_connection},
        {"deadline_closes_connection", test_deadline_closes_connection},
        {"wait_locks_then_unlocks", test_wait_locks_then_unlocks},
        {"closed_without_answer", test_closed_without_answer},
        {"read_timeout_ends_calls_that_do_not_wait", test_read_timeout_ends_calls_that_do_not_wait},
        {"read_timeout_ends_the_release_of_wait", test_read_timeout_ends_the_release_of_wait},
        {"lock_has_no_read_timeout", test_lock_has_no_read_timeout},
        {"refused_connection_is_a_failure", test_refused_connection_is_a_failure},
        {"addresses", test_addresses},
    };
    int status = run_tests(tests, sizeof tests / sizeof tests[0]);
    json_free(&vectors);
    return status;
}
