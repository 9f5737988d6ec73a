/*
 * check.h - what the C client's unit test programs share: CHECK, the run
 * of a table of tests, and the reading of the vector files.
 */
#ifndef LC_TEST_CHECK_H
#define LC_TEST_CHECK_H

#include "json.h"

#include <stdbool.h>
#include <stdio.h>

static int passed, failed;
static const char *current;

/* CHECK fails the running test, saying why, unless cond holds. */
#define CHECK(cond, ...)                                                   \
    do {                                                                   \
        if (!(cond)) {                                                     \
            printf("FAIL %s (%s:%d): ", current, __FILE__, __LINE__);      \
            printf(__VA_ARGS__);                                           \
            printf("\n");                                                  \
            return false;                                                  \
        }                                                                  \
    } while (0)

typedef struct test {
    const char *name;
    bool (*fn)(void);
} test;

/* run_tests runs each test, prints "ok NAME" or its FAIL line, then the
 * counts; it returns the exit status. */
static inline int run_tests(const test *tests, size_t n) {
    for (size_t i = 0; i < n; i++) {
        current = tests[i].name;
        if (tests[i].fn()) {
            passed++;
            printf("ok   %s\n", current);
        } else {
            failed++;
        }
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed == 0 ? 0 : 1;
}

/* load_json reads the JSON file at path into *out. */
static inline bool load_json(const char *path, json_value *out) {
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        printf("FAIL load: cannot open %s\n", path);
        return false;
    }
    static char text[1 << 20];
    size_t n = fread(text, 1, sizeof text, f);
    bool whole = feof(f);
    fclose(f);
    if (!whole) {
        printf("FAIL load: %s is larger than %zu bytes\n", path, sizeof text);
        return false;
    }
    const char *err = json_parse(text, n, out);
    if (err != NULL) {
        printf("FAIL load: %s: %s\n", path, err);
        return false;
    }
    return true;
}

/* unhex decodes the hex string s into b (at most cap bytes) and *n. */
static inline bool unhex(const json_value *s, unsigned char *b, size_t cap, size_t *n) {
    *n = 0;
    if (s == NULL || s->type != JSON_STRING || s->len % 2 != 0 || s->len / 2 > cap) return false;
    for (size_t i = 0; i < s->len; i += 2) {
        unsigned hi, lo;
        if (sscanf(s->string + i, "%1x%1x", &hi, &lo) != 2) return false;
        b[(*n)++] = (unsigned char)(hi << 4 | lo);
    }
    return true;
}

#endif
