/*
 * frame.c - encoding and decoding of the session protocol's frames; see
 * frame.h and docs/protocol.md.
 */
#include "frame.h"

#include <stdlib.h>
#include <string.h>

/* fixed_size gives the value size of the tags of fixed size. */
static const uint8_t fixed_size[256] = {
    [LC_T_TTL] = 4, [LC_T_SESSION] = 8, [LC_T_SECRET] = LC_SECRET_LEN, [LC_T_TOKEN] = 8, [LC_T_WAIT] = 4,
    [LC_T_LEASE] = 4, [LC_T_DELAY] = 4, [LC_T_TARGET] = 8, [LC_T_CODE] = 1, [LC_T_QUEUE] = 4,
    [LC_T_APPLIED] = 8, [LC_T_LEFT] = 4, [LC_T_HELD_MS] = 4, [LC_T_KEEPALIVE] = 4, [LC_T_REQUEST] = 8,
    [LC_T_MODE] = 1, [LC_T_LIMIT] = 4, [LC_T_PRIORITY] = 4, [LC_T_REENTRANT] = 1, [LC_T_COUNT] = 4,
    [LC_T_EVENT] = 1, [LC_T_AT] = 8, [LC_T_MORE] = 1, [LC_T_LAPSE] = 1,
};

static bool is_list(uint8_t tag) { return tag == LC_T_HELD || tag == LC_T_PARKED || tag == LC_T_HOLDER; }

bool lc_buf_reserve(lc_buf *b, size_t more) {
    if (b->cap - b->n >= more) return true;
    size_t cap = b->cap ? b->cap : 256;
    while (cap - b->n < more) cap *= 2;
    uint8_t *nb = realloc(b->b, cap);
    if (nb == NULL) return false;
    b->b = nb;
    b->cap = cap;
    return true;
}

bool lc_buf_put(lc_buf *b, const void *p, size_t n) {
    if (!lc_buf_reserve(b, n)) return false;
    if (n > 0) memcpy(b->b + b->n, p, n);
    b->n += n;
    return true;
}

void lc_buf_free(lc_buf *b) {
    free(b->b);
    b->b = NULL;
    b->n = b->cap = 0;
}

static void be(uint8_t *p, uint64_t v, int size) {
    for (int i = size - 1; i >= 0; i--, v >>= 8) p[i] = (uint8_t)v;
}

bool lc_frame_begin(lc_buf *b, uint8_t type, uint64_t id, size_t *start) {
    if (!lc_buf_reserve(b, 13)) return false;
    *start = b->n;
    uint8_t *p = b->b + b->n;
    p[4] = type;
    be(p + 5, id, 8);
    b->n += 13;
    return true;
}

void lc_frame_end(lc_buf *b, size_t start) { be(b->b + start, b->n - start - 4, 4); }

bool lc_put_bytes(lc_buf *b, uint8_t tag, const void *v, size_t n) {
    if (!lc_buf_reserve(b, 3 + n)) return false;
    uint8_t *p = b->b + b->n;
    p[0] = tag;
    be(p + 1, n, 2);
    if (n > 0) memcpy(p + 3, v, n);
    b->n += 3 + n;
    return true;
}

static bool put_int(lc_buf *b, uint8_t tag, uint64_t v, int size) {
    uint8_t p[8];
    be(p, v, size);
    return lc_put_bytes(b, tag, p, (size_t)size);
}

bool lc_put_u8(lc_buf *b, uint8_t tag, uint8_t v) { return put_int(b, tag, v, 1); }
bool lc_put_u32(lc_buf *b, uint8_t tag, uint32_t v) { return put_int(b, tag, v, 4); }
bool lc_put_u64(lc_buf *b, uint8_t tag, uint64_t v) { return put_int(b, tag, v, 8); }

static uint64_t read_be(const uint8_t *p, size_t n) {
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) v = v << 8 | p[i];
    return v;
}

bool lc_fields_parse(const uint8_t *b, size_t n, lc_frame *f, const char **why) {
    f->n = 0;
    uint8_t seen[256] = {0};
    while (n > 0) {
        if (n < 3) {
            *why = "a field header cut short";
            return false;
        }
        uint8_t tag = b[0];
        size_t size = (size_t)read_be(b + 1, 2);
        if (size > n - 3) {
            *why = "a field runs past its frame";
            return false;
        }
        if (fixed_size[tag] != 0 && size != fixed_size[tag]) {
            *why = "a field of fixed size with a value of another size";
            return false;
        }
        if (seen[tag] && !is_list(tag)) {
            *why = "a tag given twice";
            return false;
        }
        seen[tag] = 1;
        if (is_list(tag)) {
            lc_frame item = {0};
            bool ok = lc_fields_parse(b + 3, size, &item, why);
            lc_frame_free(&item);
            if (!ok) return false;
        }
        if (f->n == f->cap) {
            size_t cap = f->cap ? f->cap * 2 : 16;
            lc_field *nf = realloc(f->fields, cap * sizeof *nf);
            if (nf == NULL) {
                *why = "out of memory";
                return false;
            }
            f->fields = nf;
            f->cap = cap;
        }
        f->fields[f->n++] = (lc_field){tag, (uint16_t)size, b + 3};
        b += 3 + size;
        n -= 3 + size;
    }
    return true;
}

long lc_frame_parse(const uint8_t *b, size_t n, lc_frame *f, const char **why) {
    if (n < 4) return 0;
    uint64_t len = read_be(b, 4);
    if (len < LC_FRAME_HEAD || len > LC_FRAME_MAX) {
        *why = "a frame length outside 9 to 65,536";
        return -1;
    }
    if (n < 4 + len) return 0;
    f->type = b[4];
    f->id = read_be(b + 5, 8);
    if (!lc_fields_parse(b + 13, (size_t)len - LC_FRAME_HEAD, f, why)) return -1;
    return (long)(4 + len);
}

void lc_frame_free(lc_frame *f) {
    free(f->fields);
    f->fields = NULL;
    f->n = f->cap = 0;
}

const lc_field *lc_frame_get(const lc_frame *f, uint8_t tag) {
    for (size_t i = 0; i < f->n; i++)
        if (f->fields[i].tag == tag) return &f->fields[i];
    return NULL;
}

bool lc_frame_uint(const lc_frame *f, uint8_t tag, uint64_t *out) {
    const lc_field *fl = lc_frame_get(f, tag);
    if (fl == NULL || fl->len > 8) return false;
    *out = read_be(fl->value, fl->len);
    return true;
}

uint64_t lc_frame_uint_or(const lc_frame *f, uint8_t tag, uint64_t dflt) {
    uint64_t v;
    return lc_frame_uint(f, tag, &v) ? v : dflt;
}

lc_status lc_code_status(uint64_t code) {
    switch (code) {
    case LC_C_BUSY: return LC_BUSY;
    case LC_C_TIMEOUT: return LC_ERR_TIMEOUT;
    case LC_C_CANCELLED: return LC_ERR_CANCELLED;
    case LC_C_RESET: return LC_ERR_RESET;
    case LC_C_STALE_TOKEN: return LC_ERR_STALE_TOKEN;
    case LC_C_DUPLICATE: return LC_ERR_DUPLICATE;
    case LC_C_BAD_REQUEST: return LC_ERR_BAD_REQUEST;
    case LC_C_UNSUPPORTED: return LC_ERR_UNSUPPORTED;
    case LC_C_SESSION_ENDED: return LC_ERR_SESSION_EXPIRED;
    case LC_C_NOT_DURABLE: return LC_ERR_NOT_DURABLE;
    case LC_C_LEASE_EXPIRED: return LC_ERR_LEASE_EXPIRED;
    case LC_C_SESSION_EXPIRED: return LC_ERR_SESSION_EXPIRED;
    case LC_C_PROTOCOL_ERROR: return LC_ERR_PROTOCOL;
    case LC_C_UNKNOWN_SESSION: return LC_ERR_SESSION_EXPIRED;
    case LC_C_SHUTTING_DOWN: return LC_ERR_CLOSED;
    case LC_C_DEADLOCK: return LC_ERR_DEADLOCK;
    case LC_C_LIMIT_MISMATCH: return LC_ERR_LIMIT_MISMATCH;
    case LC_C_UPGRADE: return LC_ERR_UPGRADE;
    case LC_C_NOT_LEADER: return LC_ERR_NOT_LEADER;
    case LC_C_SLOW_CONSUMER: return LC_ERR_OVER_LIMIT;
    case LC_C_UNAUTHENTICATED: return LC_ERR_UNAUTHENTICATED;
    case LC_C_FORBIDDEN: return LC_ERR_FORBIDDEN;
    case LC_C_RATE_LIMITED: return LC_ERR_RATE_LIMITED;
    case LC_C_OVER_LIMIT: return LC_ERR_OVER_LIMIT;
    }
    return LC_ERR_FAILED;
}

const char *lc_code_name(uint64_t code) {
    static const char *const names[] = {
        NULL, "busy", "timeout", "cancelled", "reset", "stale_token", "duplicate", "bad_request",
        "unsupported", "session_ended", "not_durable", "lease_expired", "session_expired",
        "protocol_error", "unknown_session", "shutting_down", "deadlock", "limit_mismatch", "upgrade",
        "not_leader", "slow_consumer", "unauthenticated", "forbidden", "rate_limited", "over_limit",
    };
    return code > 0 && code < sizeof names / sizeof names[0] ? names[code] : "unknown code";
}
