/*
 * Unit tests of the session client: the frame codec against
 * clients/testdata/session-vectors.json, byte for byte both ways; random
 * and mutated frames, which must parse or give the protocol error and
 * nothing else; and the handshake against scripted servers on 127.0.0.1
 * (a silent server, a node that names the leader, a v1-only port).
 *
 * Usage: test_session [path/to/session-vectors.json]
 */
#define _POSIX_C_SOURCE 200809L

#include "frame.h"
#include "check.h"
#include "json.h"
#include "lc_session.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static json_value vectors;

typedef struct bytes {
    uint8_t b[8192];
    size_t n;
} bytes;

/* hex decodes the hex string s into out. */
static bool hex(const json_value *s, bytes *out) { return unhex(s, out->b, sizeof out->b, &out->n); }

static bool load_vectors(const char *path) { return load_json(path, &vectors); }

static const json_value *frames(void) {
    const json_value *v = json_get(&vectors, "frames");
    return v != NULL && v->type == JSON_ARRAY ? v : NULL;
}

/* ---- the codec -------------------------------------------------------- */

static bool test_preface(void) {
    bytes p;
    CHECK(hex(json_get(&vectors, "preface_hex"), &p), "no preface_hex");
    CHECK(p.n == 4 && memcmp(p.b, LC_PREFACE, 4) == 0, "the preface is not LC/2");
    return true;
}

static bool test_encoder_matches_vectors(void) {
    const json_value *fs = frames();
    CHECK(fs != NULL && fs->len > 0, "no frames in the vectors");
    for (size_t i = 0; i < fs->len; i++) {
        const json_value *v = &fs->items[i];
        const char *name = json_get(v, "name")->string;
        const json_value *fields = json_get(v, "fields");
        bytes want, val;
        CHECK(hex(json_get(v, "frame_hex"), &want), "%s: frame_hex", name);
        lc_buf b = {0};
        size_t start;
        lc_frame_begin(&b, (uint8_t)json_get(v, "type")->number, (uint64_t)json_get(v, "id")->number, &start);
        for (size_t j = 0; j < fields->len; j++) {
            CHECK(hex(json_get(&fields->items[j], "value_hex"), &val), "%s: value_hex", name);
            lc_put_bytes(&b, (uint8_t)json_get(&fields->items[j], "tag")->number, val.b, val.n);
        }
        lc_frame_end(&b, start);
        bool same = b.n == want.n && memcmp(b.b, want.b, want.n) == 0;
        lc_buf_free(&b);
        CHECK(same, "%s: the encoded bytes differ from frame_hex", name);
    }
    return true;
}

static bool test_decoder_matches_vectors(void) {
    const json_value *fs = frames();
    for (size_t i = 0; i < fs->len; i++) {
        const json_value *v = &fs->items[i];
        const char *name = json_get(v, "name")->string;
        const json_value *fields = json_get(v, "fields");
        bytes in, val;
        hex(json_get(v, "frame_hex"), &in);
        lc_frame f = {0};
        const char *why = NULL;
        long used = lc_frame_parse(in.b, in.n, &f, &why);
        bool ok = used == (long)in.n && f.type == (uint8_t)json_get(v, "type")->number &&
                  f.id == (uint64_t)json_get(v, "id")->number && f.n == fields->len;
        for (size_t j = 0; ok && j < fields->len; j++) {
            hex(json_get(&fields->items[j], "value_hex"), &val);
            ok = f.fields[j].tag == (uint8_t)json_get(&fields->items[j], "tag")->number && f.fields[j].len == val.n &&
                 memcmp(f.fields[j].value, val.b, val.n) == 0;
        }
        /* Every prefix is a frame cut short: more bytes needed, no error. */
        for (size_t cut = 0; ok && cut < in.n; cut++) ok = lc_frame_parse(in.b, cut, &f, &why) == 0;
        lc_frame_free(&f);
        CHECK(ok, "%s: decoded fields differ (%s)", name, why ? why : "");
    }
    return true;
}

static bool test_codes_match_vectors(void) {
    const json_value *codes = json_get(&vectors, "codes");
    CHECK(codes != NULL && codes->type == JSON_OBJECT, "no codes");
    for (size_t i = 0; i < codes->len; i++)
        CHECK(strcmp(lc_code_name((uint64_t)codes->items[i].number), codes->keys[i]) == 0, "code %s is named %s",
              codes->keys[i], lc_code_name((uint64_t)codes->items[i].number));
    return true;
}

static bool test_malformed_frames_are_protocol_errors(void) {
    static const struct {
        const char *name;
        uint8_t b[32];
        size_t n;
    } bad[] = {
        {"length under 9", {0, 0, 0, 8, 0x83, 0, 0, 0, 0, 0, 0, 0}, 12},
        {"length over the limit", {0, 1, 0, 1}, 4},
        {"field past the frame", {0, 0, 0, 12, 0x83, 0, 0, 0, 0, 0, 0, 0, 1, 0x0E, 0, 9}, 16},
        {"fixed-size field of another size", {0, 0, 0, 13, 0x83, 0, 0, 0, 0, 0, 0, 0, 1, 0x11, 0, 1, 5}, 17},
        {"a tag given twice", {0, 0, 0, 17, 0x83, 0, 0, 0, 0, 0, 0, 0, 1, 0x0E, 0, 1, 'a', 0x0E, 0, 1, 'b'}, 21},
        {"a list item that does not parse", {0, 0, 0, 13, 0x86, 0, 0, 0, 0, 0, 0, 0, 1, 0x22, 0, 1, 7}, 17},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        lc_frame f = {0};
        const char *why = NULL;
        long r = lc_frame_parse(bad[i].b, bad[i].n, &f, &why);
        lc_frame_free(&f);
        CHECK(r == -1 && why != NULL, "%s: parse gave %ld, want the protocol error", bad[i].name, r);
    }
    return true;
}

/* fuzz_one parses b: used must be 0 (cut short), -1 (protocol error) or a
 * length within b whose fields lie inside it. */
static bool fuzz_one(const uint8_t *b, size_t n) {
    lc_frame f = {0};
    const char *why = NULL;
    long r = lc_frame_parse(b, n, &f, &why);
    bool ok = r == 0 || (r == -1 && why != NULL) || (r >= 13 && (size_t)r <= n);
    for (size_t i = 0; ok && r > 0 && i < f.n; i++)
        ok = f.fields[i].value >= b + 13 && f.fields[i].value + f.fields[i].len <= b + r;
    lc_frame_free(&f);
    return ok;
}

static bool test_random_and_mutated_frames(void) {
    srand(7);
    static uint8_t b[70000];
    for (int round = 0; round < 20000; round++) {
        size_t n = 4 + (size_t)rand() % 200;
        for (size_t i = 0; i < n; i++) b[i] = (uint8_t)rand();
        if (round % 2 == 0) { /* a plausible length, so that the fields get parsed */
            uint32_t len = (uint32_t)(n - 4);
            b[0] = (uint8_t)(len >> 24), b[1] = (uint8_t)(len >> 16), b[2] = (uint8_t)(len >> 8), b[3] = (uint8_t)len;
        }
        CHECK(fuzz_one(b, n), "random frame %d", round);
    }
    const json_value *fs = frames();
    for (size_t i = 0; i < fs->len; i++) {
        bytes in;
        hex(json_get(&fs->items[i], "frame_hex"), &in);
        for (size_t at = 0; at < in.n; at++)
            for (int bit = 0; bit < 8; bit++) {
                memcpy(b, in.b, in.n);
                b[at] ^= (uint8_t)(1u << bit);
                CHECK(fuzz_one(b, in.n), "frame %zu with byte %zu bit %d flipped", i, at, bit);
            }
    }
    return true;
}

/* ---- scripted servers ------------------------------------------------- */

typedef struct script {
    int listener;
    char addr[64];
    bytes reply; /* written after the first frame; nothing when empty */
    bool close_after;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cond;
    int acquires; /* ACQUIRE frames read after the first frame, guarded by mu */
} script;

static void *serve(void *arg) {
    script *sc = arg;
    int fd = accept(sc->listener, NULL, NULL);
    if (fd < 0) return NULL;
    uint8_t buf[4096];
    size_t have = 0;
    for (;;) { /* the preface and one frame */
        ssize_t n = read(fd, buf + have, sizeof buf - have);
        if (n <= 0) break;
        have += (size_t)n;
        if (have >= 8 && have >= 8 + (size_t)(buf[4] << 24 | buf[5] << 16 | buf[6] << 8 | buf[7])) break;
    }
    if (sc->reply.n > 0 && write(fd, sc->reply.b, sc->reply.n) < 0) perror("write");
    /* Then frames until the end, the ACQUIREs counted. */
    size_t first = 8 + (size_t)(buf[4] << 24 | buf[5] << 16 | buf[6] << 8 | buf[7]);
    memmove(buf, buf + first, have - first);
    have -= first;
    while (!sc->close_after) {
        while (have >= 5 && have >= 4 + (size_t)(buf[0] << 24 | buf[1] << 16 | buf[2] << 8 | buf[3])) {
            size_t n = 4 + (size_t)(buf[0] << 24 | buf[1] << 16 | buf[2] << 8 | buf[3]);
            pthread_mutex_lock(&sc->mu);
            sc->acquires += buf[4] == LC_F_ACQUIRE;
            pthread_cond_broadcast(&sc->cond);
            pthread_mutex_unlock(&sc->mu);
            memmove(buf, buf + n, have - n);
            have -= n;
        }
        ssize_t n = read(fd, buf + have, sizeof buf - have);
        if (n <= 0) break;
        have += (size_t)n;
    }
    close(fd);
    return NULL;
}

/* script_await_acquire waits up to 10 s for the script to read an ACQUIRE. */
static bool script_await_acquire(script *sc) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += 10;
    pthread_mutex_lock(&sc->mu);
    while (sc->acquires == 0 && pthread_cond_timedwait(&sc->cond, &sc->mu, &ts) == 0) {
    }
    bool got = sc->acquires > 0;
    pthread_mutex_unlock(&sc->mu);
    return got;
}

static void script_start(script *sc) {
    pthread_mutex_init(&sc->mu, NULL);
    pthread_cond_init(&sc->cond, NULL);
    sc->listener = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof sa;
    if (bind(sc->listener, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(sc->listener, 4) < 0 ||
        getsockname(sc->listener, (struct sockaddr *)&sa, &len) < 0) {
        perror("listen");
        exit(2);
    }
    snprintf(sc->addr, sizeof sc->addr, "127.0.0.1:%d", ntohs(sa.sin_port));
    pthread_create(&sc->thread, NULL, serve, sc);
}

static void script_stop(script *sc) {
    shutdown(sc->listener, SHUT_RDWR);
    close(sc->listener);
    pthread_join(sc->thread, NULL);
}

static void goodbye_not_leader(bytes *out, const char *leader) {
    lc_buf b = {0};
    size_t start;
    lc_frame_begin(&b, LC_F_GOODBYE, 1, &start);
    lc_put_u8(&b, LC_T_CODE, LC_C_NOT_LEADER);
    lc_put_bytes(&b, LC_T_MESSAGE, "not the leader", 14);
    lc_put_bytes(&b, LC_T_LEADER, leader, strlen(leader));
    lc_frame_end(&b, start);
    memcpy(out->b, b.b, b.n);
    out->n = b.n;
    lc_buf_free(&b);
}

static void welcome(bytes *out) {
    lc_buf b = {0};
    size_t start;
    uint8_t secret[16] = {0xA5};
    lc_frame_begin(&b, LC_F_WELCOME, 1, &start);
    lc_put_u64(&b, LC_T_SESSION, 42);
    lc_put_bytes(&b, LC_T_SECRET, secret, sizeof secret);
    lc_put_u32(&b, LC_T_TTL, 180000); /* no ping, nor silence, within a test */
    lc_put_u32(&b, LC_T_KEEPALIVE, 60000);
    lc_put_bytes(&b, LC_T_SERVER, "fake", 4);
    lc_frame_end(&b, start);
    memcpy(out->b, b.b, b.n);
    out->n = b.n;
    lc_buf_free(&b);
}

/* A frame that came in the same read as the WELCOME is handled at once, not
 * when the next bytes arrive: here a GOODBYE that ends the session, so a
 * DESCRIBE after the connect fails with the session's end rather than
 * waiting out the read timeout for an answer the script never sends. */
static bool test_frames_after_the_welcome(void) {
    script sc = {0};
    welcome(&sc.reply);
    lc_buf b = {0};
    size_t start;
    lc_frame_begin(&b, LC_F_GOODBYE, 0, &start);
    lc_put_u8(&b, LC_T_CODE, LC_C_SESSION_EXPIRED);
    lc_put_bytes(&b, LC_T_MESSAGE, "expired", 7);
    lc_frame_end(&b, start);
    memcpy(sc.reply.b + sc.reply.n, b.b, b.n);
    sc.reply.n += b.n;
    lc_buf_free(&b);
    script_start(&sc);
    lc_session_options o;
    lc_session_options_init(&o);
    o.read_timeout_ms = 3000;
    lc_session *s = NULL;
    lc_status st = lc_session_connect(&s, sc.addr, &o);
    lc_status described = LC_OK;
    if (st == LC_OK) described = lc_describe(s, "k", 1, NULL, 0, NULL, NULL);
    lc_status status = s != NULL ? lc_session_status(s) : LC_OK;
    lc_session_close(s);
    script_stop(&sc);
    CHECK(st == LC_OK, "connect: %s", lc_strerror(st));
    CHECK(described == LC_ERR_SESSION_EXPIRED && status == LC_ERR_SESSION_EXPIRED,
          "describe after a GOODBYE read with the WELCOME: %s (session: %s)", lc_strerror(described),
          lc_strerror(status));
    return true;
}

typedef struct waiting {
    lc_session *s;
    lc_status st;
} waiting;

static void *acquire_in_thread(void *arg) {
    waiting *w = arg;
    lc_lock_t *l = NULL;
    w->st = lc_acquire(w->s, "k", 1, NULL, &l);
    lc_lock_free(l);
    return NULL;
}

/* A close on one thread ends an acquire that waits on another, which
 * returns LC_ERR_SESSION_CLOSED (and, in the sanitizer builds, touches no
 * freed memory on its way out). */
static bool test_close_ends_a_waiting_acquire(void) {
    script sc = {0};
    welcome(&sc.reply);
    script_start(&sc);
    lc_session_options o;
    lc_session_options_init(&o);
    o.read_timeout_ms = 200; /* the script answers neither the ACQUIRE nor the CLOSE */
    waiting w = {.st = LC_OK};
    lc_status st = lc_session_connect(&w.s, sc.addr, &o);
    pthread_t t;
    if (st == LC_OK) {
        pthread_create(&t, NULL, acquire_in_thread, &w);
        bool parked = script_await_acquire(&sc);
        lc_session_close(w.s);
        pthread_join(t, NULL);
        CHECK(parked, "the ACQUIRE never reached the script");
    }
    script_stop(&sc);
    CHECK(st == LC_OK, "connect: %s", lc_strerror(st));
    CHECK(w.st == LC_ERR_SESSION_CLOSED, "the waiting acquire: %s, want session closed", lc_strerror(w.st));
    return true;
}

static bool test_silent_server_times_out(void) {
    script sc = {0};
    script_start(&sc);
    lc_session_options o;
    lc_session_options_init(&o);
    o.read_timeout_ms = 300;
    lc_session *s = NULL;
    lc_status st = lc_session_connect(&s, sc.addr, &o);
    script_stop(&sc);
    CHECK(st == LC_ERR_READ_TIMEOUT && s == NULL, "connect to a silent server: %s", lc_strerror(st));
    return true;
}

static bool test_follows_the_leader(void) {
    script leader = {0}, follower = {0};
    welcome(&leader.reply);
    script_start(&leader);
    goodbye_not_leader(&follower.reply, leader.addr);
    follower.close_after = true;
    script_start(&follower);
    lc_session *s = NULL;
    lc_session_options o;
    lc_session_options_init(&o);
    o.read_timeout_ms = 500; /* also bounds the close, which the script never answers */
    lc_status st = lc_session_connect(&s, follower.addr, &o);
    char at[64] = "";
    if (s != NULL) lc_session_address(s, at, sizeof at);
    uint64_t id = s != NULL ? lc_session_id(s) : 0;
    lc_session_close(s);
    script_stop(&leader);
    script_stop(&follower);
    CHECK(st == LC_OK, "connect through a follower: %s", lc_strerror(st));
    CHECK(strcmp(at, leader.addr) == 0 && id == 42, "the session is at %s (id %llu), want %s", at,
          (unsigned long long)id, leader.addr);
    return true;
}

/* refused_connect connects to a script that answers the HELLO with its
 * reply and closes; the connect must fail. */
static lc_status refused_connect(script *a) {
    a->close_after = true;
    script_start(a);
    lc_session *s = NULL;
    lc_status st = lc_session_connect(&s, a->addr, NULL);
    script_stop(a);
    if (st == LC_OK) lc_session_close(s);
    return st;
}

static bool test_every_node_not_leader(void) {
    script a = {0};
    goodbye_not_leader(&a.reply, "");
    lc_status st = refused_connect(&a);
    CHECK(st == LC_ERR_NOT_LEADER, "a lone follower: %s", lc_strerror(st));
    return true;
}

static bool test_v1_port_is_a_failure(void) {
    script a = {0};
    a.reply.b[0] = '-';
    a.reply.n = 1;
    lc_status st = refused_connect(&a);
    CHECK(st == LC_ERR_FAILED, "a v1 port: %s", lc_strerror(st));
    return true;
}

static bool test_invalid_arguments(void) {
    lc_session *s = NULL;
    CHECK(lc_session_connect(&s, "", NULL) == LC_ERR_INVALID_ADDRESS, "an empty address list");
    CHECK(lc_session_connect(&s, "127.0.0.1:1,nonsense", NULL) == LC_ERR_INVALID_ADDRESS, "a bad address");
    return true;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (!load_vectors(argc > 1 ? argv[1] : "../testdata/session-vectors.json")) {
        printf("0 passed, 1 failed\n");
        return 1;
    }
    static const test tests[] = {
        {"preface", test_preface},
        {"encoder_matches_vectors", test_encoder_matches_vectors},
        {"decoder_matches_vectors", test_decoder_matches_vectors},
        {"codes_match_vectors", test_codes_match_vectors},
        {"malformed_frames_are_protocol_errors", test_malformed_frames_are_protocol_errors},
        {"random_and_mutated_frames", test_random_and_mutated_frames},
        {"silent_server_times_out", test_silent_server_times_out},
        {"frames_after_the_welcome", test_frames_after_the_welcome},
        {"close_ends_a_waiting_acquire", test_close_ends_a_waiting_acquire},
        {"follows_the_leader", test_follows_the_leader},
        {"every_node_not_leader", test_every_node_not_leader},
        {"v1_port_is_a_failure", test_v1_port_is_a_failure},
        {"invalid_arguments", test_invalid_arguments},
    };
    int status = run_tests(tests, sizeof tests / sizeof tests[0]);
    json_free(&vectors);
    return status;
}
