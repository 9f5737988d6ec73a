/*
 * conn.c - the connections of sessions: TCP, and TLS through OpenSSL when
 * built with LC_HAVE_OPENSSL. See conn.h.
 */
#define _POSIX_C_SOURCE 200809L

#include "conn.h"
#include "internal.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#ifdef LC_HAVE_OPENSSL
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#endif

#ifdef MSG_NOSIGNAL
#define SEND_FLAGS MSG_NOSIGNAL
#else
#define SEND_FLAGS 0
#endif

bool lc_tls_available(void) {
#ifdef LC_HAVE_OPENSSL
    return true;
#else
    return false;
#endif
}

lc_status lc_tls_new(const lc_session_options *o, void **out) {
    *out = NULL;
    if (!o->tls) return LC_OK;
#ifdef LC_HAVE_OPENSSL
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    if (ctx == NULL) return LC_ERR_TLS;
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
    SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    bool ok = o->ca_file != NULL ? SSL_CTX_load_verify_locations(ctx, o->ca_file, NULL) == 1
                                 : SSL_CTX_set_default_verify_paths(ctx) == 1;
    if (ok && o->cert_file != NULL) {
        ok = SSL_CTX_use_certificate_chain_file(ctx, o->cert_file) == 1 &&
             SSL_CTX_use_PrivateKey_file(ctx, o->key_file != NULL ? o->key_file : o->cert_file,
                                         SSL_FILETYPE_PEM) == 1;
    }
    if (!ok) {
        SSL_CTX_free(ctx);
        return LC_ERR_TLS;
    }
    *out = ctx;
    return LC_OK;
#else
    return LC_ERR_NO_TLS;
#endif
}

void lc_tls_free(void *ctx) {
#ifdef LC_HAVE_OPENSSL
    SSL_CTX_free(ctx);
#else
    (void)ctx;
#endif
}

static int wait_fd(int fd, short events, int timeout_ms) {
    struct pollfd p = {.fd = fd, .events = events};
    int n;
    do n = poll(&p, 1, timeout_ms);
    while (n < 0 && errno == EINTR);
    return n;
}

#ifdef LC_HAVE_OPENSSL
static int left_ms(int64_t deadline) {
    int64_t left = deadline - lc__now_ms();
    return left <= 0 ? 0 : left > 1000000 ? 1000000 : (int)left;
}
#endif

lc_status lc_conn_open(lc_conn *c, const char *address, int connect_timeout_ms, void *tls,
                       const char *server_name, int64_t deadline) {
    c->fd = -1;
    c->ssl = NULL;
    lc_client target;
    lc_status st = lc_client_init(&target, address, NULL, 0);
    if (st != LC_OK) return st;
    target.connect_timeout_ms = connect_timeout_ms;
    int fd;
    st = lc__dial(&target, deadline, &fd);
    if (st == LC_ERR_TIMEOUT) st = LC_ERR_CONNECT;
    if (st != LC_OK) return st;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    c->fd = fd;
    if (tls == NULL) return LC_OK;
#ifdef LC_HAVE_OPENSSL
    SSL *ssl = SSL_new(tls);
    if (ssl == NULL) {
        lc_conn_close(c);
        return LC_ERR_TLS;
    }
    c->ssl = ssl;
    const char *name = server_name != NULL ? server_name : target.host;
    SSL_set_fd(ssl, fd);
    SSL_set_tlsext_host_name(ssl, name);
    SSL_set1_host(ssl, name);
    for (;;) {
        int r = SSL_connect(ssl);
        if (r == 1) return LC_OK;
        int e = SSL_get_error(ssl, r);
        short ev = e == SSL_ERROR_WANT_READ ? POLLIN : e == SSL_ERROR_WANT_WRITE ? POLLOUT : 0;
        if (ev == 0) {
            ERR_clear_error();
            lc_conn_close(c);
            return LC_ERR_TLS;
        }
        if (wait_fd(fd, ev, left_ms(deadline)) <= 0) {
            lc_conn_close(c);
            return LC_ERR_READ_TIMEOUT;
        }
    }
#else
    (void)server_name;
    lc_conn_close(c);
    return LC_ERR_NO_TLS;
#endif
}

#ifdef LC_HAVE_OPENSSL
/* tls_result maps what SSL_read or SSL_write returned, r, to the bytes
 * moved, 0 when the socket is not ready, or -1. */
static long tls_result(SSL *ssl, int r) {
    if (r > 0) return r;
    int e = SSL_get_error(ssl, r);
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) return 0;
    ERR_clear_error();
    return -1;
}
#endif

long lc_conn_read(lc_conn *c, void *buf, size_t n) {
#ifdef LC_HAVE_OPENSSL
    if (c->ssl != NULL) {
        return tls_result(c->ssl, SSL_read(c->ssl, buf, n > 1 << 30 ? 1 << 30 : (int)n));
    }
#endif
    ssize_t r = recv(c->fd, buf, n, 0);
    if (r > 0) return (long)r;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return 0;
    return -1;
}

long lc_conn_write(lc_conn *c, const void *buf, size_t n) {
#ifdef LC_HAVE_OPENSSL
    if (c->ssl != NULL) {
        return tls_result(c->ssl, SSL_write(c->ssl, buf, n > 1 << 30 ? 1 << 30 : (int)n));
    }
#endif
    ssize_t r = send(c->fd, buf, n, SEND_FLAGS);
    if (r >= 0) return (long)r;
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return 0;
    return -1;
}

int lc_conn_wait(lc_conn *c, bool out, int timeout_ms) {
#ifdef LC_HAVE_OPENSSL
    if (c->ssl != NULL && !out && SSL_pending(c->ssl) > 0) return 1;
#endif
    return wait_fd(c->fd, (short)(POLLIN | (out ? POLLOUT : 0)), timeout_ms);
}

bool lc_conn_pending(lc_conn *c) {
#ifdef LC_HAVE_OPENSSL
    return c->ssl != NULL && SSL_pending(c->ssl) > 0;
#else
    (void)c;
    return false;
#endif
}

void lc_conn_close(lc_conn *c) {
#ifdef LC_HAVE_OPENSSL
    if (c->ssl != NULL) SSL_free(c->ssl);
#endif
    c->ssl = NULL;
    if (c->fd >= 0) close(c->fd);
    c->fd = -1;
}
