/*
 * conn.h - one connection of a session: a non-blocking TCP socket, with
 * TLS through OpenSSL when the library is built with LC_HAVE_OPENSSL. Not
 * installed.
 */
#ifndef LC_CONN_H
#define LC_CONN_H

#include "lc_session.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct lc_conn {
    int fd;        /* -1: no connection */
    void *ssl;     /* SSL *, or NULL without TLS */
} lc_conn;

/* lc_tls_new makes the TLS context of o (NULL when o->tls is off). */
lc_status lc_tls_new(const lc_session_options *o, void **ctx);
void lc_tls_free(void *ctx);

/*
 * lc_conn_open connects to address ("host:port") by deadline (a point of
 * lc__now_ms), the TLS handshake included when tls is not NULL; the
 * server's certificate is checked for server_name, or the address's host.
 */
lc_status lc_conn_open(lc_conn *c, const char *address, int connect_timeout_ms, void *tls,
                       const char *server_name, int64_t deadline);

/* lc_conn_read returns the bytes read, 0 when none are ready, -1 at the end or an error. */
long lc_conn_read(lc_conn *c, void *buf, size_t n);

/* lc_conn_write returns the bytes written (0: the socket takes none now), -1 on an error. */
long lc_conn_write(lc_conn *c, const void *buf, size_t n);

/* lc_conn_wait waits up to timeout_ms (-1: for ever) for c to be readable (or writable when out). */
int lc_conn_wait(lc_conn *c, bool out, int timeout_ms);

/* lc_conn_pending reports whether TLS holds bytes read and not yet returned. */
bool lc_conn_pending(lc_conn *c);

void lc_conn_close(lc_conn *c);

#endif
