/*
 * proc.c - child processes of the scenario programs; see proc.h.
 */
#define _POSIX_C_SOURCE 200809L

#include "proc.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PROBE_LIMIT_MS 20000

static long long now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

bool child_start(child *c, char *const argv[]) {
    int in[2], out[2];
    if (pipe(in) != 0) return false;
    if (pipe(out) != 0) {
        close(in[0]);
        close(in[1]);
        return false;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) return false;
    if (pid == 0) {
        dup2(in[0], 0);
        dup2(out[1], 1);
        close(in[0]);
        close(in[1]);
        close(out[0]);
        close(out[1]);
        execv(argv[0], argv);
        _exit(127);
    }
    close(in[0]);
    close(out[1]);
    fcntl(in[1], F_SETFD, FD_CLOEXEC);
    fcntl(out[0], F_SETFD, FD_CLOEXEC);
    c->pid = pid;
    c->in = in[1];
    c->out = out[0];
    return true;
}

bool child_line(child *c, char *buf, size_t len, int timeout_ms) {
    size_t n = 0;
    long long deadline = now_ms() + timeout_ms;
    while (n + 1 < len) {
        struct pollfd p = {.fd = c->out, .events = POLLIN};
        long long left = deadline - now_ms();
        if (left <= 0 || poll(&p, 1, (int)left) <= 0) break;
        char ch;
        if (read(c->out, &ch, 1) != 1) break;
        if (ch == '\n') {
            buf[n] = '\0';
            return true;
        }
        buf[n++] = ch;
    }
    buf[n] = '\0';
    return false;
}

void child_close_input(child *c) {
    if (c->in >= 0) close(c->in);
    c->in = -1;
}

int child_wait(child *c, int timeout_ms) {
    int status = 0;
    long long deadline = now_ms() + timeout_ms;
    pid_t r;
    while ((r = waitpid(c->pid, &status, WNOHANG)) == 0 && now_ms() < deadline) {
        struct pollfd p = {.fd = c->out, .events = POLLIN};
        char drain[256];
        if (poll(&p, 1, 20) > 0 && read(c->out, drain, sizeof drain) <= 0) {
            /* its output ended: it is exiting */
        }
    }
    if (r == 0) {
        kill(c->pid, SIGKILL);
        waitpid(c->pid, &status, 0);
        status = -1;
    } else {
        status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    }
    child_close_input(c);
    close(c->out);
    return status;
}

int run_probe(char *out, size_t len, ...) {
    char *argv[16];
    int n = 0;
    const char *probe = getenv("LC_PROBE");
    if (probe == NULL) {
        snprintf(out, len, "LC_PROBE is not set");
        return -1;
    }
    argv[n++] = (char *)probe;
    va_list ap;
    va_start(ap, len);
    for (char *a; n < 15 && (a = va_arg(ap, char *)) != NULL;) argv[n++] = a;
    va_end(ap);
    argv[n] = NULL;
    child c;
    if (!child_start(&c, argv)) {
        snprintf(out, len, "cannot start the probe: %s", strerror(errno));
        return -1;
    }
    child_close_input(&c);
    size_t got = 0;
    long long deadline = now_ms() + PROBE_LIMIT_MS;
    for (;;) {
        struct pollfd p = {.fd = c.out, .events = POLLIN};
        long long left = deadline - now_ms();
        if (left <= 0 || poll(&p, 1, (int)left) <= 0) break;
        char tmp[512];
        ssize_t r = read(c.out, tmp, sizeof tmp);
        if (r <= 0) break;
        for (ssize_t i = 0; i < r && got + 1 < len; i++) out[got++] = tmp[i];
    }
    out[got] = '\0';
    int status = child_wait(&c, (int)(deadline - now_ms() > 0 ? deadline - now_ms() : 0));
    if (status == -1) snprintf(out, len, "the probe %s took longer than 20 s or died", argv[1]);
    return status;
}
