/*
 * json.h - a small, strict JSON reader for the tests (the C standard
 * library has none). It reads a whole document into a tree of json_value.
 */
#ifndef LC_TEST_JSON_H
#define LC_TEST_JSON_H

#include <stdbool.h>
#include <stddef.h>

typedef enum json_type { JSON_NULL, JSON_BOOL, JSON_NUMBER, JSON_STRING, JSON_ARRAY, JSON_OBJECT } json_type;

typedef struct json_value {
    json_type type;
    bool boolean;
    double number;
    char *string;              /* JSON_STRING: UTF-8, NUL-terminated */
    size_t len;                /* JSON_STRING: bytes; ARRAY/OBJECT: items */
    struct json_value *items;  /* ARRAY and OBJECT values */
    char **keys;               /* OBJECT member names, parallel to items */
} json_value;

/*
 * json_parse reads the document text[0..n) into *out. It returns NULL on
 * success, or a static message naming the first error.
 */
const char *json_parse(const char *text, size_t n, json_value *out);

/* json_free frees what json_parse allocated below v. */
void json_free(json_value *v);

/* json_get returns the member name of object v, or NULL. */
const json_value *json_get(const json_value *v, const char *name);

#endif
