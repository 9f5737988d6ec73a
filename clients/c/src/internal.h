/*
 * internal.h - what the session client (session.c, frame.c) shares with
 * the v1 client (lockingcenter.c). Not installed.
 */
#ifndef LC_INTERNAL_H
#define LC_INTERNAL_H

#include "lockingcenter.h"

#include <stdint.h>

/* lc__now_ms returns the monotonic clock in milliseconds. */
int64_t lc__now_ms(void);

/*
 * lc__dial connects a non-blocking socket to the server of c, each
 * resolved address in turn, within c's connect timeout and by deadline
 * (a point of lc__now_ms; -1: none). LC_ERR_TIMEOUT when the deadline
 * passed, else as lc_lock's connect.
 */
lc_status lc__dial(const lc_client *c, int64_t deadline, int *out);

#endif
