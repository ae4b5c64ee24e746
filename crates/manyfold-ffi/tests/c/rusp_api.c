/* rusp.h keeps librusp's conventions (paper 04 section 2.2): -1 with errno
 * on error, 0 on success for ruspLocal/ruspPeer/ruspSetAttr/ruspGetAttr,
 * a void ruspClose; and debug and the drop rate can be set mid-connection
 * (librusp's samples do), the log following at once. Prints "-- debug on --" and
 * "-- debug off --" on stderr around the part that must be logged. */
#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>

#include "check.h"
#include "rusp.h"

static ConnectionId lconn;

static void *echo(void *arg) {
    (void)arg;
    ConnectionId c = ruspAccept(lconn);
    CHECK(c > 0, "ruspAccept");
    char buf[256];
    ssize_t n;
    while ((n = ruspReceive(c, buf, sizeof buf)) > 0) CHECK(ruspSend(c, buf, (size_t)n) == n, "echo");
    ruspClose(c);
    return NULL;
}

static void round_trip(ConnectionId c, const char *text) {
    size_t len = strlen(text);
    CHECK(ruspSend(c, text, len) == (ssize_t)len, "ruspSend");
    char buf[256];
    size_t got = 0;
    while (got < len) {
        ssize_t n = ruspReceive(c, buf + got, sizeof buf - got);
        CHECK(n > 0, "ruspReceive returned %zd", n);
        got += (size_t)n;
    }
    CHECK(got == len && memcmp(buf, text, len) == 0, "the echo");
}

int main(void) {
    watchdog(30);
    int off = 0, on = 1;
    CHECK(ruspSetAttr(RUSP_ATTR_DEBUG, &off) == 0, "ruspSetAttr(DEBUG, 0)");
    lconn = ruspListen(0);
    CHECK(lconn > 0, "ruspListen(0) returned %ld", lconn);
    struct sockaddr_in local;
    CHECK(ruspLocal(lconn, &local) == 0, "ruspLocal returns 0");
    CHECK(local.sin_family == AF_INET && local.sin_addr.s_addr == htonl(INADDR_ANY) && local.sin_port != 0,
          "ruspLocal gave the wildcard address and the chosen port");
    struct sockaddr_in peer;
    errno = 0;
    CHECK(ruspPeer(lconn, &peer) == -1 && errno == EBADF, "ruspPeer of a listening connection: -1/EBADF");
    printf("ok ruspListen(0) binds 0.0.0.0:%d; ruspLocal returns 0, ruspPeer of it -1 with EBADF\n",
           ntohs(local.sin_port));

    pthread_t server;
    pthread_create(&server, NULL, echo, NULL);
    ConnectionId c = ruspConnect("127.0.0.1", ntohs(local.sin_port));
    CHECK(c > 0, "ruspConnect returned %ld", c);
    CHECK(ruspPeer(c, &peer) == 0 && peer.sin_port == local.sin_port, "ruspPeer returns 0 and the server's port");
    round_trip(c, "quiet");

    fprintf(stderr, "-- debug on --\n");
    CHECK(ruspSetAttr(RUSP_ATTR_DEBUG, &on) == 0, "ruspSetAttr(DEBUG, 1) mid-connection");
    int got = -1;
    CHECK(ruspGetAttr(RUSP_ATTR_DEBUG, &got) == 0 && got == 1, "ruspGetAttr(DEBUG)");
    round_trip(c, "logged");
    CHECK(ruspSetAttr(RUSP_ATTR_DEBUG, &off) == 0, "ruspSetAttr(DEBUG, 0) mid-connection");
    usleep(50 * 1000); /* a line being written as the switch went off is out */
    fprintf(stderr, "-- debug off --\n");
    round_trip(c, "quiet again");
    printf("ok debug switched on and off mid-connection\n");

    double drop = 0.3;
    CHECK(ruspSetAttr(RUSP_ATTR_DROPR, &drop) == 0, "a drop rate set mid-connection: 0");
    double now = -1;
    CHECK(ruspGetAttr(RUSP_ATTR_DROPR, &now) == 0 && now == 0.3, "ruspGetAttr tells it");
    round_trip(c, "through 30% dropped each way");
    drop = 0.0;
    CHECK(ruspSetAttr(RUSP_ATTR_DROPR, &drop) == 0, "switched off mid-connection: 0");
    round_trip(c, "nothing dropped");
    errno = 0;
    CHECK(ruspSetAttr(99, &drop) == -1 && errno == EINVAL, "an unknown attribute: -1/EINVAL");
    printf("ok ruspSetAttr: a drop rate set and cleared mid-connection returns 0; 99 is -1 with EINVAL\n");

    ruspClose(c);
    pthread_join(server, NULL);
    char buf[4];
    errno = 0;
    CHECK(ruspReceive(c, buf, sizeof buf) == -1 && errno == EBADF, "ruspReceive after ruspClose: -1/EBADF");
    errno = 0;
    CHECK(ruspSend(-4, "x", 1) == -1 && errno == EBADF, "ruspSend on -4: -1/EBADF");
    ruspClose(lconn);

    struct sockaddr_in closed = local;
    errno = 0;
    CHECK(ruspConnect("127.0.0.1", ntohs(closed.sin_port)) == -1 && errno == ECONNREFUSED,
          "ruspConnect to the closed listener's port: -1/ECONNREFUSED (errno %d)", errno);
    printf("ok errors are -1 with errno: EBADF after ruspClose, ECONNREFUSED from a closed port\n");
    return 0;
}
