/* The drop rate of a connection changed while it runs, as librusp's
 * ruspSetAttr does mid-connection (issue 19): switched on on the accepted
 * connection, it drops datagrams the server's socket receives from then
 * on, the data still arriving intact; switched off, it drops none.
 *
 * The debug log is on throughout: tests/c_examples.rs counts, in the
 * lines between "-- drop on --" and "-- drop off --" on stderr, the
 * datagrams received from the client ("<-") and dropped ("x-"), and that
 * none is dropped outside them. The client's address as the server sees
 * it is the "client ADDR" line on stdout. */
#include <pthread.h>

#include "check.h"

#define PHASE (512 * 1024)

static int listener;
static int signals[2]; /* server -> main: the accepted descriptor, then a byte per phase */

static unsigned char pattern(int phase, size_t i) {
    return (unsigned char)((i * 31 + (size_t)phase * 7) % 251);
}

static void *server(void *arg) {
    (void)arg;
    int s = mf_accept(listener);
    CHECK(s > 0, "mf_accept returned %d", s);
    CHECK(write(signals[1], &s, sizeof s) == sizeof s, "signal");
    static unsigned char buf[65536];
    for (int phase = 0; phase < 3; phase++) {
        size_t got = 0;
        while (got < PHASE) {
            size_t want = PHASE - got < sizeof buf ? PHASE - got : sizeof buf;
            ptrdiff_t n = mf_receive(s, buf, want);
            CHECK(n > 0, "mf_receive in phase %d returned %td", phase, n);
            for (ptrdiff_t i = 0; i < n; i++)
                CHECK(buf[i] == pattern(phase, got + (size_t)i), "phase %d: byte %zu arrived changed", phase,
                      got + (size_t)i);
            got += (size_t)n;
        }
        char done = (char)phase;
        CHECK(write(signals[1], &done, 1) == 1, "signal");
    }
    CHECK(mf_receive(s, buf, sizeof buf) == 0, "the client's end");
    CHECK(mf_close(s) == MF_OK, "the server's mf_close");
    return NULL;
}

/* Sends phase `phase`'s bytes and waits until the server has them all. */
static void phase(int c, int phase) {
    static unsigned char data[PHASE];
    for (size_t i = 0; i < PHASE; i++) data[i] = pattern(phase, i);
    CHECK(mf_send(c, data, PHASE) == PHASE, "mf_send in phase %d", phase);
    char done;
    CHECK(read(signals[0], &done, 1) == 1 && done == (char)phase, "phase %d arrived", phase);
}

static double drop_of(int desc) {
    double rate = -1;
    CHECK(mf_get_attr(desc, MF_ATTR_DROP_RATE, &rate, sizeof rate) == MF_OK, "mf_get_attr of %d", desc);
    return rate;
}

int main(void) {
    watchdog(90);
    setvbuf(stdout, NULL, _IOLBF, 0);
    int on = 1;
    CHECK(mf_set_attr(MF_ALL, MF_ATTR_DEBUG, &on, sizeof on) == MF_OK, "debug on");
    /* Datagrams of 1,200 bytes with path MTU discovery off (spec §3.7):
     * a 512 KiB phase is some 450 of them, not the handful of 64 KiB ones
     * loopback would carry, enough to measure the drop rate on. */
    uint32_t size = 1200;
    CHECK(mf_set_attr(MF_DEFAULTS, MF_ATTR_MAX_DATAGRAM, &size, sizeof size) == MF_OK, "fixed datagram size");
    CHECK(pipe(signals) == 0, "pipe");
    int port;
    listener = listen_loopback(&port);
    pthread_t t;
    CHECK(pthread_create(&t, NULL, server, NULL) == 0, "pthread_create");
    int c = mf_connect("127.0.0.1", port);
    CHECK(c > 0, "mf_connect returned %d", c);
    int s;
    CHECK(read(signals[0], &s, sizeof s) == sizeof s, "the accepted descriptor");
    char client[MF_ADDRSTRLEN];
    CHECK(mf_peer(s, client, sizeof client) > 0, "mf_peer of the accepted connection");
    printf("client %s\n", client);

    phase(c, 0);
    fprintf(stderr, "-- drop on --\n");
    double rate = 0.25;
    CHECK(mf_set_attr(s, MF_ATTR_DROP_RATE, &rate, sizeof rate) == MF_OK, "drop rate on, mid-connection");
    CHECK(drop_of(s) == 0.25 && drop_of(listener) == 0.25, "the accepted connection and its listener share it");
    CHECK(drop_of(c) == 0.0 && drop_of(MF_DEFAULTS) == 0.0, "the client's socket and the defaults keep theirs");
    phase(c, 1);
    rate = 0.0;
    CHECK(mf_set_attr(s, MF_ATTR_DROP_RATE, &rate, sizeof rate) == MF_OK, "drop rate off, mid-connection");
    fprintf(stderr, "-- drop off --\n");
    phase(c, 2);
    printf("ok the drop rate of the accepted connection switched on and off mid-connection, the data intact\n");

    CHECK(mf_close(listener) == MF_OK, "mf_close of the listener");
    rate = 0.5;
    CHECK(mf_set_attr(s, MF_ATTR_DROP_RATE, &rate, sizeof rate) == MF_ENOTSUP,
          "a connection of a closed listener cannot change the socket it shared");
    CHECK(drop_of(s) == 0.0, "and keeps its rate");
    printf("ok a connection of a closed listener keeps its rate: MF_ENOTSUP\n");

    CHECK(mf_close(c) == MF_OK, "the client's mf_close");
    CHECK(pthread_join(t, NULL) == 0, "join");
    return 0;
}
