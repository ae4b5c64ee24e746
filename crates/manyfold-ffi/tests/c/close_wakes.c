/* mf_close wakes every thread blocked on the descriptor with MF_ECLOSED
 * (issue 19: a receive blocked on a closed connection stayed blocked for
 * 70 s); calls after mf_close returned get MF_EBADF; a successful call
 * empties mf_last_error. */
#include <pthread.h>

#include "check.h"

struct blocked {
    int desc;
    int kind; /* 0: mf_receive, 1: mf_recv_message, 2: mf_accept */
    long rc;
    double at;
    char text[256];
};

static void *block_on(void *arg) {
    struct blocked *b = arg;
    char buf[64];
    mf_message info;
    if (b->kind == 0) b->rc = mf_receive(b->desc, buf, sizeof buf);
    else if (b->kind == 1) b->rc = mf_recv_message(b->desc, &info, buf, sizeof buf);
    else b->rc = mf_accept(b->desc);
    b->at = now_s();
    snprintf(b->text, sizeof b->text, "%s", mf_last_error());
    return NULL;
}

static int accepted;

/* The peer: accepts one connection and reads it to its end, then closes. */
static void *peer(void *arg) {
    int l = *(int *)arg;
    int c = mf_accept(l);
    CHECK(c > 0, "mf_accept");
    __atomic_store_n(&accepted, 1, __ATOMIC_RELEASE);
    char buf[256];
    while (mf_receive(c, buf, sizeof buf) > 0) {}
    CHECK(mf_close(c) == MF_OK, "peer's mf_close");
    return NULL;
}

int main(void) {
    watchdog(30);
    int port;
    int l = listen_loopback(&port);
    pthread_t server;
    pthread_create(&server, NULL, peer, &l);
    int c = mf_connect("127.0.0.1", port);
    CHECK(c > 0, "mf_connect returned %d", c);
    while (!__atomic_load_n(&accepted, __ATOMIC_ACQUIRE)) usleep(1000);

    /* Two threads blocked on the connection, one on the listener. */
    struct blocked b[3] = {{.desc = c, .kind = 0}, {.desc = c, .kind = 1}, {.desc = l, .kind = 2}};
    pthread_t t[3];
    for (int i = 0; i < 3; i++) pthread_create(&t[i], NULL, block_on, &b[i]);
    usleep(200 * 1000);
    double closed_at = now_s();
    CHECK(mf_close(c) == MF_OK, "mf_close of the connection");
    CHECK(mf_close(l) == MF_OK, "mf_close of the listener");
    for (int i = 0; i < 3; i++) pthread_join(t[i], NULL);
    const char *call[3] = {"mf_receive", "mf_recv_message", "mf_accept"};
    for (int i = 0; i < 3; i++) {
        CHECK(b[i].rc == MF_ECLOSED, "%s returned %ld (%s), not MF_ECLOSED", call[i], b[i].rc, b[i].text);
        CHECK(strstr(b[i].text, "closed by mf_close on another thread") != NULL, "%s said: %s", call[i], b[i].text);
        CHECK(b[i].at - closed_at < 1.0, "%s returned %.3f s after mf_close", call[i], b[i].at - closed_at);
        printf("ok %s blocked on a closed descriptor returns MF_ECLOSED after %.0f ms: %s\n", call[i],
               (b[i].at - closed_at) * 1e3, b[i].text);
    }
    pthread_join(server, NULL);

    /* After mf_close returned, the descriptor is not open. */
    char buf[8];
    CHECK(mf_send(c, "x", 1) == MF_EBADF, "mf_send after mf_close");
    CHECK(mf_receive(c, buf, sizeof buf) == MF_EBADF, "mf_receive after mf_close");
    CHECK(strstr(mf_last_error(), "is not open") != NULL, "text: %s", mf_last_error());
    printf("ok calls after mf_close return MF_EBADF: %s\n", mf_last_error());

    /* A successful call empties the last error. */
    CHECK(mf_last_error()[0] != '\0', "an error is set");
    int debug = 0;
    CHECK(mf_get_attr(MF_DEFAULTS, MF_ATTR_DEBUG, &debug, sizeof debug) == MF_OK, "mf_get_attr");
    CHECK(mf_last_error()[0] == '\0', "mf_last_error after a success: %s", mf_last_error());
    printf("ok a successful call empties mf_last_error\n");
    return 0;
}
