/*
 * lc_session.h - the session client of Locking-Center (docs/protocol.md,
 * "Mutex port, session protocol (v2)"): one connection per session, kept
 * open, that carries many requests at once; every lock belongs to the
 * session and carries a fencing token.
 *
 * Threads. lc_session_connect starts one background thread (pthreads) per
 * session. It reads every frame from the server, writes what the calls
 * queue, pings at the server's keepalive_ms, counts leases down, and
 * reconnects after a drop: the leader a GOODBYE not_leader names first,
 * then every address in turn, RESUME within the TTL, and what was in flight
 * is settled against the WELCOME's applied, held and parked lists. A held
 * lock survives a reconnect with its token. Calls may come from any thread;
 * a call blocks its own thread only. There is no event-loop API.
 *
 * Bounds. Every call that does not wait for a key gives up after the
 * session's read_timeout_ms (the connect also after connect_timeout_ms per
 * address) with LC_ERR_READ_TIMEOUT or LC_ERR_CONNECT. An acquire waits
 * for its key as long as the server keeps it waiting: for ever, or its
 * wait_ms, which the server measures (LC_ERR_TIMEOUT), or until its
 * lc_cancel is fired. A connection that brings nothing for keepalive_ms
 * plus a tenth (at least 250 ms) is dropped and the session resumed.
 *
 * Errors are lc_status codes (lockingcenter.h); lc_strerror describes
 * each. lc_last_message returns the server's words for the last failure of
 * the calling thread.
 */
#ifndef LC_SESSION_H
#define LC_SESSION_H

#include "lockingcenter.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct lc_session lc_session;
/*
 * A held lock. Its type is lc_lock_t, the struct lc_lock: the name lc_lock
 * alone is the v1 client's function.
 */
typedef struct lc_lock lc_lock_t;

/* Options of a session. lc_session_options_init fills the defaults. */
typedef struct lc_session_options {
    const char *name;       /* the session's source (reset by source); NULL or "": the client's IP */
    uint32_t ttl_ms;        /* session TTL asked for; 0: the server's default (10 s) */
    const char *token;      /* credential for a server with tokens; NULL: none */
    int connect_timeout_ms; /* per address; default 5000 */
    int read_timeout_ms;    /* bound of every call that waits for no key; default 10000 */
    bool tls;               /* connect with TLS (needs the library built with OpenSSL) */
    const char *ca_file;    /* PEM CA to verify the server; NULL: the system's */
    const char *cert_file;  /* PEM client certificate; NULL: none */
    const char *key_file;   /* its key */
    const char *server_name;/* name to verify in the server's certificate; NULL: the address's host */
} lc_session_options;

void lc_session_options_init(lc_session_options *o);

/* lc_tls_available reports whether the library was built with OpenSSL. */
bool lc_tls_available(void);

/*
 * lc_session_connect opens a session at the first address of addresses
 * ("host:port", comma-separated) that serves one, following a GOODBYE
 * not_leader to the leader it names. o may be NULL for the defaults.
 * Errors: LC_ERR_INVALID_ADDRESS, LC_ERR_CONNECT, LC_ERR_READ_TIMEOUT (an
 * address that took the connection and answered nothing),
 * LC_ERR_UNAUTHENTICATED, LC_ERR_NOT_LEADER (only once every address
 * failed), LC_ERR_TLS, LC_ERR_NO_TLS, LC_ERR_PROTOCOL, LC_ERR_FAILED (the
 * port does not speak the session protocol).
 */
lc_status lc_session_connect(lc_session **out, const char *addresses, const lc_session_options *o);

/*
 * lc_session_close sends CLOSE (every lock released, no lock-delay, every
 * wait withdrawn) within the read timeout, stops the background thread and
 * frees the session once its last lc_lock is freed. Locks still held end
 * with LC_ERR_LOCK_RELEASED (or the reason, when the server could not be
 * told). Waiting acquires return LC_ERR_SESSION_CLOSED. NULL is ignored.
 * After it only the session's locks may be used (lc_lock_lost, lc_lock_free,
 * ...), never s itself; calls still running on other threads return first.
 */
lc_status lc_session_close(lc_session *s);

/* LC_OK while the session lives, then why it ended. */
lc_status lc_session_status(lc_session *s);
uint64_t lc_session_id(const lc_session *s);
uint32_t lc_session_ttl_ms(const lc_session *s);
/* lc_session_address copies the address the session is on now to buf. */
void lc_session_address(lc_session *s, char *buf, size_t len);

/* Called once when a lock is lost, on the session's thread, with the reason. */
typedef void (*lc_lost_fn)(lc_lock_t *lock, lc_status reason, void *arg);

/* Options of an acquire. lc_acquire_options_init fills the defaults. */
typedef struct lc_acquire_options {
    int64_t wait_ms;     /* -1 (default): wait for ever; 0: try once; n: at most n ms, on the server */
    uint32_t lease_ms;   /* the lock's own lease; 0: none, it lives as long as the session */
    uint32_t delay_ms;   /* lock-delay after a loss (not a release), at most 60,000 */
    bool shared;         /* shared mode: any number of shared holders at once */
    uint32_t limit;      /* a semaphore of this many holders; 0 or 1: one */
    int32_t priority;    /* higher is served first; ages one a second while waiting */
    bool reentrant;      /* a holder with the same owner counts up on its lock */
    const char *owner;   /* who within the session; NULL: nobody in particular */
    const char *note;    /* the holder's note, UTF-8, at most 1,024 bytes; NULL: none */
    const lc_cancel *cancel; /* fired from any thread, ends the wait: CANCEL goes to the server */
    lc_lost_fn on_lost;  /* NULL: poll with lc_lock_lost */
    void *on_lost_arg;
} lc_acquire_options;

void lc_acquire_options_init(lc_acquire_options *o);

/*
 * lc_acquire asks for key and waits for it (see wait_ms), returning the
 * lock in *out. A try (wait_ms 0) that finds the key held returns LC_BUSY,
 * *out NULL. Errors: LC_ERR_INVALID_KEY, LC_ERR_TIMEOUT (the wait ran out
 * on the server; the request left the queue), LC_ERR_CANCELLED,
 * LC_ERR_DEADLOCK, LC_ERR_LIMIT_MISMATCH, LC_ERR_UPGRADE, LC_ERR_FORBIDDEN,
 * LC_ERR_RESET (withdrawn), LC_ERR_SESSION_EXPIRED, LC_ERR_SESSION_CLOSED,
 * LC_ERR_ANSWER_LOST, and the other refusals.
 */
lc_status lc_acquire(lc_session *s, const void *key, size_t key_len, const lc_acquire_options *o, lc_lock_t **out);

/* lc_try_acquire is lc_acquire with wait_ms 0 (o's other options kept). */
lc_status lc_try_acquire(lc_session *s, const void *key, size_t key_len, const lc_acquire_options *o,
                         lc_lock_t **out);

/*
 * lc_release_token releases the lock of token on key, whatever handle (if
 * any) holds it: LC_OK, or LC_ERR_STALE_TOKEN when the session does not
 * hold that token on that key now (nothing changed). A handle of that
 * token ends released.
 */
lc_status lc_release_token(lc_session *s, const void *key, size_t key_len, uint64_t token);

/*
 * lc_lock_release releases the lock; again, or after a loss, it sends
 * nothing and returns LC_OK. LC_ERR_STALE_TOKEN when the server no longer
 * held it (the lock then counts lost).
 */
lc_status lc_lock_release(lc_lock_t *l);

/*
 * lc_lock_renew starts the lease again for lease_ms (0: the last lease it
 * had); a lock without a lease gets one when lease_ms is not 0.
 * LC_ERR_STALE_TOKEN or the loss reason when it is no longer held.
 */
lc_status lc_lock_renew(lc_lock_t *l, uint32_t lease_ms);

/* lc_lock_orphan stops caring: nothing is released, the server keeps the lock. */
void lc_lock_orphan(lc_lock_t *l);

/* LC_OK while held, else why it ended (LC_ERR_LEASE_EXPIRED, LC_ERR_RESET, ...). */
lc_status lc_lock_lost(lc_lock_t *l);

uint64_t lc_lock_token(const lc_lock_t *l);
uint32_t lc_lock_count(const lc_lock_t *l);
/* lc_lock_key returns the key and its length. */
const void *lc_lock_key(const lc_lock_t *l, size_t *len);

/*
 * lc_lock_free releases the lock if it is held (bounded by the read
 * timeout), waits for a running on_lost callback, and frees the handle.
 * Never call it from the lock's own on_lost callback. NULL is ignored.
 */
void lc_lock_free(lc_lock_t *l);

/* The holder of a key, as DESCRIBE reports it. */
typedef struct lc_holder {
    uint64_t token;
    uint64_t session;
    uint32_t held_ms;
    bool shared;
    uint32_t count;
    char name[128];
    char note[1025];
} lc_holder;

/*
 * lc_describe reports up to max holders of key into holders and their
 * number in *n (all of them, which may be more than max), and the number
 * of requests waiting in *queue (either may be NULL).
 */
lc_status lc_describe(lc_session *s, const void *key, size_t key_len, lc_holder *holders, size_t max,
                      size_t *n, uint32_t *queue);

/* lc_last_message: the server's message of the calling thread's last failure, "" when none. */
const char *lc_last_message(void);

#ifdef __cplusplus
}
#endif

#endif
