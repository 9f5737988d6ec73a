/*
 * lockingcenter.c - the C client of Locking-Center. See lockingcenter.h
 * for the API and docs/protocol.md for the bytes.
 */
#define _POSIX_C_SOURCE 200809L

#include "lockingcenter.h"
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <poll.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#ifdef MSG_NOSIGNAL
#define LC_SEND_FLAGS MSG_NOSIGNAL
#else
#define LC_SEND_FLAGS 0
#endif

/* A point on the monotonic clock in milliseconds; NO_LIMIT for none. */
#define NO_LIMIT ((int64_t)-1)

/* Outcomes of wait_ready. */
enum wait_result { WAIT_READY, WAIT_EXPIRED, WAIT_CANCELLED, WAIT_ERROR };

static int64_t now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* after returns the point ms milliseconds from now, or NO_LIMIT when ms < 0. */
static int64_t after(int ms) {
    return ms < 0 ? NO_LIMIT : now_ms() + ms;
}

static int64_t earliest(int64_t a, int64_t b) {
    if (a == NO_LIMIT) return b;
    if (b == NO_LIMIT) return a;
    return a < b ? a : b;
}

static bool passed(int64_t limit) {
    return limit != NO_LIMIT && now_ms() >= limit;
}

static void close_keep_errno(int fd) {
    int saved = errno;
    close(fd);
    errno = saved;
}

static bool fired(const lc_cancel *cancel) {
    if (cancel == NULL) return false;
    struct pollfd p = {.fd = cancel->fds[0], .events = POLLIN};
    return poll(&p, 1, 0) > 0;
}

/*
 * wait_ready waits until fd reports one of events (or an error condition),
 * cancel is fired, or the limit passes. A ready fd wins over a fired cancel,
 * so an answer that has arrived is never thrown away.
 */
static enum wait_result wait_ready(int fd, short events, const lc_cancel *cancel, int64_t limit) {
    for (;;) {
        struct pollfd p[2] = {{.fd = fd, .events = events}, {.fd = -1}};
        if (cancel != NULL) {
            p[1].fd = cancel->fds[0];
            p[1].events = POLLIN;
        }
        int timeout = -1;
        if (limit != NO_LIMIT) {
            int64_t left = limit - now_ms();
            timeout = left <= 0 ? 0 : (left > INT_MAX ? INT_MAX : (int)left);
        }
        int n = poll(p, 2, timeout);
        if (n < 0) {
            if (errno == EINTR) continue;
            return WAIT_ERROR;
        }
        if (p[0].revents != 0) return WAIT_READY;
        if (p[1].revents != 0) return WAIT_CANCELLED;
        if (n == 0 && passed(limit)) return WAIT_EXPIRED;
    }
}

static int set_flags(int fd) {
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0) return -1;
    if (fcntl(fd, F_SETFD, FD_CLOEXEC) < 0) return -1;
#ifdef SO_NOSIGPIPE
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_NOSIGPIPE, &one, sizeof one);
#endif
    return 0;
}

/*
 * connect_one connects a fresh non-blocking socket to ai. It returns LC_OK
 * with *out set, LC_ERR_CANCELLED, LC_ERR_TIMEOUT (the call's deadline), or
 * LC_ERR_CONNECT / LC_ERR_SYSTEM with errno set.
 */
static lc_status connect_one(const struct addrinfo *ai, const lc_cancel *cancel,
                             int64_t deadline, int64_t connect_limit, int *out) {
    int fd = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
    if (fd < 0) return LC_ERR_SYSTEM;
    if (set_flags(fd) < 0) {
        close_keep_errno(fd);
        return LC_ERR_SYSTEM;
    }
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
        *out = fd;
        return LC_OK;
    }
    if (errno != EINPROGRESS) {
        close_keep_errno(fd);
        return LC_ERR_CONNECT;
    }
    lc_status st = LC_ERR_CONNECT;
    switch (wait_ready(fd, POLLOUT, cancel, earliest(deadline, connect_limit))) {
    case WAIT_READY: {
        int err = 0;
        socklen_t len = sizeof err;
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0) err = errno;
        if (err == 0) {
            *out = fd;
            return LC_OK;
        }
        errno = err;
        break;
    }
    case WAIT_EXPIRED:
        if (passed(deadline)) st = LC_ERR_TIMEOUT;
        errno = ETIMEDOUT;
        break;
    case WAIT_CANCELLED:
        st = LC_ERR_CANCELLED;
        break;
    case WAIT_ERROR:
        break;
    }
    close_keep_errno(fd);
    return st;
}

/* dial connects to the client's server, trying each resolved address. */
static lc_status dial(const lc_client *c, const lc_cancel *cancel, int64_t deadline, int *out) {
    struct addrinfo hints;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    struct addrinfo *res = NULL;
    if (getaddrinfo(c->host[0] != '\0' ? c->host : NULL, c->port, &hints, &res) != 0) {
        return LC_ERR_RESOLVE;
    }
    int64_t connect_limit = c->connect_timeout_ms > 0 ? after(c->connect_timeout_ms) : NO_LIMIT;
    lc_status st = LC_ERR_CONNECT;
    for (const struct addrinfo *ai = res; ai != NULL; ai = ai->ai_next) {
        st = connect_one(ai, cancel, deadline, connect_limit, out);
        if (st == LC_OK || st == LC_ERR_CANCELLED || st == LC_ERR_TIMEOUT) break;
    }
    int saved = errno;
    freeaddrinfo(res);
    errno = saved;
    return st;
}

int64_t lc__now_ms(void) { return now_ms(); }

lc_status lc__dial(const lc_client *c, int64_t deadline, int *out) { return dial(c, NULL, deadline, out); }

static lc_status give_up(enum wait_result w) {
    switch (w) {
    case WAIT_CANCELLED:
        return LC_ERR_CANCELLED;
    case WAIT_EXPIRED:
        return LC_ERR_TIMEOUT;
    default:
        return LC_ERR_IO;
    }
}

static lc_status send_all(int fd, const unsigned char *b, size_t n, const lc_cancel *cancel, int64_t deadline) {
    while (n > 0) {
        ssize_t w = send(fd, b, n, LC_SEND_FLAGS);
        if (w > 0) {
            b += w;
            n -= (size_t)w;
            continue;
        }
        if (w < 0 && errno == EINTR) continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            enum wait_result r = wait_ready(fd, POLLOUT, cancel, deadline);
            if (r != WAIT_READY) return give_up(r);
            continue;
        }
        return LC_ERR_IO;
    }
    return LC_OK;
}

/*
 * recv_answer reads the one answer byte. When the call is cancelled or its
 * deadline passes, an answer that is already there is still taken: a grant
 * that reached this side is reported rather than lost.
 */
static lc_status recv_answer(int fd, unsigned char *answer, const lc_cancel *cancel, int64_t deadline) {
    for (;;) {
        enum wait_result r = wait_ready(fd, POLLIN, cancel, deadline);
        ssize_t n = recv(fd, answer, 1, 0);
        if (n == 1) return LC_OK;
        if (n == 0) return LC_ERR_CLOSED;
        if (errno == EINTR) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) return LC_ERR_IO;
        if (r != WAIT_READY) return give_up(r);
    }
}

/*
 * call sends one request and reads its answer byte. Every action but a lock
 * is bounded, from the connect on, by the client's read timeout.
 */
static lc_status call(const lc_client *c, lc_action action, const unsigned char *req, size_t req_len,
                      const lc_cancel *cancel, int timeout_ms, unsigned char *answer) {
    if (fired(cancel)) return LC_ERR_CANCELLED;
    int64_t deadline = after(timeout_ms);
    int fd = -1;
    lc_status st = dial(c, cancel, deadline, &fd);
    if (st != LC_OK) return st;
    /* A lock waits for its key as long as it takes: no read timeout. */
    bool timed = action != LC_ACTION_LOCK && c->read_timeout_ms > 0;
    int64_t limit = timed ? earliest(deadline, after(c->read_timeout_ms)) : deadline;
    st = send_all(fd, req, req_len, cancel, limit);
    if (st == LC_OK) st = recv_answer(fd, answer, cancel, limit);
    if (st == LC_ERR_TIMEOUT && timed && !passed(deadline)) {
        st = LC_ERR_READ_TIMEOUT;
        errno = ETIMEDOUT;
    }
    close_keep_errno(fd);
    return st;
}

/* request encodes and performs one request; *busy reports a lost trylock. */
static lc_status request(const lc_client *c, lc_action action, const void *key, size_t key_len,
                         const void *source, size_t source_len,
                         const lc_cancel *cancel, int timeout_ms, bool *busy) {
    if (c == NULL) return LC_ERR_INVALID_ARGUMENT;
    unsigned char req[LC_MAX_REQUEST_LEN];
    size_t req_len = 0;
    lc_status st = lc_encode_request(action, key, key_len, source, source_len, req, &req_len);
    if (st != LC_OK) return st;
    unsigned char answer = 0;
    st = call(c, action, req, req_len, cancel, timeout_ms, &answer);
    if (st != LC_OK) return st;
    bool lost = false;
    st = lc_decode_answer(action, answer, &lost);
    if (busy != NULL) *busy = lost;
    return st;
}

lc_status lc_client_init(lc_client *c, const char *address, const void *source, size_t source_len) {
    if (c == NULL || address == NULL || (source == NULL && source_len > 0)) return LC_ERR_INVALID_ARGUMENT;
    if (source_len > LC_MAX_SOURCE_LEN) return LC_ERR_INVALID_SOURCE;
    const char *colon = strrchr(address, ':');
    if (colon == NULL) return LC_ERR_INVALID_ADDRESS;
    const char *host = address;
    size_t host_len = (size_t)(colon - address);
    if (host_len > 0 && host[0] == '[') {
        if (host_len < 2 || host[host_len - 1] != ']') return LC_ERR_INVALID_ADDRESS;
        host++;
        host_len -= 2;
    } else if (memchr(host, ':', host_len) != NULL) {
        return LC_ERR_INVALID_ADDRESS; /* an IPv6 literal needs brackets */
    }
    const char *port = colon + 1;
    size_t port_len = strlen(port);
    if (port_len == 0 || port_len >= sizeof c->port || host_len >= sizeof c->host) return LC_ERR_INVALID_ADDRESS;
    long value = 0;
    for (const char *p = port; *p != '\0'; p++) {
        if (*p < '0' || *p > '9') return LC_ERR_INVALID_ADDRESS;
        value = value * 10 + (*p - '0');
    }
    if (value < 1 || value > 65535) return LC_ERR_INVALID_ADDRESS;

    memset(c, 0, sizeof *c);
    memcpy(c->host, host, host_len);
    memcpy(c->port, port, port_len);
    if (source_len > 0) memcpy(c->source, source, source_len);
    c->source_len = source_len;
    c->connect_timeout_ms = LC_DEFAULT_CONNECT_TIMEOUT_MS;
    c->read_timeout_ms = LC_DEFAULT_READ_TIMEOUT_MS;
    return LC_OK;
}

lc_status lc_lock(const lc_client *c, const void *key, size_t key_len) {
    return lc_lock_cancellable(c, key, key_len, NULL, -1);
}

lc_status lc_lock_cancellable(const lc_client *c, const void *key, size_t key_len,
                              const lc_cancel *cancel, int timeout_ms) {
    if (c == NULL) return LC_ERR_INVALID_ARGUMENT;
    return request(c, LC_ACTION_LOCK, key, key_len, c->source, c->source_len, cancel, timeout_ms, NULL);
}

lc_status lc_trylock(const lc_client *c, const void *key, size_t key_len, bool *acquired) {
    if (c == NULL || acquired == NULL) return LC_ERR_INVALID_ARGUMENT;
    bool busy = false;
    lc_status st = request(c, LC_ACTION_TRYLOCK, key, key_len, c->source, c->source_len, NULL, -1, &busy);
    *acquired = st == LC_OK && !busy;
    return st;
}

lc_status lc_unlock(const lc_client *c, const void *key, size_t key_len) {
    return request(c, LC_ACTION_UNLOCK, key, key_len, NULL, 0, NULL, -1, NULL);
}

lc_status lc_wait(const lc_client *c, const void *key, size_t key_len) {
    return lc_wait_cancellable(c, key, key_len, NULL, -1);
}

lc_status lc_wait_cancellable(const lc_client *c, const void *key, size_t key_len,
                              const lc_cancel *cancel, int timeout_ms) {
    lc_status st = lc_lock_cancellable(c, key, key_len, cancel, timeout_ms);
    if (st != LC_OK) return st;
    return lc_unlock(c, key, key_len);
}

lc_status lc_reset_by_key(const lc_client *c, const void *key, size_t key_len) {
    return request(c, LC_ACTION_RESET_KEY, key, key_len, NULL, 0, NULL, -1, NULL);
}

lc_status lc_reset_by_source(const lc_client *c, const void *source, size_t source_len) {
    return request(c, LC_ACTION_RESET_SOURCE, NULL, 0, source, source_len, NULL, -1, NULL);
}

lc_status lc_cancel_init(lc_cancel *cancel) {
    if (cancel == NULL) return LC_ERR_INVALID_ARGUMENT;
    if (pipe(cancel->fds) < 0) return LC_ERR_SYSTEM;
    for (int i = 0; i < 2; i++) {
        int fl = fcntl(cancel->fds[i], F_GETFL);
        if (fl < 0 || fcntl(cancel->fds[i], F_SETFL, fl | O_NONBLOCK) < 0 ||
            fcntl(cancel->fds[i], F_SETFD, FD_CLOEXEC) < 0) {
            int saved = errno;
            close(cancel->fds[0]);
            close(cancel->fds[1]);
            errno = saved;
            return LC_ERR_SYSTEM;
        }
    }
    return LC_OK;
}

void lc_cancel_fire(const lc_cancel *cancel) {
    if (cancel == NULL) return;
    int saved = errno;
    /* The byte is never read, so the handle stays fired. A full pipe
     * (EAGAIN) means it already is. */
    ssize_t ignored = write(cancel->fds[1], "x", 1);
    (void)ignored;
    errno = saved;
}

void lc_cancel_destroy(lc_cancel *cancel) {
    if (cancel == NULL) return;
    close(cancel->fds[0]);
    close(cancel->fds[1]);
    cancel->fds[0] = cancel->fds[1] = -1;
}

static unsigned char *put_string(unsigned char *p, const void *s, size_t n) {
    *p++ = (unsigned char)n;
    if (n > 0) memcpy(p, s, n);
    return p + n;
}

lc_status lc_encode_request(lc_action action, const void *key, size_t key_len,
                            const void *source, size_t source_len,
                            unsigned char out[LC_MAX_REQUEST_LEN], size_t *out_len) {
    bool with_key = false, with_source = false;
    switch (action) {
    case LC_ACTION_LOCK:
    case LC_ACTION_TRYLOCK:
        with_key = with_source = true;
        break;
    case LC_ACTION_UNLOCK:
    case LC_ACTION_RESET_KEY:
        with_key = true;
        break;
    case LC_ACTION_RESET_SOURCE:
        with_source = true;
        break;
    default:
        return LC_ERR_INVALID_ARGUMENT;
    }
    if (out == NULL || out_len == NULL) return LC_ERR_INVALID_ARGUMENT;
    if (with_key && (key_len == 0 || key_len > LC_MAX_KEY_LEN)) return LC_ERR_INVALID_KEY;
    if (with_key && key == NULL) return LC_ERR_INVALID_ARGUMENT;
    if (with_source && source_len > LC_MAX_SOURCE_LEN) return LC_ERR_INVALID_SOURCE;
    if (with_source && source == NULL && source_len > 0) return LC_ERR_INVALID_ARGUMENT;
    unsigned char *p = out;
    *p++ = (unsigned char)action;
    if (with_key) p = put_string(p, key, key_len);
    if (with_source) p = put_string(p, source, source_len);
    *out_len = (size_t)(p - out);
    return LC_OK;
}

lc_status lc_decode_answer(lc_action action, unsigned char answer, bool *busy) {
    if (busy != NULL) *busy = false;
    switch (answer) {
    case LC_ANSWER_OK:
        return LC_OK;
    case LC_ANSWER_FAILED:
        return LC_ERR_FAILED;
    case LC_ANSWER_BUSY:
        if (action != LC_ACTION_TRYLOCK) return LC_ERR_PROTOCOL;
        if (busy != NULL) *busy = true;
        return LC_OK;
    default:
        return LC_ERR_PROTOCOL;
    }
}

const char *lc_strerror(lc_status status) {
    switch (status) {
    case LC_OK:
        return "success";
    case LC_ERR_INVALID_KEY:
        return "key must be 1 to 127 bytes";
    case LC_ERR_INVALID_SOURCE:
        return "source must be at most 127 bytes";
    case LC_ERR_INVALID_ADDRESS:
        return "address must be host:port";
    case LC_ERR_INVALID_ARGUMENT:
        return "invalid argument";
    case LC_ERR_RESOLVE:
        return "host name did not resolve";
    case LC_ERR_CONNECT:
        return "could not connect to the server";
    case LC_ERR_IO:
        return "network error talking to the server";
    case LC_ERR_CLOSED:
        return "server closed the connection without an answer";
    case LC_ERR_FAILED:
        return "server refused the request";
    case LC_ERR_PROTOCOL:
        return "server sent an answer the protocol does not define";
    case LC_ERR_CANCELLED:
        return "cancelled";
    case LC_ERR_TIMEOUT:
        return "deadline passed";
    case LC_ERR_SYSTEM:
        return "system resource unavailable";
    case LC_ERR_READ_TIMEOUT:
        return "no answer within the read timeout";
    case LC_BUSY:
        return "busy: the key is held";
    case LC_ERR_STALE_TOKEN:
        return "stale token: the lock is not held by it";
    case LC_ERR_LOCK_LOST:
        return "lock lost";
    case LC_ERR_LEASE_EXPIRED:
        return "lease expired";
    case LC_ERR_SESSION_EXPIRED:
        return "session expired";
    case LC_ERR_RESET:
        return "taken by a reset";
    case LC_ERR_SESSION_CLOSED:
        return "session closed";
    case LC_ERR_LOCK_RELEASED:
        return "lock released";
    case LC_ERR_LOCK_ORPHANED:
        return "lock orphaned";
    case LC_ERR_NOT_LEADER:
        return "no address leads the cluster";
    case LC_ERR_UNAUTHENTICATED:
        return "unauthenticated: no valid token";
    case LC_ERR_FORBIDDEN:
        return "forbidden: the token may not use that key";
    case LC_ERR_RATE_LIMITED:
        return "rate limited";
    case LC_ERR_OVER_LIMIT:
        return "over the server's limit";
    case LC_ERR_DEADLOCK:
        return "deadlock: the acquire would wait for itself";
    case LC_ERR_LIMIT_MISMATCH:
        return "limit mismatch: the key is a semaphore of another limit";
    case LC_ERR_UPGRADE:
        return "upgrade refused: release the shared lock first";
    case LC_ERR_BAD_REQUEST:
        return "bad request";
    case LC_ERR_UNSUPPORTED:
        return "unsupported by the server";
    case LC_ERR_NOT_DURABLE:
        return "not durable: the server could not write its log";
    case LC_ERR_DUPLICATE:
        return "duplicate request id";
    case LC_ERR_ANSWER_LOST:
        return "the answer was lost with the connection";
    case LC_ERR_TLS:
        return "TLS handshake or certificate failed";
    case LC_ERR_NO_TLS:
        return "built without TLS (OpenSSL)";
    }
    return "unknown status";
}
