/* A call in a child process after fork() fails at once with MF_EFORK and
 * a text that says so (issue 19: the child hung with no error); the
 * parent carries on. */
#include <pthread.h>
#include <sys/wait.h>

#include "check.h"

static void *close_conn(void *arg) {
    CHECK(mf_close(*(int *)arg) == MF_OK, "mf_close of the client");
    return NULL;
}

int main(void) {
    watchdog(30);
    int port;
    int l = listen_loopback(&port); /* the first call: the runtime starts */
    pid_t pid = fork();
    CHECK(pid >= 0, "fork");
    if (pid == 0) {
        double start = now_s();
        int c = mf_connect("127.0.0.1", port);
        double took = now_s() - start;
        if (c != MF_EFORK) {
            fprintf(stderr, "child: mf_connect returned %d (%s), not MF_EFORK\n", c, mf_last_error());
            _exit(1);
        }
        char said[512];
        snprintf(said, sizeof said, "%s", mf_last_error());
        if (strstr(said, "mf_connect: called in process") == NULL || took > 0.1) {
            fprintf(stderr, "child: took %.3f s, said: %s\n", took, said);
            _exit(1);
        }
        if (mf_close(l) != MF_EFORK || mf_accept(l) != MF_EFORK) {
            fprintf(stderr, "child: mf_close/mf_accept did not fail with MF_EFORK: %s\n", mf_last_error());
            _exit(1);
        }
        printf("ok child's mf_connect fails with MF_EFORK in %.1f ms: %s\n", took * 1e3, said);
        fflush(stdout);
        _exit(0);
    }
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid, "waitpid");
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child's status %d", status);
    /* The parent's listener still works. */
    int c = mf_connect("127.0.0.1", port);
    CHECK(c > 0, "parent's mf_connect after the fork");
    int a = mf_accept(l);
    CHECK(a > 0, "parent's mf_accept after the fork");
    CHECK(mf_send(c, "hi", 2) == 2, "mf_send");
    char buf[2];
    CHECK(mf_receive(a, buf, 2) == 2 && memcmp(buf, "hi", 2) == 0, "mf_receive");
    pthread_t closer; /* the client's close waits for the server's end */
    pthread_create(&closer, NULL, close_conn, &c);
    CHECK(mf_receive(a, buf, 2) == 0, "the client's end");
    CHECK(mf_close(a) == MF_OK, "mf_close of the server's connection");
    pthread_join(closer, NULL);
    CHECK(mf_close(l) == MF_OK, "mf_close of the listener");
    printf("ok the parent's connections work after the child failed\n");
    return 0;
}
