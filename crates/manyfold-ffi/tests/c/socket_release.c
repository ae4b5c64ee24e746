/* The socket of a connection made by mf_connect is released when mf_close
 * returns (issue 19: after 200 connect/close cycles, 150 UDP sockets stayed
 * open for about 15 s, the length of TIME-WAIT). */
#include <dirent.h>
#include <pthread.h>

#include "check.h"

#define CYCLES 200

/* Open file descriptors of this process that are sockets. */
static int sockets(void) {
    DIR *d = opendir("/proc/self/fd");
    CHECK(d != NULL, "opendir /proc/self/fd");
    int n = 0;
    struct dirent *e;
    char path[300], target[64];
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
        ssize_t len = readlink(path, target, sizeof target - 1);
        if (len > 0) {
            target[len] = '\0';
            n += strncmp(target, "socket:", 7) == 0;
        }
    }
    closedir(d);
    return n;
}

static void *close_later(void *arg) {
    int c = (int)(long)arg;
    CHECK(mf_close(c) == MF_OK, "server's mf_close");
    return NULL;
}

/* The server closes first (so the client's close is the passive one and
 * the test does not wait out a TIME-WAIT per cycle), each on its own thread. */
static void *serve(void *arg) {
    int l = *(int *)arg;
    for (int i = 0; i < CYCLES; i++) {
        int c = mf_accept(l);
        CHECK(c > 0, "mf_accept %d", i);
        pthread_t t;
        pthread_create(&t, NULL, close_later, (void *)(long)c);
        pthread_detach(t);
    }
    return NULL;
}

int main(void) {
    watchdog(120);
    int port;
    int l = listen_loopback(&port);
    int before = sockets();
    pthread_t server;
    pthread_create(&server, NULL, serve, &l);
    int most = 0;
    double start = now_s();
    for (int i = 0; i < CYCLES; i++) {
        int c = mf_connect("127.0.0.1", port);
        CHECK(c > 0, "mf_connect %d returned %d", i, c);
        char buf[16];
        CHECK(mf_receive(c, buf, sizeof buf) == 0, "the server's end");
        CHECK(mf_close(c) == MF_OK, "mf_close %d", i);
        int now = sockets() - before;
        if (now > most) most = now;
    }
    double took = now_s() - start;
    pthread_join(server, NULL);
    int after = sockets() - before;
    for (int i = 0; i < 50 && after > 0; i++) { /* the last driver task may be finishing */
        usleep(10 * 1000);
        after = sockets() - before;
    }
    printf("ok %d connect/close cycles in %.1f s: at most %d client socket(s) open after an mf_close, %d at the end\n",
           CYCLES, took, most, after);
    CHECK(most <= 1, "%d client sockets were open after mf_close returned", most);
    CHECK(after == 0, "%d client sockets open at the end", after);
    CHECK(mf_close(l) == MF_OK, "mf_close of the listener");
    return 0;
}
