/*
 * lockingcenter.h - C client of Locking-Center, a lock server that grants
 * named keys to one holder at a time, waiters served in order of arrival.
 *
 * Every call opens one TCP connection to the mutex port, sends one request,
 * reads the one-byte answer and closes the connection. A lock is not tied to
 * the connection: it stays held until lc_unlock or a reset, even after the
 * process exits.
 *
 * Keys and sources are byte strings given as pointer and length; any byte,
 * 0x00 included, is allowed. A key is 1..LC_MAX_KEY_LEN bytes, a source
 * 0..LC_MAX_SOURCE_LEN bytes; both are checked before anything is sent.
 *
 * Functions return an lc_status: LC_OK, or a negative error code that
 * lc_strerror describes. For LC_ERR_CONNECT and LC_ERR_IO, errno holds the
 * system error on return.
 *
 * Every call that does not wait for a key (lc_trylock, lc_unlock, the
 * resets, and the release of lc_wait) gives up after the client's
 * read_timeout_ms with LC_ERR_READ_TIMEOUT, so a server that accepts and
 * never answers cannot hang it. A lock has no read timeout. An lc_client is read-only during calls, so one
 * client may be shared by several threads.
 *
 * Requires C11 and POSIX sockets. Link with the static library liblockingcenter.a.
 */
#ifndef LOCKINGCENTER_H
#define LOCKINGCENTER_H

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bounds of keys and sources, in bytes. */
#define LC_MAX_KEY_LEN 127
#define LC_MAX_SOURCE_LEN 127

/* The longest request on the wire: action, key, source, with their lengths. */
#define LC_MAX_REQUEST_LEN (1 + 1 + LC_MAX_KEY_LEN + 1 + LC_MAX_SOURCE_LEN)

/* Connect timeout a client starts with, in milliseconds. */
#define LC_DEFAULT_CONNECT_TIMEOUT_MS 5000

/* Read timeout a client starts with, in milliseconds. */
#define LC_DEFAULT_READ_TIMEOUT_MS 10000

/*
 * Results of the library. LC_OK and LC_BUSY (a session's try that found
 * the key held) are not failures; every negative value is. The codes from
 * LC_ERR_STALE_TOKEN on belong to the session client (lc_session.h).
 */
typedef enum lc_status {
    LC_OK = 0,
    LC_BUSY = 1,                 /* a try found the key held, or in its lock-delay */
    LC_ERR_INVALID_KEY = -1,     /* key empty or longer than 127 bytes; nothing sent */
    LC_ERR_INVALID_SOURCE = -2,  /* source longer than 127 bytes; nothing sent */
    LC_ERR_INVALID_ADDRESS = -3, /* address is not "host:port" */
    LC_ERR_INVALID_ARGUMENT = -4,/* a NULL pointer or an unknown action */
    LC_ERR_RESOLVE = -5,         /* the host name did not resolve */
    LC_ERR_CONNECT = -6,         /* no connection could be made; see errno */
    LC_ERR_IO = -7,              /* sending or receiving failed; see errno */
    LC_ERR_CLOSED = -8,          /* the server closed before answering */
    LC_ERR_FAILED = -9,          /* the server answered '-': refused or withdrawn */
    LC_ERR_PROTOCOL = -10,       /* the server answered a byte the protocol does not define */
    LC_ERR_CANCELLED = -11,      /* the lc_cancel was fired; the request is withdrawn */
    LC_ERR_TIMEOUT = -12,        /* the deadline passed; the request is withdrawn */
    LC_ERR_SYSTEM = -13,         /* a system resource (socket, pipe) was unavailable; see errno */
    LC_ERR_READ_TIMEOUT = -14,   /* no answer within read_timeout_ms; whether the server applied it is unknown */
    LC_ERR_STALE_TOKEN = -15,    /* the token is not a holder of that key now: nothing changed */
    LC_ERR_LOCK_LOST = -16,      /* the lock ended without a release, for no reason more exact */
    LC_ERR_LEASE_EXPIRED = -17,  /* the lock's own lease ran out */
    LC_ERR_SESSION_EXPIRED = -18,/* the session's TTL passed without a frame heard; it is over */
    LC_ERR_RESET = -19,          /* a reset took the key or withdrew the request */
    LC_ERR_SESSION_CLOSED = -20, /* lc_session_close was called */
    LC_ERR_LOCK_RELEASED = -21,  /* the lock was released (lc_lock_release, or the session's close) */
    LC_ERR_LOCK_ORPHANED = -22,  /* lc_lock_orphan was called; the server still holds the key */
    LC_ERR_NOT_LEADER = -23,     /* no address given leads the cluster */
    LC_ERR_UNAUTHENTICATED = -24,/* the server wants a valid token */
    LC_ERR_FORBIDDEN = -25,      /* the token may not use that key */
    LC_ERR_RATE_LIMITED = -26,   /* the source sent more requests than the server allows */
    LC_ERR_OVER_LIMIT = -27,     /* the source holds, or has waiting, as many as the server allows */
    LC_ERR_DEADLOCK = -28,       /* the acquire would wait for itself */
    LC_ERR_LIMIT_MISMATCH = -29, /* the acquire's limit is not the key's */
    LC_ERR_UPGRADE = -30,        /* a shared holder asked for the key exclusively */
    LC_ERR_BAD_REQUEST = -31,    /* the server found a field missing or out of range */
    LC_ERR_UNSUPPORTED = -32,    /* the server does not know a field the request carried */
    LC_ERR_NOT_DURABLE = -33,    /* the server could not write the change to its log */
    LC_ERR_DUPLICATE = -34,      /* the request id was not above what the server applied */
    LC_ERR_ANSWER_LOST = -35,    /* the answer went with a dropped connection; the outcome is unknown */
    LC_ERR_TLS = -36,            /* the TLS handshake or a certificate failed */
    LC_ERR_NO_TLS = -37          /* TLS asked for, and the library was built without OpenSSL */
} lc_status;

/* Action bytes of the mutex port. */
typedef enum lc_action {
    LC_ACTION_LOCK = 1,
    LC_ACTION_UNLOCK = 2,
    LC_ACTION_RESET_KEY = 3,
    LC_ACTION_RESET_SOURCE = 4,
    LC_ACTION_TRYLOCK = 5
} lc_action;

/* Answer bytes of the mutex port. */
#define LC_ANSWER_OK ((unsigned char)'+')
#define LC_ANSWER_FAILED ((unsigned char)'-')
#define LC_ANSWER_BUSY ((unsigned char)'#')

/*
 * A client of one server. Fill it with lc_client_init; connect_timeout_ms
 * may be changed afterwards (a value <= 0 leaves the connect unbounded
 * except by the system and by a call's own deadline), and so may
 * read_timeout_ms: the bound, from the connect to the answer, on every call
 * that does not wait for a key (a value <= 0 leaves them unbounded).
 */
typedef struct lc_client {
    char host[256];
    char port[8];
    unsigned char source[LC_MAX_SOURCE_LEN];
    size_t source_len;
    int connect_timeout_ms;
    int read_timeout_ms;
} lc_client;

/*
 * A cancellation handle. Fire it from any thread (or a signal handler) to
 * make every call using it return LC_ERR_CANCELLED: the call closes its
 * connection, so the server withdraws a parked lock request. A fired handle
 * stays fired; use a new one for new calls.
 */
typedef struct lc_cancel {
    int fds[2];
} lc_cancel;

/*
 * lc_client_init prepares c for the server at address, "host:port" or
 * "[ipv6]:port" (an empty host means this machine). source names the owner
 * of the locks the client takes, for reset by source; NULL or source_len 0
 * lets the server use the client's IP address.
 * Errors: LC_ERR_INVALID_ARGUMENT, LC_ERR_INVALID_ADDRESS, LC_ERR_INVALID_SOURCE.
 */
lc_status lc_client_init(lc_client *c, const char *address, const void *source, size_t source_len);

/*
 * lc_lock blocks until key is granted to this client, however long that
 * takes. There is no read timeout; use lc_lock_cancellable to bound it.
 * Errors: LC_ERR_INVALID_KEY and every network error; LC_ERR_FAILED when
 * the server refused the request or a reset of the source withdrew it.
 */
lc_status lc_lock(const lc_client *c, const void *key, size_t key_len);

/*
 * lc_lock_cancellable is lc_lock that gives up when cancel (may be NULL) is
 * fired or after timeout_ms milliseconds (negative: no deadline), returning
 * LC_ERR_CANCELLED or LC_ERR_TIMEOUT. Giving up closes the connection, so
 * the server withdraws the request and never grants it.
 */
lc_status lc_lock_cancellable(const lc_client *c, const void *key, size_t key_len,
                              const lc_cancel *cancel, int timeout_ms);

/*
 * lc_trylock takes key only if it is free now. On LC_OK, *acquired tells
 * whether this client now holds the key (true) or another holder has it
 * (false, "busy": not a failure). LC_ERR_READ_TIMEOUT when no answer came
 * within read_timeout_ms.
 */
lc_status lc_trylock(const lc_client *c, const void *key, size_t key_len, bool *acquired);

/* lc_unlock releases key, whoever holds it; releasing a free key succeeds. */
lc_status lc_unlock(const lc_client *c, const void *key, size_t key_len);

/*
 * lc_wait blocks until key is free and returns holding nothing: it takes
 * the key and releases it at once. lc_wait_cancellable bounds the wait as
 * lc_lock_cancellable does; the release itself is never cancelled, and is
 * bounded by read_timeout_ms as lc_unlock is.
 */
lc_status lc_wait(const lc_client *c, const void *key, size_t key_len);
lc_status lc_wait_cancellable(const lc_client *c, const void *key, size_t key_len,
                              const lc_cancel *cancel, int timeout_ms);

/* lc_reset_by_key takes key from its holder; the first waiter gets it. */
lc_status lc_reset_by_key(const lc_client *c, const void *key, size_t key_len);

/*
 * lc_reset_by_source releases every key held by source and withdraws every
 * parked request of source (those calls return LC_ERR_FAILED).
 * Errors: LC_ERR_INVALID_SOURCE and every network error.
 */
lc_status lc_reset_by_source(const lc_client *c, const void *source, size_t source_len);

/*
 * lc_cancel_init makes a handle that is not fired; lc_cancel_destroy frees
 * it once no call uses it. lc_cancel_fire is thread-safe and
 * async-signal-safe; firing twice is harmless.
 * Errors of lc_cancel_init: LC_ERR_INVALID_ARGUMENT, LC_ERR_SYSTEM.
 */
lc_status lc_cancel_init(lc_cancel *cancel);
void lc_cancel_fire(const lc_cancel *cancel);
void lc_cancel_destroy(lc_cancel *cancel);

/*
 * lc_encode_request writes the wire form of one request to out and its
 * length to *out_len. key is ignored for LC_ACTION_RESET_SOURCE and source
 * for LC_ACTION_UNLOCK and LC_ACTION_RESET_KEY; either may be NULL when its
 * length is 0. Errors: LC_ERR_INVALID_KEY, LC_ERR_INVALID_SOURCE,
 * LC_ERR_INVALID_ARGUMENT.
 */
lc_status lc_encode_request(lc_action action, const void *key, size_t key_len,
                            const void *source, size_t source_len,
                            unsigned char out[LC_MAX_REQUEST_LEN], size_t *out_len);

/*
 * lc_decode_answer interprets the answer byte to a request of action:
 * LC_OK with *busy false for '+', LC_OK with *busy true for '#' to a
 * trylock, LC_ERR_FAILED for '-', LC_ERR_PROTOCOL for anything else.
 */
lc_status lc_decode_answer(lc_action action, unsigned char answer, bool *busy);

/* lc_strerror returns a static, human-readable description of status. */
const char *lc_strerror(lc_status status);

#ifdef __cplusplus
}
#endif

#endif /* LOCKINGCENTER_H */
