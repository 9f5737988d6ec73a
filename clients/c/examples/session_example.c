/*
 * session_example.c - a session: take a key with a lease, renew it, learn
 * of its loss, release it; then a try that may find the key busy.
 *
 *   session_example [ADDRESSES]    default localhost:22119
 */
#include "lc_session.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

static void lost(lc_lock_t *lock, lc_status reason, void *arg) {
    (void)arg;
    fprintf(stderr, "lost token %" PRIu64 ": %s\n", lc_lock_token(lock), lc_strerror(reason));
}

int main(int argc, char **argv) {
    const char *addresses = argc > 1 ? argv[1] : "localhost:22119";
    lc_session_options so;
    lc_session_options_init(&so);
    so.name = "example-worker";
    so.ttl_ms = 10000;
    lc_session *s;
    lc_status st = lc_session_connect(&s, addresses, &so);
    if (st != LC_OK) {
        fprintf(stderr, "connect: %s %s\n", lc_strerror(st), lc_last_message());
        return 2;
    }

    lc_acquire_options ao;
    lc_acquire_options_init(&ao);
    ao.lease_ms = 30000;           /* the lock ends by itself unless renewed */
    ao.note = "nightly export";    /* shown to whoever lists the key */
    ao.on_lost = lost;             /* or poll lc_lock_lost */
    lc_lock_t *lock;
    st = lc_acquire(s, "orders/batch-7", strlen("orders/batch-7"), &ao, &lock);
    if (st != LC_OK) {
        fprintf(stderr, "acquire: %s %s\n", lc_strerror(st), lc_last_message());
        lc_session_close(s);
        return 1;
    }
    printf("holding orders/batch-7, token %" PRIu64 "\n", lc_lock_token(lock));
    /* ... work, giving the token to every write ... */
    if (lc_lock_renew(lock, 0) == LC_OK && lc_lock_lost(lock) == LC_OK) printf("renewed\n");
    lc_lock_release(lock);
    lc_lock_free(lock);

    lc_lock_t *maybe;
    st = lc_try_acquire(s, "orders/batch-7", strlen("orders/batch-7"), NULL, &maybe);
    if (st == LC_BUSY) printf("busy: someone else holds it\n");
    else if (st == LC_OK) printf("got it again, token %" PRIu64 "\n", lc_lock_token(maybe));
    lc_lock_free(maybe);
    return lc_session_close(s) == LC_OK ? 0 : 1;
}
