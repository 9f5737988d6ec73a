/*
 * frame.h - the frames of the session protocol (docs/protocol.md, "Mutex
 * port, session protocol (v2)"): [length u32][type u8][id u64][fields],
 * the length counting the bytes after itself (9 to LC_FRAME_MAX); a field
 * is [tag u8][size u16][value]. Integers are big-endian. Not installed.
 */
#ifndef LC_FRAME_H
#define LC_FRAME_H

#include "lockingcenter.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define LC_PREFACE "LC/2"
#define LC_FRAME_MAX 65536u
#define LC_FRAME_HEAD 9u
#define LC_SECRET_LEN 16u

enum lc_frame_type {
    LC_F_HELLO = 0x01, LC_F_RESUME = 0x02, LC_F_ACQUIRE = 0x03, LC_F_RELEASE = 0x04, LC_F_RENEW = 0x05,
    LC_F_CANCEL = 0x06, LC_F_DESCRIBE = 0x07, LC_F_PING = 0x08, LC_F_CLOSE = 0x09, LC_F_WATCH = 0x0A,
    LC_F_WELCOME = 0x81, LC_F_GRANTED = 0x82, LC_F_OK = 0x83, LC_F_REFUSED = 0x84, LC_F_LOST = 0x85,
    LC_F_INFO = 0x86, LC_F_GOODBYE = 0x87, LC_F_EVENT = 0x88, LC_F_MORE = 0x89
};

enum lc_tag {
    LC_T_KEY = 0x01, LC_T_NAME = 0x02, LC_T_TTL = 0x03, LC_T_CREDENTIAL = 0x04, LC_T_SESSION = 0x05,
    LC_T_SECRET = 0x06, LC_T_TOKEN = 0x07, LC_T_WAIT = 0x08, LC_T_LEASE = 0x09, LC_T_DELAY = 0x0A,
    LC_T_TARGET = 0x0B, LC_T_SERVER = 0x0C, LC_T_CODE = 0x0D, LC_T_MESSAGE = 0x0E, LC_T_QUEUE = 0x0F,
    LC_T_APPLIED = 0x10, LC_T_LEFT = 0x11, LC_T_HELD_MS = 0x12, LC_T_KEEPALIVE = 0x13, LC_T_REQUEST = 0x14,
    LC_T_MODE = 0x15, LC_T_LIMIT = 0x16, LC_T_PRIORITY = 0x17, LC_T_REENTRANT = 0x18, LC_T_OWNER = 0x19,
    LC_T_COUNT = 0x1A, LC_T_LEADER = 0x1B, LC_T_EVENT = 0x1C, LC_T_AT = 0x1D, LC_T_MORE = 0x1E,
    LC_T_NOTE = 0x1F, LC_T_HELD = 0x20, LC_T_PARKED = 0x21, LC_T_HOLDER = 0x22, LC_T_LAPSE = 0x23
};

/* Codes of REFUSED, LOST and GOODBYE. */
enum lc_code {
    LC_C_BUSY = 1, LC_C_TIMEOUT, LC_C_CANCELLED, LC_C_RESET, LC_C_STALE_TOKEN, LC_C_DUPLICATE,
    LC_C_BAD_REQUEST, LC_C_UNSUPPORTED, LC_C_SESSION_ENDED, LC_C_NOT_DURABLE, LC_C_LEASE_EXPIRED,
    LC_C_SESSION_EXPIRED, LC_C_PROTOCOL_ERROR, LC_C_UNKNOWN_SESSION, LC_C_SHUTTING_DOWN, LC_C_DEADLOCK,
    LC_C_LIMIT_MISMATCH, LC_C_UPGRADE, LC_C_NOT_LEADER, LC_C_SLOW_CONSUMER, LC_C_UNAUTHENTICATED,
    LC_C_FORBIDDEN, LC_C_RATE_LIMITED, LC_C_OVER_LIMIT
};

/* One field; a decoded value points into the bytes it was decoded from. */
typedef struct lc_field {
    uint8_t tag;
    uint16_t len;
    const uint8_t *value;
} lc_field;

/* One frame, or one list item (type and id unused). */
typedef struct lc_frame {
    uint8_t type;
    uint64_t id;
    lc_field *fields;
    size_t n, cap;
} lc_frame;

/* A growing byte buffer. */
typedef struct lc_buf {
    uint8_t *b;
    size_t n, cap;
} lc_buf;

bool lc_buf_reserve(lc_buf *b, size_t more);
bool lc_buf_put(lc_buf *b, const void *p, size_t n);
void lc_buf_free(lc_buf *b);

/*
 * Building a frame: lc_frame_begin appends the header (its length filled
 * by lc_frame_end), the lc_put_* append fields. Each returns false only
 * when memory ran out. Callers keep values within their limits.
 */
bool lc_frame_begin(lc_buf *b, uint8_t type, uint64_t id, size_t *start);
void lc_frame_end(lc_buf *b, size_t start);
bool lc_put_bytes(lc_buf *b, uint8_t tag, const void *v, size_t n);
bool lc_put_u8(lc_buf *b, uint8_t tag, uint8_t v);
bool lc_put_u32(lc_buf *b, uint8_t tag, uint32_t v);
bool lc_put_u64(lc_buf *b, uint8_t tag, uint64_t v);

/*
 * lc_frame_parse decodes the frame at the start of b[0..n). It returns
 * the bytes used, 0 when b holds only part of a frame, or -1 for a
 * protocol error (a length outside 9..LC_FRAME_MAX, a field past its
 * frame, a fixed-size field of another size, a tag given twice that is
 * not a list tag, a list item that does not parse) or when memory ran
 * out; *why then names the fault. f's fields point into b.
 */
long lc_frame_parse(const uint8_t *b, size_t n, lc_frame *f, const char **why);

/* lc_fields_parse decodes a sequence of fields (a list item's value). */
bool lc_fields_parse(const uint8_t *b, size_t n, lc_frame *f, const char **why);

void lc_frame_free(lc_frame *f);

/* Lookups: the first field of tag; as an unsigned integer. */
const lc_field *lc_frame_get(const lc_frame *f, uint8_t tag);
bool lc_frame_uint(const lc_frame *f, uint8_t tag, uint64_t *out);
uint64_t lc_frame_uint_or(const lc_frame *f, uint8_t tag, uint64_t dflt);

/* lc_code_status maps a protocol code to the library's status. */
lc_status lc_code_status(uint64_t code);

/* lc_code_name returns a code's name as docs/protocol.md spells it. */
const char *lc_code_name(uint64_t code);

#endif
