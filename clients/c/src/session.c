/*
 * session.c - the session client: see lc_session.h for the API and
 * docs/protocol.md ("Mutex port, session protocol (v2)") for the bytes.
 *
 * One mutex (s->mu) guards the whole state of a session. The calls build
 * their frame, take the mutex, give the request its id, queue its bytes
 * and wait on the request's condition variable. The session's thread
 * (io_main) owns the connection: it writes what is queued, reads and
 * handles the server's frames, keeps the timers (ping, silence, leases, the
 * session's own TTL) and resumes the session after a drop.
 */
#define _POSIX_C_SOURCE 200809L

#include "lc_session.h"
#include "conn.h"
#include "frame.h"
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_NOTE 1024u
#define MAX_CREDENTIAL 1024u
#define MAX_ADDR 256u

/* The delay allowed between the server's measuring of a left_ms and the
 * frame's arrival here (docs/protocol.md, Leases). */
#define DELIVERY_BOUND_MS 100

static _Thread_local char last_message[1025];

const char *lc_last_message(void) { return last_message; }

static void set_message(const char *m) { snprintf(last_message, sizeof last_message, "%s", m ? m : ""); }

/* A request in flight: queued, sent, or waiting for its answer. */
typedef struct req {
    struct req *prev, *next; /* s->inflight, in id order */
    uint64_t id;
    uint8_t type;
    lc_buf frame; /* its bytes, kept to send again after a resume */
    bool sent, resent;
    int64_t sent_at;
    bool waiter;    /* a call waits for it, and frees it */
    bool abandoned; /* the call gave up: its answer is dropped (a grant released) */
    bool done;
    bool has_cond;
    pthread_cond_t cond;
    int efd[2]; /* a pipe written at done, when the call also waits for an lc_cancel */
    /* what it asks */
    uint8_t key[LC_MAX_KEY_LEN];
    size_t key_len;
    uint64_t token;  /* RELEASE, RENEW */
    uint64_t target; /* CANCEL */
    bool reentrant;
    lc_lost_fn on_lost;
    void *on_lost_arg;
    lc_holder *holders; /* DESCRIBE */
    size_t max_holders;
    /* its outcome */
    lc_status st;
    char msg[256];
    struct lc_lock *lock; /* the lock granted */
    size_t n_holders;
    uint32_t queue;
} req;

struct lc_lock {
    lc_session *s;
    struct lc_lock *prev, *next; /* s->holds while held */
    bool in_holds;
    uint8_t key[LC_MAX_KEY_LEN];
    size_t key_len;
    uint64_t token;
    uint32_t count;
    uint64_t request;
    lc_status state; /* LC_OK while held, else why it ended */
    int64_t lease_end; /* the client's end of the lease; 0: none */
    lc_lost_fn on_lost;
    void *on_lost_arg;
    int cb_busy; /* on_lost callbacks running or queued */
};

/* What a WELCOME of a resume listed. */
typedef struct held_item {
    uint64_t token, request;
    uint32_t count, left;
    bool leased;
    uint8_t key[LC_MAX_KEY_LEN];
    size_t key_len;
    int extra; /* counts the server holds beyond the handles and releases here */
} held_item;

typedef struct replay {
    uint64_t applied, sync_id;
    int64_t sent_at;
    held_item *held;
    size_t n_held;
    uint64_t *parked;
    size_t n_parked;
    uint64_t *fresh; /* tokens granted after the resume */
    size_t n_fresh, cap_fresh;
} replay;

struct lc_session {
    pthread_mutex_t mu;
    pthread_cond_t cb_cond; /* a callback finished */
    pthread_t thread;
    bool thread_started;
    int wake[2];
    bool wake_pending;
    int refs; /* the user's handle and every lock not freed */

    lc_session_options o;
    char *strings; /* the option strings, copied */
    void *tls;
    char **addrs;
    size_t n_addrs, cur;
    char leader[MAX_ADDR];
    char address[MAX_ADDR];
    char silent[MAX_ADDR]; /* the node whose connection went silent lately */
    int64_t shun_until;    /* ... not tried nor followed until then */

    uint64_t id;
    uint8_t secret[LC_SECRET_LEN];
    uint32_t ttl_ms, keepalive_ms;
    uint64_t next_id;

    lc_conn c;
    bool connected;
    lc_buf out;  /* bytes to write on c */
    lc_buf in;   /* bytes read, in[in_off..] not parsed */
    size_t in_off;
    lc_frame f;  /* the frame parsed last */
    lc_buf join; /* an answer in several frames (MORE), joined */
    bool joining;
    uint64_t join_id;
    lc_frame jf;

    req *head, *tail; /* in flight */
    struct lc_lock *holds;
    req *ping;
    replay *rp;
    uint64_t *orphans; /* tokens left to the server */
    size_t n_orphans, cap_orphans;

    lc_status err; /* LC_OK while the session lives */
    char err_msg[256];
    bool quit;
    int64_t last_ack, heard;

    struct lc_lock **cbs; /* locks whose on_lost is due */
    size_t n_cbs, cap_cbs;
};

/* ---- small helpers --------------------------------------------------- */

static int64_t now_ms(void) { return lc__now_ms(); }

/* margin: what the client takes off a duration the server measures: a
 * tenth, at least 50 ms, at most half. */
static int64_t margin(int64_t d) {
    int64_t m = d / 10 < 50 ? 50 : d / 10;
    return m > d / 2 ? d / 2 : m;
}

/* silence: how long a connection may bring nothing before it counts dead. */
static int64_t silence(const lc_session *s) {
    int64_t k = s->keepalive_ms;
    return k + (k / 10 > 250 ? k / 10 : 250);
}

static void poke(lc_session *s) {
    if (s->wake_pending) return;
    s->wake_pending = true;
    char b = 1;
    ssize_t r = write(s->wake[1], &b, 1);
    (void)r;
}

static bool has_u64(const uint64_t *a, size_t n, uint64_t v) {
    for (size_t i = 0; i < n; i++)
        if (a[i] == v) return true;
    return false;
}

static bool push_u64(uint64_t **a, size_t *n, size_t *cap, uint64_t v) {
    if (*n == *cap) {
        size_t c = *cap ? *cap * 2 : 8;
        uint64_t *na = realloc(*a, c * sizeof *na);
        if (na == NULL) return false;
        *a = na;
        *cap = c;
    }
    (*a)[(*n)++] = v;
    return true;
}

static void copy_field(const lc_field *fl, char *buf, size_t len) {
    size_t n = fl == NULL ? 0 : fl->len < len - 1 ? fl->len : len - 1;
    if (n > 0) memcpy(buf, fl->value, n);
    buf[n] = '\0';
}

/* ---- requests -------------------------------------------------------- */

static req *req_new(uint8_t type, bool waiter) {
    req *r = calloc(1, sizeof *r);
    if (r == NULL) return NULL;
    r->type = type;
    r->waiter = waiter;
    r->efd[0] = r->efd[1] = -1;
    if (waiter) {
        r->has_cond = true;
        pthread_condattr_t a;
        pthread_condattr_init(&a);
        pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
        pthread_cond_init(&r->cond, &a);
        pthread_condattr_destroy(&a);
    }
    size_t start;
    if (!lc_frame_begin(&r->frame, type, 0, &start)) {
        free(r);
        return NULL;
    }
    return r;
}

static void req_free(req *r) {
    if (r == NULL) return;
    if (r->has_cond) pthread_cond_destroy(&r->cond);
    if (r->efd[0] >= 0) {
        close(r->efd[0]);
        close(r->efd[1]);
    }
    lc_buf_free(&r->frame);
    free(r);
}

static void unlink_req(lc_session *s, req *r) {
    if (r->prev) r->prev->next = r->next;
    else s->head = r->next;
    if (r->next) r->next->prev = r->prev;
    else s->tail = r->prev;
    r->prev = r->next = NULL;
}

static req *find_req(lc_session *s, uint64_t id) {
    for (req *r = s->tail; r != NULL; r = r->prev)
        if (r->id == id) return r;
    return NULL;
}

/* send_req gives r the next id, puts it in flight and queues its bytes.
 * Called with s->mu held. */
static void send_req(lc_session *s, req *r) {
    r->id = ++s->next_id;
    uint8_t *p = r->frame.b + 5;
    for (int i = 7; i >= 0; i--) p[7 - i] = (uint8_t)(r->id >> (8 * i));
    lc_frame_end(&r->frame, 0);
    r->prev = s->tail;
    if (s->tail) s->tail->next = r;
    else s->head = r;
    s->tail = r;
    if (s->connected) {
        r->sent = true;
        r->sent_at = now_ms();
        if (!lc_buf_put(&s->out, r->frame.b, r->frame.n)) r->sent = false;
        poke(s);
    }
}

/* complete settles r with st: its caller wakes, or it is freed. Called
 * with s->mu held, r out of the list. */
static void complete(req *r, lc_status st, const char *msg) {
    if (!r->waiter) {
        req_free(r);
        return;
    }
    r->st = st;
    snprintf(r->msg, sizeof r->msg, "%s", msg ? msg : "");
    r->done = true;
    pthread_cond_signal(&r->cond);
    if (r->efd[1] >= 0) {
        char b = 1;
        ssize_t n = write(r->efd[1], &b, 1);
        (void)n;
    }
}

/* refused settles r with the REFUSED f. */
static void refused(req *r, const lc_frame *f) {
    char msg[256];
    copy_field(lc_frame_get(f, LC_T_MESSAGE), msg, sizeof msg);
    complete(r, lc_code_status(lc_frame_uint_or(f, LC_T_CODE, 0)), msg);
}

/* fire_and_forget queues a request nobody waits for. */
static void queue_release(lc_session *s, const uint8_t *key, size_t key_len, uint64_t token, bool lapse) {
    req *r = req_new(LC_F_RELEASE, false);
    if (r == NULL) return;
    r->token = token;
    memcpy(r->key, key, key_len);
    r->key_len = key_len;
    lc_put_bytes(&r->frame, LC_T_KEY, key, key_len);
    lc_put_u64(&r->frame, LC_T_TOKEN, token);
    if (lapse) lc_put_u8(&r->frame, LC_T_LAPSE, 1);
    send_req(s, r);
}

static void queue_cancel(lc_session *s, uint64_t target) {
    req *r = req_new(LC_F_CANCEL, false);
    if (r == NULL) return;
    r->target = target;
    lc_put_u64(&r->frame, LC_T_TARGET, target);
    send_req(s, r);
}

/* ---- locks ----------------------------------------------------------- */

static void hold(lc_session *s, struct lc_lock *l) {
    l->prev = NULL;
    l->next = s->holds;
    if (s->holds) s->holds->prev = l;
    s->holds = l;
    l->in_holds = true;
}

static void unhold(lc_session *s, struct lc_lock *l) {
    if (!l->in_holds) return;
    if (l->prev) l->prev->next = l->next;
    else s->holds = l->next;
    if (l->next) l->next->prev = l->prev;
    l->prev = l->next = NULL;
    l->in_holds = false;
}

/* end_lock ends l for reason, its callback queued. Called with s->mu held. */
static void end_lock(lc_session *s, struct lc_lock *l, lc_status reason) {
    unhold(s, l);
    if (l->state != LC_OK) return;
    l->state = reason;
    l->lease_end = 0;
    if (l->on_lost == NULL) return;
    if (s->n_cbs == s->cap_cbs) {
        size_t c = s->cap_cbs ? s->cap_cbs * 2 : 8;
        struct lc_lock **n = realloc(s->cbs, c * sizeof *n);
        if (n == NULL) return;
        s->cbs = n;
        s->cap_cbs = c;
    }
    l->cb_busy++;
    s->cbs[s->n_cbs++] = l;
}

/* end_token ends every handle of token. */
static void end_token(lc_session *s, uint64_t token, lc_status reason) {
    for (struct lc_lock *l = s->holds, *next; l != NULL; l = next) {
        next = l->next;
        if (l->token == token) end_lock(s, l, reason);
    }
}

/* run_callbacks calls the due on_lost callbacks, without s->mu. Called
 * with s->mu held; returns with it held. */
static void run_callbacks(lc_session *s) {
    while (s->n_cbs > 0) {
        struct lc_lock *l = s->cbs[--s->n_cbs];
        lc_status reason = l->state;
        pthread_mutex_unlock(&s->mu);
        l->on_lost(l, reason, l->on_lost_arg);
        pthread_mutex_lock(&s->mu);
        l->cb_busy--;
        pthread_cond_broadcast(&s->cb_cond);
    }
}

/* measured_at: the earliest the server can have measured a left_ms that
 * arrives now in the answer to a request sent at sent_at. */
static int64_t measured_at(int64_t sent_at) {
    int64_t from = now_ms() - DELIVERY_BOUND_MS;
    return from > sent_at ? from : sent_at;
}

static void set_lease(lc_session *s, uint64_t token, int64_t from, uint32_t left) {
    for (struct lc_lock *l = s->holds; l != NULL; l = l->next)
        if (l->token == token) l->lease_end = from + left - margin(left);
    poke(s);
}

/* grant makes the lock of the acquire r. */
static void grant(lc_session *s, req *r, uint64_t token, uint32_t count, bool leased, int64_t from, uint32_t left) {
    struct lc_lock *l = calloc(1, sizeof *l);
    if (l == NULL) {
        queue_release(s, r->key, r->key_len, token, false);
        complete(r, LC_ERR_SYSTEM, "out of memory");
        return;
    }
    l->s = s;
    memcpy(l->key, r->key, r->key_len);
    l->key_len = r->key_len;
    l->token = token;
    l->count = count;
    l->request = r->id;
    l->on_lost = r->on_lost;
    l->on_lost_arg = r->on_lost_arg;
    s->refs++;
    hold(s, l);
    if (leased) set_lease(s, token, from, left);
    r->lock = l;
    complete(r, LC_OK, NULL);
}

/* ---- the session's end ----------------------------------------------- */

static void drop_conn(lc_session *s) {
    if (!s->connected && s->c.fd < 0) return;
    lc_conn_close(&s->c);
    s->connected = false;
    s->out.n = 0;
    s->in.n = s->in_off = 0;
    s->joining = false;
    if (s->ping != NULL) {
        req_free(s->ping);
        s->ping = NULL;
    }
    if (s->rp != NULL) {
        free(s->rp->held);
        free(s->rp->parked);
        free(s->rp->fresh);
        free(s->rp);
        s->rp = NULL;
    }
}

/* end_session ends the session for err: every lock with lock_reason, every
 * request with err (a release, with LC_OK when released). Called with
 * s->mu held. */
static void end_session(lc_session *s, lc_status err, lc_status lock_reason, const char *why) {
    if (s->err != LC_OK) return;
    s->err = err;
    snprintf(s->err_msg, sizeof s->err_msg, "%s", why ? why : "");
    while (s->holds != NULL) end_lock(s, s->holds, lock_reason);
    while (s->head != NULL) {
        req *r = s->head;
        unlink_req(s, r);
        lc_status st = err;
        if (r->type == LC_F_RELEASE && lock_reason == LC_ERR_LOCK_RELEASED) st = LC_OK;
        if (r->type == LC_F_CLOSE && err == LC_ERR_SESSION_CLOSED) st = LC_OK;
        complete(r, st, s->err_msg);
    }
    drop_conn(s);
    poke(s);
}

/* ---- frames from the server ------------------------------------------ */

static void reconcile(lc_session *s);

static held_item *listed(replay *rp, uint64_t token) {
    for (size_t i = 0; i < rp->n_held; i++)
        if (rp->held[i].token == token) return &rp->held[i];
    return NULL;
}

static void granted(lc_session *s, req *r, const lc_frame *f) {
    uint64_t token = lc_frame_uint_or(f, LC_T_TOKEN, 0);
    uint32_t count = (uint32_t)lc_frame_uint_or(f, LC_T_COUNT, 1);
    if (r->abandoned) {
        queue_release(s, r->key, r->key_len, token, false);
        req_free(r);
        return;
    }
    uint64_t left = 0;
    bool leased = lc_frame_uint(f, LC_T_LEFT, &left);
    int64_t from = measured_at(r->sent_at);
    replay *rp = s->rp;
    if (rp != NULL) {
        if (r->id > rp->applied || has_u64(rp->parked, rp->n_parked, r->id)) {
            push_u64(&rp->fresh, &rp->n_fresh, &rp->cap_fresh, token);
        } else { /* a grant from before the resume */
            held_item *hi = listed(rp, token);
            if (hi == NULL) {
                complete(r, LC_ERR_ANSWER_LOST, "granted, then lost while the connection was down");
                return;
            }
            from = rp->sent_at;
            left = hi->left;
            leased = hi->leased;
        }
    }
    grant(s, r, token, count, leased, from, (uint32_t)left);
}

static void answer(lc_session *s, req *r, const lc_frame *f) {
    uint64_t code = lc_frame_uint_or(f, LC_T_CODE, 0);
    switch (r->type) {
    case LC_F_ACQUIRE:
        if (f->type == LC_F_GRANTED) granted(s, r, f);
        else if (r->abandoned) req_free(r);
        else refused(r, f);
        return;
    case LC_F_RELEASE:
    case LC_F_RENEW:
        if (f->type == LC_F_REFUSED) {
            if (code == LC_C_STALE_TOKEN) end_token(s, r->token, LC_ERR_LOCK_LOST);
            refused(r, f);
            return;
        }
        if (r->type == LC_F_RENEW) {
            uint64_t left;
            if (lc_frame_uint(f, LC_T_LEFT, &left)) set_lease(s, r->token, measured_at(r->sent_at), (uint32_t)left);
        }
        complete(r, LC_OK, NULL);
        return;
    case LC_F_CLOSE:
        if (f->type == LC_F_REFUSED) {
            refused(r, f);
            return;
        }
        complete(r, LC_OK, NULL);
        end_session(s, LC_ERR_SESSION_CLOSED, LC_ERR_LOCK_RELEASED, "the session was closed");
        return;
    case LC_F_DESCRIBE:
        if (f->type != LC_F_INFO) {
            refused(r, f);
            return;
        }
        r->queue = (uint32_t)lc_frame_uint_or(f, LC_T_QUEUE, 0);
        r->n_holders = 0;
        for (size_t i = 0; i < f->n; i++) {
            if (f->fields[i].tag != LC_T_HOLDER) continue;
            if (r->n_holders < r->max_holders) {
                lc_frame it = {0};
                const char *why;
                if (lc_fields_parse(f->fields[i].value, f->fields[i].len, &it, &why)) {
                    lc_holder *h = &r->holders[r->n_holders];
                    memset(h, 0, sizeof *h);
                    h->token = lc_frame_uint_or(&it, LC_T_TOKEN, 0);
                    h->session = lc_frame_uint_or(&it, LC_T_SESSION, 0);
                    h->held_ms = (uint32_t)lc_frame_uint_or(&it, LC_T_HELD_MS, 0);
                    h->shared = lc_frame_uint_or(&it, LC_T_MODE, 0) == 1;
                    h->count = (uint32_t)lc_frame_uint_or(&it, LC_T_COUNT, 1);
                    copy_field(lc_frame_get(&it, LC_T_NAME), h->name, sizeof h->name);
                    copy_field(lc_frame_get(&it, LC_T_NOTE), h->note, sizeof h->note);
                }
                lc_frame_free(&it);
            }
            r->n_holders++;
        }
        complete(r, LC_OK, NULL);
        return;
    default:
        complete(r, f->type == LC_F_REFUSED ? lc_code_status(code) : LC_OK, NULL);
    }
}

static void lost(lc_session *s, const lc_frame *f) {
    uint64_t token = lc_frame_uint_or(f, LC_T_TOKEN, 0);
    lc_status reason = lc_code_status(lc_frame_uint_or(f, LC_T_CODE, 0));
    if (reason == LC_ERR_CLOSED || reason == LC_ERR_FAILED) reason = LC_ERR_LOCK_LOST;
    bool any = false;
    for (struct lc_lock *l = s->holds; l != NULL; l = l->next) any |= l->token == token;
    if (any) {
        end_token(s, token, reason);
        return;
    }
    /* A grant whose GRANTED went with a dropped connection. */
    req *r = find_req(s, f->id);
    if (r != NULL && r->type == LC_F_ACQUIRE && s->rp != NULL && r->id <= s->rp->applied) {
        unlink_req(s, r);
        if (r->abandoned) req_free(r);
        else complete(r, LC_ERR_ANSWER_LOST, "granted, then lost while the connection was down");
    }
}

static void ack(lc_session *s, int64_t sent_at) {
    if (sent_at > s->last_ack) s->last_ack = sent_at;
}

/* shunned reports whether address is the node that went silent lately,
 * and another address is there to try. */
static bool shunned(const lc_session *s, const char *address) {
    return s->n_addrs > 1 && strcmp(address, s->silent) == 0 && now_ms() < s->shun_until;
}

/* follow makes the leader a node named the next address to try, unless
 * it is shunned: a frozen leader keeps its port (the kernel accepts) and
 * the other nodes go on naming it until they have elected another. */
static void follow(lc_session *s, const lc_field *leader) {
    char l[MAX_ADDR];
    copy_field(leader, l, sizeof l);
    if (!shunned(s, l)) snprintf(s->leader, sizeof s->leader, "%s", l);
}

/* handle applies one frame of the attached connection; false: drop it.
 * Called with s->mu held. */
static bool handle(lc_session *s, const lc_frame *f) {
    switch (f->type) {
    case LC_F_GRANTED:
    case LC_F_OK:
    case LC_F_REFUSED:
    case LC_F_INFO: {
        if (s->ping != NULL && f->id == s->ping->id) {
            ack(s, s->ping->sent_at);
            req_free(s->ping);
            s->ping = NULL;
            return true;
        }
        if (s->rp != NULL && f->id == s->rp->sync_id) {
            reconcile(s);
            return true;
        }
        req *r = find_req(s, f->id);
        if (r == NULL) return true;
        if (f->type == LC_F_REFUSED && lc_frame_uint_or(f, LC_T_CODE, 0) == LC_C_DUPLICATE && r->resent)
            return true; /* the old connection's answer comes too */
        ack(s, r->sent_at);
        unlink_req(s, r);
        answer(s, r, f);
        return true;
    }
    case LC_F_LOST:
        lost(s, f);
        return true;
    case LC_F_GOODBYE: {
        uint64_t code = lc_frame_uint_or(f, LC_T_CODE, 0);
        char msg[256];
        copy_field(lc_frame_get(f, LC_T_MESSAGE), msg, sizeof msg);
        if (code == LC_C_SESSION_EXPIRED || code == LC_C_UNKNOWN_SESSION)
            end_session(s, LC_ERR_SESSION_EXPIRED, LC_ERR_SESSION_EXPIRED, msg);
        else if (code == LC_C_PROTOCOL_ERROR)
            end_session(s, LC_ERR_PROTOCOL, LC_ERR_LOCK_LOST, msg);
        else if (code == LC_C_NOT_LEADER)
            follow(s, lc_frame_get(f, LC_T_LEADER));
        return false;
    }
    default:
        return true; /* EVENT and frames this client does not know */
    }
}

/* reconcile settles the session after a resume, once every frame the
 * server owed it has come, against what the WELCOME listed: a lock not
 * listed was lost while away; an acquire the server applied whose answer
 * never came is granted if listed, else failed; a listed lock nobody
 * here holds is released, unless it was orphaned. */
static void reconcile(lc_session *s) {
    replay *rp = s->rp;
    s->rp = NULL;
    for (struct lc_lock *l = s->holds, *next; l != NULL; l = next) {
        next = l->next;
        held_item *hi = listed(rp, l->token);
        if (hi != NULL) {
            if (hi->leased) {
                l->lease_end = rp->sent_at + hi->left - margin(hi->left);
                poke(s);
            }
        } else if (!has_u64(rp->fresh, rp->n_fresh, l->token)) {
            end_lock(s, l, LC_ERR_LOCK_LOST);
        }
    }
    for (size_t i = 0; i < rp->n_held; i++) {
        held_item *hi = &rp->held[i];
        hi->extra = (int)hi->count;
        for (struct lc_lock *l = s->holds; l != NULL; l = l->next)
            if (l->token == hi->token) hi->extra--;
    }
    for (req *r = s->head; r != NULL; r = r->next)
        if (r->type == LC_F_RELEASE) {
            held_item *hi = listed(rp, r->token);
            if (hi != NULL) hi->extra--;
        }
    for (req *r = s->head, *next; r != NULL; r = next) {
        next = r->next;
        if (r->id > rp->applied || r->type == LC_F_DESCRIBE ||
            (r->type == LC_F_ACQUIRE && has_u64(rp->parked, rp->n_parked, r->id)))
            continue; /* sent again, or still waiting: answered later */
        unlink_req(s, r);
        if (r->type == LC_F_ACQUIRE) {
            if (r->abandoned) {
                req_free(r);
                continue;
            }
            held_item *hit = NULL;
            for (size_t i = 0; i < rp->n_held && hit == NULL; i++)
                if (rp->held[i].request == r->id) hit = &rp->held[i];
            for (size_t i = 0; i < rp->n_held && hit == NULL && r->reentrant; i++)
                if (rp->held[i].extra > 0 && rp->held[i].key_len == r->key_len &&
                    memcmp(rp->held[i].key, r->key, r->key_len) == 0)
                    hit = &rp->held[i];
            if (hit == NULL) {
                complete(r, LC_ERR_ANSWER_LOST, "the answer went with the connection");
                continue;
            }
            hit->extra--;
            grant(s, r, hit->token, hit->count, hit->leased, rp->sent_at, hit->left);
        } else if (r->type == LC_F_RENEW) {
            complete(r, listed(rp, r->token) ? LC_OK : LC_ERR_LOCK_LOST, NULL);
        } else if (r->type == LC_F_CLOSE) {
            complete(r, LC_OK, NULL);
            end_session(s, LC_ERR_SESSION_CLOSED, LC_ERR_LOCK_RELEASED, "the session was closed");
            break;
        } else {
            complete(r, LC_OK, NULL);
        }
    }
    if (s->err == LC_OK) {
        for (size_t i = 0; i < rp->n_held; i++) {
            held_item *hi = &rp->held[i];
            if (has_u64(s->orphans, s->n_orphans, hi->token)) continue;
            for (int n = hi->extra; n > 0; n--) queue_release(s, hi->key, hi->key_len, hi->token, false);
        }
    }
    free(rp->held);
    free(rp->parked);
    free(rp->fresh);
    free(rp);
}

/*
 * next_answer returns in *out the next answer read (a WELCOME or INFO in
 * several frames joined, without `more`): 1, or 0 when more bytes are
 * needed, or -1 for a protocol error. *out is valid until the next call.
 */
static int next_answer(lc_session *s, const lc_frame **out, const char **why) {
    for (;;) {
        long used = lc_frame_parse(s->in.b + s->in_off, s->in.n - s->in_off, &s->f, why);
        if (used <= 0) return (int)used;
        s->in_off += (size_t)used;
        bool more = lc_frame_uint_or(&s->f, LC_T_MORE, 0) != 0;
        if (!s->joining) {
            if (s->f.type == LC_F_MORE) {
                *why = "a MORE frame that continues no answer";
                return -1;
            }
            if (!more) {
                *out = &s->f;
                return 1;
            }
            s->join.n = 0;
            size_t start;
            if (!lc_frame_begin(&s->join, s->f.type, s->f.id, &start)) return -1;
            s->joining = true;
            s->join_id = s->f.id;
        } else if (s->f.type == LC_F_GOODBYE) {
            s->joining = false;
            *out = &s->f;
            return 1;
        } else if (s->f.type != LC_F_MORE || s->f.id != s->join_id) {
            *why = "a frame inside an answer in several frames";
            return -1;
        }
        for (size_t i = 0; i < s->f.n; i++)
            if (s->f.fields[i].tag != LC_T_MORE &&
                !lc_put_bytes(&s->join, s->f.fields[i].tag, s->f.fields[i].value, s->f.fields[i].len))
                return -1;
        if (more) continue;
        s->joining = false;
        lc_frame_end(&s->join, 0);
        if (s->join.n - 4 > LC_FRAME_MAX) { /* a joined answer may exceed one frame: parse its fields */
            s->jf.type = s->join.b[4];
            s->jf.id = s->join_id;
            if (!lc_fields_parse(s->join.b + 13, s->join.n - 13, &s->jf, why)) return -1;
        } else if (lc_frame_parse(s->join.b, s->join.n, &s->jf, why) <= 0) {
            return -1;
        }
        *out = &s->jf;
        return 1;
    }
}

/* read_some reads what c has into s->in: bytes read, 0: none ready, -1: the end. */
static long read_some(lc_session *s) {
    if (s->in_off > 0 && s->in_off == s->in.n) s->in.n = s->in_off = 0;
    if (s->in_off > 0 && s->in.cap - s->in.n < 4096) {
        memmove(s->in.b, s->in.b + s->in_off, s->in.n - s->in_off);
        s->in.n -= s->in_off;
        s->in_off = 0;
    }
    if (!lc_buf_reserve(&s->in, 16384)) return -1;
    long n = lc_conn_read(&s->c, s->in.b + s->in.n, s->in.cap - s->in.n);
    if (n > 0) s->in.n += (size_t)n;
    return n;
}

/* ---- connections ----------------------------------------------------- */

/* handshake connects to address, writes b and reads the first answer into
 * *w, all by deadline. LC_OK with the connection in s->c (not yet
 * attached), or why not; a GOODBYE gives its code's status, and *goodbye. */
static lc_status handshake(lc_session *s, const char *address, const lc_buf *b, int64_t total, int answer_ms,
                           const lc_frame **w, uint64_t *goodbye) {
    *goodbye = 0;
    s->in.n = s->in_off = 0;
    s->joining = false;
    lc_conn c;
    int64_t deadline = now_ms() + (s->o.connect_timeout_ms > 0 ? s->o.connect_timeout_ms : 60000) + answer_ms;
    if (total >= 0 && total < deadline) deadline = total;
    lc_status st = lc_conn_open(&c, address, s->o.connect_timeout_ms, s->tls, s->o.server_name, deadline);
    if (st != LC_OK) return st;
    if (now_ms() + answer_ms < deadline) deadline = now_ms() + answer_ms;
    s->c = c;
    for (size_t off = 0; off < b->n;) {
        long n = lc_conn_write(&s->c, b->b + off, b->n - off);
        if (n < 0) {
            st = LC_ERR_IO;
            goto fail;
        }
        off += (size_t)n;
        if (n == 0) {
            int64_t left = deadline - now_ms();
            if (left <= 0 || lc_conn_wait(&s->c, true, (int)left) <= 0) {
                st = LC_ERR_READ_TIMEOUT;
                goto fail;
            }
        }
    }
    for (;;) {
        const char *why = NULL;
        int got = next_answer(s, w, &why);
        if (got < 0) {
            st = LC_ERR_PROTOCOL;
            set_message(why);
            goto fail;
        }
        if (got > 0) break;
        int64_t left = deadline - now_ms();
        if (left <= 0 || lc_conn_wait(&s->c, false, (int)left) <= 0) {
            st = LC_ERR_READ_TIMEOUT;
            goto fail;
        }
        long n = read_some(s);
        if (n < 0) {
            bool v1 = s->in.n - s->in_off == 1 && s->in.b[s->in_off] == '-';
            st = v1 ? LC_ERR_FAILED : LC_ERR_CLOSED;
            if (v1) set_message("'-' to the session protocol's preface (a server without sessions?)");
            goto fail;
        }
    }
    const lc_frame *f = *w;
    if (f->type == LC_F_WELCOME) return LC_OK;
    char msg[256];
    copy_field(lc_frame_get(f, LC_T_MESSAGE), msg, sizeof msg);
    set_message(msg);
    if (f->type == LC_F_GOODBYE) {
        *goodbye = lc_frame_uint_or(f, LC_T_CODE, 0);
        if (*goodbye == LC_C_NOT_LEADER) follow(s, lc_frame_get(f, LC_T_LEADER));
        st = lc_code_status(*goodbye);
    } else if (f->type == LC_F_REFUSED) {
        st = lc_code_status(lc_frame_uint_or(f, LC_T_CODE, 0));
    } else {
        st = LC_ERR_PROTOCOL;
        set_message("a frame before the WELCOME");
    }
fail:
    lc_conn_close(&s->c);
    return st;
}

/* target: the address to try next, the leader named last first, passing
 * over a shunned one. */
static const char *target(lc_session *s) {
    if (s->leader[0] != '\0') return s->leader;
    if (shunned(s, s->addrs[s->cur])) s->cur = (s->cur + 1) % s->n_addrs;
    return s->addrs[s->cur];
}

/* failed_at moves on from address after a failure there. */
static void failed_at(lc_session *s, const char *address) {
    if (s->leader[0] != '\0' && strcmp(address, s->leader) == 0) s->leader[0] = '\0';
    else if (s->n_addrs > 0 && strcmp(address, s->addrs[s->cur]) == 0) s->cur = (s->cur + 1) % s->n_addrs;
}

/* demote moves on from address, whose connection went silent, and shuns
 * it for as long again. */
static void demote(lc_session *s, const char *address) {
    failed_at(s, address);
    if (strcmp(s->leader, address) == 0) s->leader[0] = '\0';
    snprintf(s->silent, sizeof s->silent, "%s", address);
    s->shun_until = now_ms() + silence(s);
}

static bool parse_resume(lc_session *s, const lc_frame *w, replay *rp) {
    if (lc_frame_uint_or(w, LC_T_SESSION, 0) != s->id) return false;
    rp->applied = lc_frame_uint_or(w, LC_T_APPLIED, 0);
    size_t nh = 0, np = 0;
    for (size_t i = 0; i < w->n; i++) {
        nh += w->fields[i].tag == LC_T_HELD;
        np += w->fields[i].tag == LC_T_PARKED;
    }
    rp->held = calloc(nh + 1, sizeof *rp->held);
    rp->parked = calloc(np + 1, sizeof *rp->parked);
    if (rp->held == NULL || rp->parked == NULL) return false;
    for (size_t i = 0; i < w->n; i++) {
        uint8_t tag = w->fields[i].tag;
        if (tag != LC_T_HELD && tag != LC_T_PARKED) continue;
        lc_frame it = {0};
        const char *why;
        bool ok = lc_fields_parse(w->fields[i].value, w->fields[i].len, &it, &why);
        if (ok && tag == LC_T_HELD) {
            held_item *h = &rp->held[rp->n_held++];
            h->token = lc_frame_uint_or(&it, LC_T_TOKEN, 0);
            h->request = lc_frame_uint_or(&it, LC_T_REQUEST, 0);
            h->count = (uint32_t)lc_frame_uint_or(&it, LC_T_COUNT, 1);
            if (h->count == 0) h->count = 1;
            uint64_t left;
            h->leased = lc_frame_uint(&it, LC_T_LEFT, &left);
            h->left = (uint32_t)left;
            const lc_field *k = lc_frame_get(&it, LC_T_KEY);
            h->key_len = k != NULL && k->len <= LC_MAX_KEY_LEN ? k->len : 0;
            if (h->key_len > 0) memcpy(h->key, k->value, h->key_len);
        } else if (ok) {
            rp->parked[rp->n_parked++] = lc_frame_uint_or(&it, LC_T_REQUEST, 0);
        }
        lc_frame_free(&it);
        if (!ok) return false;
    }
    return true;
}

/* resume makes one attempt to resume the session: RESUME and a PING
 * whose answer comes after everything the server owed the session. Called
 * without s->mu; true when the session is attached again, or has ended. */
static bool resume(lc_session *s) {
    pthread_mutex_lock(&s->mu);
    uint64_t rid = ++s->next_id, sync = ++s->next_id;
    char address[MAX_ADDR];
    snprintf(address, sizeof address, "%s", target(s));
    int64_t deadline = now_ms() + silence(s);
    pthread_mutex_unlock(&s->mu);

    lc_buf b = {0};
    size_t start;
    lc_buf_put(&b, LC_PREFACE, 4);
    lc_frame_begin(&b, LC_F_RESUME, rid, &start);
    lc_put_u64(&b, LC_T_SESSION, s->id);
    lc_put_bytes(&b, LC_T_SECRET, s->secret, LC_SECRET_LEN);
    if (s->o.token != NULL) lc_put_bytes(&b, LC_T_CREDENTIAL, s->o.token, strlen(s->o.token));
    lc_frame_end(&b, start);
    lc_frame_begin(&b, LC_F_PING, sync, &start);
    lc_frame_end(&b, start);
    int64_t sent_at = now_ms();
    const lc_frame *w;
    uint64_t goodbye;
    lc_status st = handshake(s, address, &b, deadline, (int)silence(s), &w, &goodbye);
    lc_buf_free(&b);

    pthread_mutex_lock(&s->mu);
    bool done = false;
    replay *rp = NULL;
    if (st != LC_OK) {
        if (goodbye != 0 && goodbye != LC_C_SHUTTING_DOWN && goodbye != LC_C_SESSION_ENDED &&
            goodbye != LC_C_RATE_LIMITED && goodbye != LC_C_OVER_LIMIT && goodbye != LC_C_NOT_LEADER) {
            end_session(s, goodbye == LC_C_UNAUTHENTICATED ? LC_ERR_UNAUTHENTICATED : LC_ERR_SESSION_EXPIRED,
                        LC_ERR_SESSION_EXPIRED, "the session ended on the server while the client was away");
            done = true;
        } else if (st == LC_ERR_READ_TIMEOUT) {
            demote(s, address);
        } else if (goodbye != LC_C_NOT_LEADER || s->leader[0] == '\0' || strcmp(s->leader, address) == 0) {
            if (strcmp(s->leader, address) == 0) s->leader[0] = '\0';
            failed_at(s, address);
        }
        goto out;
    }
    rp = calloc(1, sizeof *rp);
    if (rp == NULL || !parse_resume(s, w, rp) || s->err != LC_OK || s->quit) {
        lc_conn_close(&s->c);
        if (rp != NULL) {
            free(rp->held);
            free(rp->parked);
            free(rp);
        }
        goto out;
    }
    rp->sync_id = sync;
    rp->sent_at = sent_at;
    s->rp = rp;
    ack(s, sent_at);
    s->heard = now_ms();
    s->connected = true;
    snprintf(s->address, sizeof s->address, "%s", address);
    s->out.n = 0;
    for (req *r = s->head, *next; r != NULL; r = next) {
        next = r->next;
        if (r->type != LC_F_DESCRIBE && r->id <= rp->applied) continue; /* arrived: reconcile settles it */
        if ((r->type == LC_F_ACQUIRE && r->abandoned) ||
            (r->type == LC_F_CANCEL && find_req(s, r->target) == NULL)) {
            unlink_req(s, r); /* never arrived, and nobody wants it */
            req_free(r);
            continue;
        }
        r->resent = r->sent;
        r->sent = true;
        r->sent_at = now_ms();
        lc_buf_put(&s->out, r->frame.b, r->frame.n);
    }
    done = true;
out:
    pthread_mutex_unlock(&s->mu);
    return done;
}

/* backoff: the wait before reconnect attempt n (from 1): 50 ms doubling,
 * at most a quarter of the keepalive and 500 ms, jittered. */
static int64_t backoff(const lc_session *s, int n) {
    int64_t d = (int64_t)50 << (n - 1 < 10 ? n - 1 : 10);
    int64_t cap = s->keepalive_ms / 4 > 50 ? s->keepalive_ms / 4 : 50;
    if (d > cap) d = cap;
    if (d > 500) d = 500;
    return d / 2 + rand() % (d / 2 + 1);
}

/* ---- the session's thread -------------------------------------------- */

/* timers runs what is due at now and returns the next point to wake at.
 * Called with s->mu held. */
static int64_t timers(lc_session *s, int64_t now) {
    int64_t next = now + 60000;
    int64_t lost_at = s->last_ack + s->ttl_ms - margin(s->ttl_ms);
    if (now >= lost_at) {
        end_session(s, LC_ERR_SESSION_EXPIRED, LC_ERR_SESSION_EXPIRED,
                    "no answer from the server within the session's TTL less a margin");
        return now;
    }
    if (lost_at < next) next = lost_at;
    for (struct lc_lock *l = s->holds, *n; l != NULL; l = n) {
        n = l->next;
        if (l->lease_end == 0) continue;
        if (now >= l->lease_end) {
            /* Given up at the client's end of its lease: released by its
             * token with lapse, so the key keeps its lock-delay. */
            uint8_t key[LC_MAX_KEY_LEN];
            size_t key_len = l->key_len;
            uint64_t token = l->token;
            memcpy(key, l->key, key_len);
            end_token(s, token, LC_ERR_LEASE_EXPIRED);
            queue_release(s, key, key_len, token, true);
            n = s->holds; /* the list changed */
            continue;
        }
        if (l->lease_end < next) next = l->lease_end;
    }
    if (!s->connected) return next;
    if (s->ping == NULL && now >= s->last_ack + s->keepalive_ms) {
        req *p = req_new(LC_F_PING, false);
        if (p != NULL) {
            p->id = ++s->next_id;
            for (int i = 0; i < 8; i++) p->frame.b[5 + i] = (uint8_t)(p->id >> (56 - 8 * i));
            lc_frame_end(&p->frame, 0);
            p->sent_at = now;
            lc_buf_put(&s->out, p->frame.b, p->frame.n);
            s->ping = p;
        }
    }
    int64_t dead_at = s->heard + silence(s);
    if (now >= dead_at) {
        demote(s, s->address);
        drop_conn(s);
        return now;
    }
    if (dead_at < next) next = dead_at;
    if (s->ping == NULL && s->last_ack + s->keepalive_ms < next) next = s->last_ack + s->keepalive_ms;
    return next;
}

/* handle_buffered handles the whole answers already read (a handshake's
 * read may bring frames after the WELCOME); false: drop the connection. */
static bool handle_buffered(lc_session *s) {
    for (;;) {
        const lc_frame *f;
        const char *why = NULL;
        int got = next_answer(s, &f, &why);
        if (got < 0) return false;
        if (got == 0) return true;
        if (!handle(s, f) || !s->connected) return false;
    }
}

/* pump handles what is buffered, writes, and reads c once; false when it
 * dropped. */
static bool pump(lc_session *s, bool readable) {
    if (!handle_buffered(s)) return false;
    if (s->out.n > 0) {
        long n = lc_conn_write(&s->c, s->out.b, s->out.n);
        if (n < 0) return false;
        memmove(s->out.b, s->out.b + n, s->out.n - (size_t)n);
        s->out.n -= (size_t)n;
    }
    if (!readable) return true;
    for (;;) {
        long n = read_some(s);
        if (n < 0) return false;
        if (n == 0) return true;
        s->heard = now_ms();
        if (!handle_buffered(s)) return false;
        if (s->out.n > 0) return true; /* write what the frames queued first */
    }
}

static void drain_wake(lc_session *s) {
    char b[64];
    while (read(s->wake[0], b, sizeof b) > 0) {
    }
    s->wake_pending = false;
}

/* pause waits on the wake pipe up to ms, s->mu released meanwhile. */
static void pause_for(lc_session *s, int64_t ms) {
    pthread_mutex_unlock(&s->mu);
    struct pollfd p = {.fd = s->wake[0], .events = POLLIN};
    poll(&p, 1, ms > 0 ? (int)ms : 0);
    pthread_mutex_lock(&s->mu);
    drain_wake(s);
}

static void *io_main(void *arg) {
    lc_session *s = arg;
    int attempt = 0;
    size_t hops = 0; /* leaders followed at once since the last backoff */
    pthread_mutex_lock(&s->mu);
    while (!s->quit && s->err == LC_OK) {
        int64_t now = now_ms();
        int64_t next = timers(s, now);
        run_callbacks(s);
        if (s->quit || s->err != LC_OK) break;
        if (!s->connected) {
            if (s->leader[0] != '\0' && hops <= s->n_addrs) {
                hops++;
            } else if (attempt > 0) {
                hops = 0;
                int64_t until = now + backoff(s, attempt);
                if (next < until) {
                    pause_for(s, next - now);
                    continue; /* a timer first */
                }
                pause_for(s, until - now);
                if (s->quit || s->err != LC_OK) break;
            }
            attempt++;
            pthread_mutex_unlock(&s->mu);
            resume(s);
            pthread_mutex_lock(&s->mu);
            if (s->connected) attempt = 0, hops = 0;
            continue;
        }
        if (!pump(s, false)) {
            failed_at(s, s->address);
            drop_conn(s);
            continue;
        }
        if (s->n_cbs > 0) continue; /* the callbacks of what the frames ended, first */
        struct pollfd p[2] = {{.fd = s->c.fd, .events = (short)(POLLIN | (s->out.n > 0 ? POLLOUT : 0))},
                              {.fd = s->wake[0], .events = POLLIN}};
        int timeout = next - now > 0 ? (int)(next - now) : 0;
        bool pending = lc_conn_pending(&s->c);
        pthread_mutex_unlock(&s->mu);
        int n = poll(p, 2, pending ? 0 : timeout);
        pthread_mutex_lock(&s->mu);
        if (n < 0 && errno != EINTR) break;
        if (p[1].revents & POLLIN) drain_wake(s);
        if (!s->connected) continue;
        if (!pump(s, pending || (p[0].revents & (POLLIN | POLLHUP | POLLERR)) != 0) && s->c.fd >= 0) {
            failed_at(s, s->address);
            drop_conn(s);
        }
    }
    run_callbacks(s);
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* ---- the API --------------------------------------------------------- */

void lc_session_options_init(lc_session_options *o) {
    memset(o, 0, sizeof *o);
    o->connect_timeout_ms = LC_DEFAULT_CONNECT_TIMEOUT_MS;
    o->read_timeout_ms = LC_DEFAULT_READ_TIMEOUT_MS;
}

void lc_acquire_options_init(lc_acquire_options *o) {
    memset(o, 0, sizeof *o);
    o->wait_ms = -1;
}

static void session_free(lc_session *s) {
    drop_conn(s);
    lc_tls_free(s->tls);
    lc_buf_free(&s->out);
    lc_buf_free(&s->in);
    lc_buf_free(&s->join);
    lc_frame_free(&s->f);
    lc_frame_free(&s->jf);
    free(s->orphans);
    free(s->cbs);
    free(s->addrs);
    free(s->strings);
    if (s->wake[0] >= 0) close(s->wake[0]);
    if (s->wake[1] >= 0) close(s->wake[1]);
    pthread_cond_destroy(&s->cb_cond);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

/* unref drops one reference; the last frees s. Called with s->mu held,
 * returns with it released. */
static void unref(lc_session *s) {
    bool last = --s->refs == 0;
    pthread_mutex_unlock(&s->mu);
    if (last) session_free(s);
}

/* copy_options copies o and its strings, and splits the addresses. */
static lc_status copy_options(lc_session *s, const char *addresses, const lc_session_options *o) {
    const char *strs[] = {o->name, o->token, o->ca_file, o->cert_file, o->key_file, o->server_name, addresses};
    size_t total = 0;
    for (size_t i = 0; i < 7; i++) total += strs[i] ? strlen(strs[i]) + 1 : 0;
    s->strings = malloc(total + 1);
    s->addrs = calloc(strlen(addresses) / 2 + 2, sizeof *s->addrs);
    if (s->strings == NULL || s->addrs == NULL) return LC_ERR_SYSTEM;
    s->o = *o;
    const char **dst[] = {&s->o.name, &s->o.token, &s->o.ca_file, &s->o.cert_file, &s->o.key_file,
                          &s->o.server_name, NULL};
    char *p = s->strings, *addr_copy = NULL;
    for (size_t i = 0; i < 7; i++) {
        if (strs[i] == NULL) continue;
        size_t n = strlen(strs[i]) + 1;
        memcpy(p, strs[i], n);
        if (dst[i] != NULL) *dst[i] = p;
        else addr_copy = p;
        p += n;
    }
    for (char *save = NULL, *a = strtok_r(addr_copy, ",", &save); a != NULL; a = strtok_r(NULL, ",", &save)) {
        while (*a == ' ') a++;
        if (*a == '\0') continue;
        lc_client check;
        if (strlen(a) >= MAX_ADDR || lc_client_init(&check, a, NULL, 0) != LC_OK) return LC_ERR_INVALID_ADDRESS;
        s->addrs[s->n_addrs++] = a;
    }
    if (s->n_addrs == 0) return LC_ERR_INVALID_ADDRESS;
    if (s->o.name != NULL && strlen(s->o.name) > LC_MAX_SOURCE_LEN) return LC_ERR_INVALID_SOURCE;
    if (s->o.token != NULL && strlen(s->o.token) > MAX_CREDENTIAL) return LC_ERR_INVALID_ARGUMENT;
    return LC_OK;
}

/* hello opens the session: each address in turn, once, and the leader a
 * node names at once. */
static lc_status hello(lc_session *s) {
    lc_buf b = {0};
    size_t start;
    lc_buf_put(&b, LC_PREFACE, 4);
    lc_frame_begin(&b, LC_F_HELLO, 1, &start);
    if (s->o.name != NULL) lc_put_bytes(&b, LC_T_NAME, s->o.name, strlen(s->o.name));
    if (s->o.ttl_ms > 0) lc_put_u32(&b, LC_T_TTL, s->o.ttl_ms);
    if (s->o.token != NULL) lc_put_bytes(&b, LC_T_CREDENTIAL, s->o.token, strlen(s->o.token));
    lc_frame_end(&b, start);
    lc_status st = LC_ERR_CONNECT;
    bool all_not_leader = true;
    size_t tries = 0, hops = 0;
    int answer_ms = s->o.read_timeout_ms > 0 ? s->o.read_timeout_ms : 3600000;
    while (tries < s->n_addrs) {
        char address[MAX_ADDR];
        bool to_leader = s->leader[0] != '\0';
        snprintf(address, sizeof address, "%s", target(s));
        int64_t sent_at = now_ms();
        const lc_frame *w;
        uint64_t goodbye;
        set_message("");
        st = handshake(s, address, &b, -1, answer_ms, &w, &goodbye);
        if (st == LC_OK) {
            const lc_field *sec = lc_frame_get(w, LC_T_SECRET);
            s->id = lc_frame_uint_or(w, LC_T_SESSION, 0);
            s->ttl_ms = (uint32_t)lc_frame_uint_or(w, LC_T_TTL, 10000);
            s->keepalive_ms = (uint32_t)lc_frame_uint_or(w, LC_T_KEEPALIVE, s->ttl_ms / 3);
            if (sec == NULL || s->ttl_ms == 0 || s->keepalive_ms == 0) {
                lc_conn_close(&s->c);
                st = LC_ERR_PROTOCOL;
                set_message("a WELCOME without its secret, ttl_ms or keepalive_ms");
                break;
            }
            memcpy(s->secret, sec->value, LC_SECRET_LEN);
            s->next_id = 1;
            s->last_ack = sent_at;
            s->heard = now_ms();
            s->connected = true;
            s->leader[0] = '\0';
            snprintf(s->address, sizeof s->address, "%s", address);
            break;
        }
        if (goodbye == LC_C_NOT_LEADER) {
            if (s->leader[0] != '\0' && strcmp(s->leader, address) != 0 && hops++ < s->n_addrs) continue;
        } else {
            all_not_leader = false;
        }
        if (goodbye != 0 && goodbye != LC_C_NOT_LEADER && goodbye != LC_C_SHUTTING_DOWN) break;
        if (st == LC_ERR_FAILED || st == LC_ERR_TLS || st == LC_ERR_NO_TLS || st == LC_ERR_UNSUPPORTED ||
            st == LC_ERR_PROTOCOL)
            break;
        s->leader[0] = '\0';
        if (!to_leader) {
            s->cur = (s->cur + 1) % s->n_addrs;
            tries++;
        }
    }
    lc_buf_free(&b);
    if (st != LC_OK && all_not_leader) st = LC_ERR_NOT_LEADER;
    return st;
}

lc_status lc_session_connect(lc_session **out, const char *addresses, const lc_session_options *o) {
    if (out == NULL || addresses == NULL) return LC_ERR_INVALID_ARGUMENT;
    *out = NULL;
    lc_session_options dflt;
    if (o == NULL) {
        lc_session_options_init(&dflt);
        o = &dflt;
    }
    lc_session *s = calloc(1, sizeof *s);
    if (s == NULL) return LC_ERR_SYSTEM;
    s->wake[0] = s->wake[1] = -1;
    s->c.fd = -1;
    s->refs = 1;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cb_cond, NULL);
    lc_status st = copy_options(s, addresses, o);
    if (st == LC_OK) st = lc_tls_new(&s->o, &s->tls);
    if (st == LC_OK && pipe(s->wake) != 0) st = LC_ERR_SYSTEM;
    if (st == LC_OK) {
        for (int i = 0; i < 2; i++) {
            fcntl(s->wake[i], F_SETFL, fcntl(s->wake[i], F_GETFL) | O_NONBLOCK);
            fcntl(s->wake[i], F_SETFD, FD_CLOEXEC);
        }
        st = hello(s);
    }
    if (st == LC_OK && pthread_create(&s->thread, NULL, io_main, s) != 0) st = LC_ERR_SYSTEM;
    if (st != LC_OK) {
        session_free(s);
        return st;
    }
    s->thread_started = true;
    *out = s;
    return LC_OK;
}

/*
 * await waits for r's answer, until deadline (-1: none) or cancel, and
 * returns its status, r->done set; the caller then frees r. A request
 * given up is abandoned, and no longer the caller's (an acquire is also
 * cancelled on the server): await returns gave_up, or LC_ERR_CANCELLED.
 * Called with s->mu held.
 */
static lc_status await(lc_session *s, req *r, int64_t deadline, const lc_cancel *cancel, lc_status gave_up) {
    while (!r->done) {
        if (cancel != NULL) {
            pthread_mutex_unlock(&s->mu);
            struct pollfd p[2] = {{.fd = r->efd[0], .events = POLLIN}, {.fd = cancel->fds[0], .events = POLLIN}};
            int64_t left = deadline < 0 ? -1 : deadline - now_ms();
            int n = poll(p, 2, deadline < 0 ? -1 : (left > 0 ? (int)left : 0));
            pthread_mutex_lock(&s->mu);
            if (r->done) break;
            if (n < 0 || (n > 0 && !(p[1].revents & POLLIN))) continue;
            if (n > 0) gave_up = LC_ERR_CANCELLED;
            break;
        }
        if (deadline < 0) {
            pthread_cond_wait(&r->cond, &s->mu);
            continue;
        }
        struct timespec ts = {.tv_sec = deadline / 1000, .tv_nsec = (deadline % 1000) * 1000000};
        if (pthread_cond_timedwait(&r->cond, &s->mu, &ts) == ETIMEDOUT && !r->done) break;
    }
    if (!r->done) {
        r->waiter = false;
        r->abandoned = true;
        r->max_holders = 0; /* the caller's array is no longer to be filled */
        if (r->type == LC_F_ACQUIRE && s->err == LC_OK) queue_cancel(s, r->id);
        set_message(gave_up == LC_ERR_CANCELLED ? "cancelled" : "no answer within the read timeout");
        return gave_up;
    }
    set_message(r->msg);
    return r->st;
}

/* submit sends r, or fails it when the session has ended. Called with
 * s->mu held; false: r was freed. A call that sent holds a reference to
 * the session until it returns (finish), so that a close on another
 * thread does not free it under the waiting call. */
static bool submit(lc_session *s, req *r, lc_status *st) {
    if (s->err != LC_OK) {
        *st = s->err;
        set_message(s->err_msg);
        req_free(r);
        return false;
    }
    s->refs++;
    send_req(s, r);
    return true;
}

/* finish releases s->mu, and the reference of a call that sent. */
static void finish(lc_session *s, bool sent) {
    if (sent) unref(s);
    else pthread_mutex_unlock(&s->mu);
}

static int64_t read_deadline(const lc_session *s) {
    return s->o.read_timeout_ms > 0 ? now_ms() + s->o.read_timeout_ms : -1;
}

/* call sends r and waits for it within the read timeout. Takes s->mu. */
static lc_status call(lc_session *s, req *r) {
    lc_status st;
    pthread_mutex_lock(&s->mu);
    bool sent = submit(s, r, &st);
    if (sent) {
        st = await(s, r, read_deadline(s), NULL, LC_ERR_READ_TIMEOUT);
        if (r->done) req_free(r);
    }
    finish(s, sent);
    return st;
}

lc_status lc_session_close(lc_session *s) {
    if (s == NULL) return LC_OK;
    lc_status st = LC_OK;
    pthread_mutex_lock(&s->mu);
    if (s->err == LC_OK) {
        req *r = req_new(LC_F_CLOSE, true);
        if (r != NULL) {
            send_req(s, r);
            st = await(s, r, read_deadline(s), NULL, LC_ERR_READ_TIMEOUT);
            if (r->done) req_free(r);
        }
    }
    s->quit = true;
    poke(s);
    pthread_mutex_unlock(&s->mu);
    if (s->thread_started) pthread_join(s->thread, NULL);
    pthread_mutex_lock(&s->mu);
    end_session(s, LC_ERR_SESSION_CLOSED, st == LC_OK ? LC_ERR_LOCK_RELEASED : LC_ERR_SESSION_CLOSED,
                "the session was closed");
    run_callbacks(s);
    unref(s);
    return st;
}

lc_status lc_session_status(lc_session *s) {
    pthread_mutex_lock(&s->mu);
    lc_status st = s->err;
    pthread_mutex_unlock(&s->mu);
    return st;
}

uint64_t lc_session_id(const lc_session *s) { return s->id; }
uint32_t lc_session_ttl_ms(const lc_session *s) { return s->ttl_ms; }

void lc_session_address(lc_session *s, char *buf, size_t len) {
    pthread_mutex_lock(&s->mu);
    snprintf(buf, len, "%s", s->address);
    pthread_mutex_unlock(&s->mu);
}

static bool valid_key(const void *key, size_t key_len) {
    return key != NULL && key_len >= 1 && key_len <= LC_MAX_KEY_LEN;
}

lc_status lc_acquire(lc_session *s, const void *key, size_t key_len, const lc_acquire_options *o,
                     lc_lock_t **out) {
    if (s == NULL || out == NULL) return LC_ERR_INVALID_ARGUMENT;
    *out = NULL;
    if (!valid_key(key, key_len)) return LC_ERR_INVALID_KEY;
    lc_acquire_options dflt;
    if (o == NULL) {
        lc_acquire_options_init(&dflt);
        o = &dflt;
    }
    if ((o->note != NULL && strlen(o->note) > MAX_NOTE) || (o->owner != NULL && strlen(o->owner) > LC_MAX_KEY_LEN))
        return LC_ERR_INVALID_ARGUMENT;
    req *r = req_new(LC_F_ACQUIRE, true);
    if (r == NULL) return LC_ERR_SYSTEM;
    memcpy(r->key, key, key_len);
    r->key_len = key_len;
    r->reentrant = o->reentrant;
    r->on_lost = o->on_lost;
    r->on_lost_arg = o->on_lost_arg;
    lc_buf *b = &r->frame;
    bool ok = lc_put_bytes(b, LC_T_KEY, key, key_len);
    if (o->wait_ms >= 0) ok &= lc_put_u32(b, LC_T_WAIT, o->wait_ms > UINT32_MAX ? UINT32_MAX : (uint32_t)o->wait_ms);
    if (o->lease_ms > 0) ok &= lc_put_u32(b, LC_T_LEASE, o->lease_ms);
    if (o->delay_ms > 0) ok &= lc_put_u32(b, LC_T_DELAY, o->delay_ms);
    if (o->shared) ok &= lc_put_u8(b, LC_T_MODE, 1);
    if (o->limit > 1) ok &= lc_put_u32(b, LC_T_LIMIT, o->limit);
    if (o->priority != 0) ok &= lc_put_u32(b, LC_T_PRIORITY, (uint32_t)o->priority);
    if (o->reentrant) ok &= lc_put_u8(b, LC_T_REENTRANT, 1);
    if (o->owner != NULL) ok &= lc_put_bytes(b, LC_T_OWNER, o->owner, strlen(o->owner));
    if (o->note != NULL) ok &= lc_put_bytes(b, LC_T_NOTE, o->note, strlen(o->note));
    if (ok && o->cancel != NULL) {
        ok = pipe(r->efd) == 0;
        if (!ok) r->efd[0] = r->efd[1] = -1;
    }
    if (!ok) {
        req_free(r);
        return LC_ERR_SYSTEM;
    }
    lc_status st;
    pthread_mutex_lock(&s->mu);
    bool sent = submit(s, r, &st);
    if (sent) {
        st = await(s, r, -1, o->cancel, LC_ERR_CANCELLED);
        if (r->done) {
            *out = r->lock;
            req_free(r);
        }
    }
    finish(s, sent);
    return st;
}

lc_status lc_try_acquire(lc_session *s, const void *key, size_t key_len, const lc_acquire_options *o,
                         lc_lock_t **out) {
    lc_acquire_options t;
    if (o != NULL) t = *o;
    else lc_acquire_options_init(&t);
    t.wait_ms = 0;
    return lc_acquire(s, key, key_len, &t, out);
}

static req *release_req(const void *key, size_t key_len, uint64_t token) {
    req *r = req_new(LC_F_RELEASE, true);
    if (r == NULL) return NULL;
    memcpy(r->key, key, key_len);
    r->key_len = key_len;
    r->token = token;
    lc_put_bytes(&r->frame, LC_T_KEY, key, key_len);
    lc_put_u64(&r->frame, LC_T_TOKEN, token);
    return r;
}

lc_status lc_release_token(lc_session *s, const void *key, size_t key_len, uint64_t token) {
    if (s == NULL) return LC_ERR_INVALID_ARGUMENT;
    if (!valid_key(key, key_len)) return LC_ERR_INVALID_KEY;
    req *r = release_req(key, key_len, token);
    if (r == NULL) return LC_ERR_SYSTEM;
    pthread_mutex_lock(&s->mu);
    for (struct lc_lock *l = s->holds; l != NULL; l = l->next)
        if (l->token == token && l->key_len == key_len && memcmp(l->key, key, key_len) == 0) {
            unhold(s, l);
            l->state = LC_ERR_LOCK_RELEASED;
            break;
        }
    pthread_mutex_unlock(&s->mu);
    return call(s, r);
}

lc_status lc_lock_release(lc_lock_t *l) {
    if (l == NULL) return LC_ERR_INVALID_ARGUMENT;
    lc_session *s = l->s;
    pthread_mutex_lock(&s->mu);
    if (l->state != LC_OK) {
        pthread_mutex_unlock(&s->mu);
        return LC_OK;
    }
    unhold(s, l);
    l->state = LC_ERR_LOCK_RELEASED;
    l->lease_end = 0;
    pthread_mutex_unlock(&s->mu);
    req *r = release_req(l->key, l->key_len, l->token);
    if (r == NULL) return LC_ERR_SYSTEM;
    lc_status st = call(s, r);
    if (st == LC_ERR_STALE_TOKEN) {
        pthread_mutex_lock(&s->mu);
        l->state = LC_ERR_LOCK_LOST;
        pthread_mutex_unlock(&s->mu);
    }
    return st;
}

lc_status lc_lock_renew(lc_lock_t *l, uint32_t lease_ms) {
    if (l == NULL) return LC_ERR_INVALID_ARGUMENT;
    lc_session *s = l->s;
    pthread_mutex_lock(&s->mu);
    lc_status state = l->state;
    pthread_mutex_unlock(&s->mu);
    if (state != LC_OK) return state;
    req *r = req_new(LC_F_RENEW, true);
    if (r == NULL) return LC_ERR_SYSTEM;
    r->token = l->token;
    lc_put_bytes(&r->frame, LC_T_KEY, l->key, l->key_len);
    lc_put_u64(&r->frame, LC_T_TOKEN, l->token);
    if (lease_ms > 0) lc_put_u32(&r->frame, LC_T_LEASE, lease_ms);
    return call(s, r);
}

void lc_lock_orphan(lc_lock_t *l) {
    if (l == NULL) return;
    lc_session *s = l->s;
    pthread_mutex_lock(&s->mu);
    if (l->state == LC_OK) {
        unhold(s, l);
        l->state = LC_ERR_LOCK_ORPHANED;
        l->lease_end = 0;
        push_u64(&s->orphans, &s->n_orphans, &s->cap_orphans, l->token);
    }
    pthread_mutex_unlock(&s->mu);
}

lc_status lc_lock_lost(lc_lock_t *l) {
    pthread_mutex_lock(&l->s->mu);
    lc_status st = l->state;
    pthread_mutex_unlock(&l->s->mu);
    return st;
}

uint64_t lc_lock_token(const lc_lock_t *l) { return l->token; }
uint32_t lc_lock_count(const lc_lock_t *l) { return l->count; }

const void *lc_lock_key(const lc_lock_t *l, size_t *len) {
    if (len != NULL) *len = l->key_len;
    return l->key;
}

void lc_lock_free(lc_lock_t *l) {
    if (l == NULL) return;
    lc_session *s = l->s;
    if (lc_lock_lost(l) == LC_OK) lc_lock_release(l);
    pthread_mutex_lock(&s->mu);
    unhold(s, l);
    while (l->cb_busy > 0) pthread_cond_wait(&s->cb_cond, &s->mu);
    free(l);
    unref(s);
}

lc_status lc_describe(lc_session *s, const void *key, size_t key_len, lc_holder *holders, size_t max,
                      size_t *n, uint32_t *queue) {
    if (s == NULL || (holders == NULL && max > 0)) return LC_ERR_INVALID_ARGUMENT;
    if (n != NULL) *n = 0;
    if (queue != NULL) *queue = 0;
    if (!valid_key(key, key_len)) return LC_ERR_INVALID_KEY;
    req *r = req_new(LC_F_DESCRIBE, true);
    if (r == NULL) return LC_ERR_SYSTEM;
    lc_put_bytes(&r->frame, LC_T_KEY, key, key_len);
    r->holders = holders;
    r->max_holders = max;
    lc_status st;
    pthread_mutex_lock(&s->mu);
    bool sent = submit(s, r, &st);
    if (sent) {
        st = await(s, r, read_deadline(s), NULL, LC_ERR_READ_TIMEOUT);
        if (r->done) {
            if (n != NULL) *n = r->n_holders;
            if (queue != NULL) *queue = r->queue;
            req_free(r);
        }
    }
    finish(s, sent);
    return st;
}
