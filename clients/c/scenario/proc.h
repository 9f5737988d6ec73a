/*
 * proc.h - child processes for the scenario programs of the C and C++
 * clients: the probe of clients/conformance, and children that hold keys.
 */
#ifndef LC_SCENARIO_PROC_H
#define LC_SCENARIO_PROC_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A child with its standard input and output on pipes. */
typedef struct child {
    pid_t pid;
    int in;  /* its standard input; -1 once closed */
    int out; /* its standard output */
} child;

/* child_start runs argv[0] with argv; false when it could not start. */
bool child_start(child *c, char *const argv[]);

/* child_line reads one line of its output into buf (without the newline)
 * within timeout_ms; false at the end of its output or the timeout. */
bool child_line(child *c, char *buf, size_t len, int timeout_ms);

/* child_close_input closes its standard input. */
void child_close_input(child *c);

/* child_wait waits up to timeout_ms for it to exit, then kills it; its
 * exit status, or -1 when it was killed or died of a signal. */
int child_wait(child *c, int timeout_ms);

/*
 * run_probe runs "$LC_PROBE args..." (NULL-terminated), its output in out,
 * within 20 s. It returns the exit status, or -1 when it could not run or
 * took too long (then out names why).
 */
int run_probe(char *out, size_t len, ...);

#ifdef __cplusplus
}
#endif

#endif
