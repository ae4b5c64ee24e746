/* A process that exits with a connection still open resets it, so that
 * its peer, blocked in mf_receive, knows at once instead of at its 60 s
 * idle timeout: the socket would otherwise die silently with the process. */
#include <sys/wait.h>

#include "check.h"

int main(void) {
    watchdog(30);
    int ports[2], times[2];
    CHECK(pipe(ports) == 0 && pipe(times) == 0, "pipe");
    pid_t pid = fork(); /* before any call: the child has its own library */
    CHECK(pid >= 0, "fork");
    if (pid == 0) {
        int port;
        if (read(ports[0], &port, sizeof port) != sizeof port) _exit(3);
        int c = mf_connect("127.0.0.1", port);
        if (c <= 0 || mf_send(c, "x", 1) != 1) _exit(4);
        usleep(200 * 1000); /* the byte is delivered and acknowledged */
        double at = now_s();
        if (write(times[1], &at, sizeof at) != sizeof at) _exit(5);
        exit(0); /* without mf_close */
    }
    int port;
    int l = listen_loopback(&port);
    CHECK(write(ports[1], &port, sizeof port) == sizeof port, "write the port");
    int a = mf_accept(l);
    CHECK(a > 0, "mf_accept");
    char buf[8];
    CHECK(mf_receive(a, buf, sizeof buf) == 1, "the child's byte");
    long rc = mf_receive(a, buf, sizeof buf); /* blocks until the child's end */
    double ended = now_s();
    double exited;
    CHECK(read(times[0], &exited, sizeof exited) == sizeof exited, "the child's exit time");
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d", status);
    CHECK(rc == MF_ERESET, "mf_receive returned %ld, not MF_ERESET", rc);
    CHECK(ended - exited < 1.0, "the peer learned of the exit after %.3f s", ended - exited);
    printf("ok a peer blocked in mf_receive learns of an exit without mf_close after %.0f ms: %s\n",
           (ended - exited) * 1e3, mf_last_error());
    CHECK(mf_close(a) != MF_OK, "closing a reset connection reports it");
    CHECK(mf_close(l) == MF_OK, "mf_close of the listener");
    return 0;
}
