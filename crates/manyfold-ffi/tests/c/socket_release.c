/* The socket of a connection made by mf_connect is released when mf_close
 * returns, its TIME-WAIT lingered (issue 19: after 200 connect/close
 * cycles, 150 UDP sockets stayed open for about 15 s, the length of the
 * engine's TIME-WAIT). */
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include "check.h"

#define CYCLES 200
#define THREADS 8

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

/* The server reads each connection to its end, then closes it: each
 * client closes first, so its connection goes through TIME-WAIT (15 s in
 * the engine: what kept the sockets open). */
static void *serve_one(void *arg) {
    int c = (int)(long)arg;
    char buf[64];
    while (mf_receive(c, buf, sizeof buf) > 0) {}
    CHECK(mf_close(c) == MF_OK, "server's mf_close");
    return NULL;
}

static void *serve(void *arg) {
    int l = *(int *)arg;
    for (int i = 0; i < CYCLES; i++) {
        int c = mf_accept(l);
        CHECK(c > 0, "mf_accept %d", i);
        pthread_t t;
        pthread_create(&t, NULL, serve_one, (void *)(long)c);
        pthread_detach(t);
    }
    return NULL;
}

static int port, before, most;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

/* The inode of this process's UDP socket bound to local port `local`, 0
 * if it holds none. Found among our own descriptors (getsockname), not in
 * /proc/net/udp: a reader of that file can skip a line while other
 * threads open and close sockets (it is read in chunks, each resuming at
 * an offset into a changing table), which made this test fail at random
 * in CI with 8 threads cycling connections. */
static unsigned long udp_inode(int local) {
    DIR *d = opendir("/proc/self/fd");
    CHECK(d != NULL, "opendir /proc/self/fd");
    unsigned long found = 0;
    struct dirent *e;
    while (!found && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        int fd = atoi(e->d_name);
        struct stat st;
        struct sockaddr_storage sa;
        socklen_t len = sizeof sa;
        int type = 0;
        socklen_t tlen = sizeof type;
        if (fd == dirfd(d) || fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
        if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tlen) != 0 || type != SOCK_DGRAM) continue;
        if (getsockname(fd, (struct sockaddr *)&sa, &len) != 0) continue;
        int port = sa.ss_family == AF_INET    ? ntohs(((struct sockaddr_in *)&sa)->sin_port)
                   : sa.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&sa)->sin6_port)
                                              : -1;
        if (port == local) found = (unsigned long)st.st_ino;
    }
    closedir(d);
    return found;
}

/* Whether this process holds an open descriptor of socket `inode`. */
static int holds_socket(unsigned long inode) {
    char want[64];
    snprintf(want, sizeof want, "socket:[%lu]", inode);
    DIR *d = opendir("/proc/self/fd");
    CHECK(d != NULL, "opendir /proc/self/fd");
    int held = 0;
    struct dirent *e;
    char path[300], target[64];
    while (!held && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
        ssize_t len = readlink(path, target, sizeof target - 1);
        if (len > 0) {
            target[len] = '\0';
            held = strcmp(target, want) == 0;
        }
    }
    closedir(d);
    return held;
}

/* CYCLES / THREADS connect/close cycles, one after another. After each
 * close, the socket that connection used is no longer open in this
 * process (its inode, found by its local port among our descriptors, has
 * no descriptor left). */
static void *cycles(void *arg) {
    (void)arg;
    for (int i = 0; i < CYCLES / THREADS; i++) {
        int c = mf_connect("127.0.0.1", port);
        CHECK(c > 0, "mf_connect returned %d", c);
        char addr[MF_ADDRSTRLEN];
        CHECK(mf_local(c, addr, sizeof addr) > 0, "mf_local");
        int local = atoi(strrchr(addr, ':') + 1);
        unsigned long inode = udp_inode(local);
        CHECK(inode != 0, "no UDP socket on local port %d (%s)", local, addr);
        CHECK(mf_send(c, "x", 1) == 1, "mf_send");
        CHECK(mf_close(c) == MF_OK, "mf_close");
        CHECK(!holds_socket(inode), "socket %lu (local port %d) is still open after mf_close returned", inode,
              local);
        pthread_mutex_lock(&lock);
        int now = sockets() - before;
        if (now > most) most = now;
        pthread_mutex_unlock(&lock);
    }
    return NULL;
}

int main(void) {
    watchdog(120);
    int l = listen_loopback(&port);
    before = sockets();
    pthread_t server, t[THREADS];
    pthread_create(&server, NULL, serve, &l);
    double start = now_s();
    for (int i = 0; i < THREADS; i++) pthread_create(&t[i], NULL, cycles, NULL);
    for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
    double took = now_s() - start;
    pthread_join(server, NULL);
    int after = sockets() - before;
    for (int i = 0; i < 50 && after > 0; i++) { /* the last driver task may be finishing */
        usleep(10 * 1000);
        after = sockets() - before;
    }
    printf("ok %d connect/close cycles (%d threads, the client closing first) in %.1f s: at most %d client "
           "socket(s) counted at once, each released by its mf_close, %d at the end\n",
           CYCLES, THREADS, took, most, after);
    /* The process-wide count is for the report only: it races with the
     * other threads' opens and closes while /proc/self/fd is read. Each
     * close was checked exactly above. Before issue 19, every socket
     * stayed for the engine's 15 s TIME-WAIT: all 200 at the end. */
    CHECK(after == 0, "%d client sockets open at the end", after);
    CHECK(mf_close(l) == MF_OK, "mf_close of the listener");
    return 0;
}
