/* json.c - see json.h. */
#include "json.h"

#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 64

typedef struct parser {
    const char *p, *end;
    const char *err;
    int depth;
} parser;

static void skip_space(parser *ps) {
    while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r')) ps->p++;
}

static bool fail(parser *ps, const char *msg) {
    if (ps->err == NULL) ps->err = msg;
    return false;
}

static bool literal(parser *ps, const char *word) {
    size_t n = strlen(word);
    if ((size_t)(ps->end - ps->p) < n || memcmp(ps->p, word, n) != 0) return fail(ps, "json: unknown literal");
    ps->p += n;
    return true;
}

static int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static bool read_u16(parser *ps, unsigned *out) {
    if (ps->end - ps->p < 4) return fail(ps, "json: short \\u escape");
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        int d = hex_digit(ps->p[i]);
        if (d < 0) return fail(ps, "json: bad \\u escape");
        v = v * 16 + (unsigned)d;
    }
    ps->p += 4;
    *out = v;
    return true;
}

static size_t put_utf8(char *out, unsigned cp) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xc0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xe0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        out[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    out[0] = (char)(0xf0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    out[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

/* read_escape decodes the escape after a backslash into out. */
static bool read_escape(parser *ps, char *out, size_t *n) {
    if (ps->p >= ps->end) return fail(ps, "json: unterminated string");
    char c = *ps->p++;
    const char *from = "\"\\/bfnrt", *to = "\"\\/\b\f\n\r\t";
    const char *at = strchr(from, c);
    if (c != 'u') {
        if (c == '\0' || at == NULL) return fail(ps, "json: bad escape");
        out[0] = to[at - from];
        *n = 1;
        return true;
    }
    unsigned cp;
    if (!read_u16(ps, &cp)) return false;
    if (cp >= 0xdc00 && cp < 0xe000) return fail(ps, "json: lone low surrogate");
    if (cp >= 0xd800 && cp < 0xdc00) {
        unsigned lo;
        if (ps->end - ps->p < 2 || ps->p[0] != '\\' || ps->p[1] != 'u') return fail(ps, "json: lone high surrogate");
        ps->p += 2;
        if (!read_u16(ps, &lo)) return false;
        if (lo < 0xdc00 || lo >= 0xe000) return fail(ps, "json: bad surrogate pair");
        cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
    }
    *n = put_utf8(out, cp);
    return true;
}

static bool parse_string(parser *ps, char **out, size_t *out_len) {
    ps->p++; /* opening quote */
    /* Escapes never grow the text, so its raw length bounds the result. */
    const char *close = ps->p;
    while (close < ps->end && *close != '"') close += (*close == '\\') ? 2 : 1;
    if (close >= ps->end) return fail(ps, "json: unterminated string");
    char *s = malloc((size_t)(close - ps->p) + 1);
    if (s == NULL) return fail(ps, "json: out of memory");
    size_t n = 0;
    while (*ps->p != '"') {
        unsigned char c = (unsigned char)*ps->p;
        if (c < 0x20) {
            free(s);
            return fail(ps, "json: control character in string");
        }
        if (c != '\\') {
            s[n++] = (char)c;
            ps->p++;
            continue;
        }
        ps->p++;
        size_t used = 0;
        if (!read_escape(ps, s + n, &used)) {
            free(s);
            return false;
        }
        n += used;
    }
    ps->p++; /* closing quote */
    s[n] = '\0';
    *out = s;
    *out_len = n;
    return true;
}

static bool parse_number(parser *ps, json_value *v) {
    const char *start = ps->p;
    if (ps->p < ps->end && *ps->p == '-') ps->p++;
    if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9') return fail(ps, "json: bad number");
    if (*ps->p == '0') {
        ps->p++;
    } else {
        while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9') ps->p++;
    }
    if (ps->p < ps->end && *ps->p == '.') {
        ps->p++;
        if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9') return fail(ps, "json: bad fraction");
        while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9') ps->p++;
    }
    if (ps->p < ps->end && (*ps->p == 'e' || *ps->p == 'E')) {
        ps->p++;
        if (ps->p < ps->end && (*ps->p == '+' || *ps->p == '-')) ps->p++;
        if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9') return fail(ps, "json: bad exponent");
        while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9') ps->p++;
    }
    char buf[64];
    size_t n = (size_t)(ps->p - start);
    if (n >= sizeof buf) return fail(ps, "json: number too long");
    memcpy(buf, start, n);
    buf[n] = '\0';
    v->type = JSON_NUMBER;
    v->number = strtod(buf, NULL);
    return true;
}

static bool parse_value(parser *ps, json_value *v);

/* append grows the item (and key) arrays of v by one slot. */
static json_value *append(parser *ps, json_value *v, char *key) {
    json_value *items = realloc(v->items, (v->len + 1) * sizeof *items);
    if (items == NULL) {
        fail(ps, "json: out of memory");
        return NULL;
    }
    v->items = items;
    if (v->type == JSON_OBJECT) {
        char **keys = realloc(v->keys, (v->len + 1) * sizeof *keys);
        if (keys == NULL) {
            fail(ps, "json: out of memory");
            return NULL;
        }
        v->keys = keys;
        keys[v->len] = key;
    }
    memset(&items[v->len], 0, sizeof items[v->len]);
    return &items[v->len++];
}

static bool parse_container(parser *ps, json_value *v, char close) {
    if (++ps->depth > MAX_DEPTH) return fail(ps, "json: nested too deeply");
    ps->p++;
    skip_space(ps);
    if (ps->p < ps->end && *ps->p == close) {
        ps->p++;
        ps->depth--;
        return true;
    }
    for (;;) {
        char *key = NULL;
        if (v->type == JSON_OBJECT) {
            size_t key_len;
            skip_space(ps);
            if (ps->p >= ps->end || *ps->p != '"') return fail(ps, "json: expected member name");
            if (!parse_string(ps, &key, &key_len)) return false;
            skip_space(ps);
            if (ps->p >= ps->end || *ps->p != ':') {
                free(key);
                return fail(ps, "json: expected ':'");
            }
            ps->p++;
        }
        json_value *item = append(ps, v, key);
        if (item == NULL) {
            free(key);
            return false;
        }
        if (!parse_value(ps, item)) return false;
        skip_space(ps);
        if (ps->p < ps->end && *ps->p == ',') {
            ps->p++;
            continue;
        }
        if (ps->p < ps->end && *ps->p == close) {
            ps->p++;
            ps->depth--;
            return true;
        }
        return fail(ps, "json: expected ',' or end of container");
    }
}

static bool parse_value(parser *ps, json_value *v) {
    skip_space(ps);
    if (ps->p >= ps->end) return fail(ps, "json: unexpected end");
    switch (*ps->p) {
    case '{':
        v->type = JSON_OBJECT;
        return parse_container(ps, v, '}');
    case '[':
        v->type = JSON_ARRAY;
        return parse_container(ps, v, ']');
    case '"':
        v->type = JSON_STRING;
        return parse_string(ps, &v->string, &v->len);
    case 't':
        v->type = JSON_BOOL;
        v->boolean = true;
        return literal(ps, "true");
    case 'f':
        v->type = JSON_BOOL;
        return literal(ps, "false");
    case 'n':
        v->type = JSON_NULL;
        return literal(ps, "null");
    default:
        return parse_number(ps, v);
    }
}

const char *json_parse(const char *text, size_t n, json_value *out) {
    parser ps = {.p = text, .end = text + n};
    memset(out, 0, sizeof *out);
    if (parse_value(&ps, out)) {
        skip_space(&ps);
        if (ps.p != ps.end) fail(&ps, "json: data after the document");
    }
    if (ps.err != NULL) json_free(out);
    return ps.err;
}

void json_free(json_value *v) {
    if (v->type == JSON_ARRAY || v->type == JSON_OBJECT) {
        for (size_t i = 0; i < v->len; i++) {
            json_free(&v->items[i]);
            if (v->keys != NULL) free(v->keys[i]);
        }
    }
    free(v->items);
    free(v->keys);
    free(v->string);
    memset(v, 0, sizeof *v);
}

const json_value *json_get(const json_value *v, const char *name) {
    if (v == NULL || v->type != JSON_OBJECT) return NULL;
    for (size_t i = 0; i < v->len; i++) {
        if (strcmp(v->keys[i], name) == 0) return &v->items[i];
    }
    return NULL;
}
