/* Shared by the C tests of the C API (tests/c_examples.rs builds and runs
 * them): CHECK, a clock, a watchdog. Each test prints one "ok ..." line per
 * behaviour it checked and exits 0; any failure prints what and exits 1. */
#ifndef CHECK_H
#define CHECK_H

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "manyfold.h"

#define CHECK(cond, ...)                                                              \
    do {                                                                              \
        if (!(cond)) {                                                                \
            fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond);  \
            fprintf(stderr, __VA_ARGS__);                                             \
            fprintf(stderr, " (last error: %s)\n", mf_last_error());                  \
            exit(1);                                                                  \
        }                                                                             \
    } while (0)

/* Seconds on the monotonic clock. */
static inline double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static inline void on_alarm(int sig) {
    (void)sig;
    static const char msg[] = "watchdog: the test did not finish in time\n";
    if (write(2, msg, sizeof msg - 1) < 0) { /* nothing more to do */ }
    _exit(2);
}

/* Ends the process with status 2 if it runs longer than `seconds`. */
static inline void watchdog(unsigned seconds) {
    signal(SIGALRM, on_alarm);
    alarm(seconds);
}

/* A listener on 127.0.0.1 and a free port; its port in *port. */
static inline int listen_loopback(int *port) {
    int l = mf_listen("127.0.0.1", 0);
    CHECK(l > 0, "mf_listen returned %d", l);
    char addr[MF_ADDRSTRLEN];
    CHECK(mf_local(l, addr, sizeof addr) > 0, "mf_local");
    const char *colon = strrchr(addr, ':');
    CHECK(colon != NULL, "mf_local gave %s", addr);
    *port = atoi(colon + 1);
    return l;
}

#endif
