/*
 * example.c - take a lock, do the work, release it.
 *
 *   cc -std=c11 -Iinclude examples/example.c liblockingcenter.a -o example
 *   ./example localhost:22119
 */
#include "lockingcenter.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
    const char *address = argc > 1 ? argv[1] : "localhost:22119";
    const char *key = "orders/batch-7";

    lc_client client;
    lc_status st = lc_client_init(&client, address, "example-worker", strlen("example-worker"));
    if (st != LC_OK) {
        fprintf(stderr, "client: %s\n", lc_strerror(st));
        return 2;
    }

    /* Blocks until the key is ours; every other caller queues behind us. */
    st = lc_lock(&client, key, strlen(key));
    if (st != LC_OK) {
        fprintf(stderr, "lock %s: %s%s%s\n", key, lc_strerror(st),
                st == LC_ERR_CONNECT || st == LC_ERR_IO ? ": " : "",
                st == LC_ERR_CONNECT || st == LC_ERR_IO ? strerror(errno) : "");
        return 1;
    }
    printf("holding %s\n", key);
    /* ... exclusive work ... */
    st = lc_unlock(&client, key, strlen(key));
    if (st != LC_OK) {
        fprintf(stderr, "unlock %s: %s\n", key, lc_strerror(st));
        return 1;
    }

    /* TryLock never queues: busy is an answer, not an error. */
    bool acquired = false;
    st = lc_trylock(&client, key, strlen(key), &acquired);
    if (st != LC_OK) {
        fprintf(stderr, "trylock %s: %s\n", key, lc_strerror(st));
        return 1;
    }
    printf("trylock %s: %s\n", key, acquired ? "acquired" : "busy");
    if (acquired) lc_unlock(&client, key, strlen(key));
    return 0;
}
