/* The echo client (paper 04 §3.1, Algorithm 5). Interactive: each line
 * typed is sent, and the echo printed, until end of input. With -s BYTES
 * it sends that many bytes of a test pattern instead, from a second
 * thread while this one reads the echo back, checks it byte for byte and
 * prints the rate.
 *
 *   echo_client [-d] [-l DROP_RATE] [-s BYTES] [-b BLOCK] HOST PORT */
#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include "common.h"

struct sender {
    int conn;
    long long bytes;
    size_t block;
    int failed;
};

static void *send_pattern(void *arg) {
    struct sender *s = arg;
    static __thread unsigned char snddata[MSGS];
    for (long long off = 0; off < s->bytes;) {
        size_t n = s->bytes - off < (long long)s->block ? (size_t)(s->bytes - off) : s->block;
        for (size_t i = 0; i < n; i++) snddata[i] = pattern((uint64_t)off + i);
        ptrdiff_t snd = mf_send(s->conn, snddata, n);
        if (snd != (ptrdiff_t)n) {
            fprintf(stderr, "mf_send: %s\n", mf_last_error());
            s->failed = 1;
            return NULL;
        }
        off += (long long)n;
    }
    return NULL;
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static int transfer(int conn, long long bytes, size_t block) {
    struct sender s = {conn, bytes, block, 0};
    pthread_t t;
    double start = now_s();
    if (pthread_create(&t, NULL, send_pattern, &s) != 0) die("pthread_create", -1);
    static unsigned char rcvdata[MSGS];
    long long got = 0;
    while (got < bytes) {
        ptrdiff_t rcv = mf_receive(conn, rcvdata, sizeof rcvdata);
        if (rcv <= 0) {
            fprintf(stderr, "mf_receive after %lld of %lld bytes: %s\n", got, bytes,
                    rcv == 0 ? "end of stream" : mf_last_error());
            return 1;
        }
        for (ptrdiff_t i = 0; i < rcv; i++) {
            if (rcvdata[i] != pattern((uint64_t)got + (uint64_t)i)) {
                fprintf(stderr, "echo differs at byte %lld\n", got + (long long)i);
                return 1;
            }
        }
        got += rcv;
    }
    pthread_join(t, NULL);
    if (s.failed) return 1;
    double secs = now_s() - start;
    printf("echoed %lld bytes byte-exact in %.3f s (%.1f Mbit/s)\n", got, secs, (double)got * 8 / secs / 1e6);
    return 0;
}

static int interactive(int conn) {
    char snddata[MSGS], rcvdata[MSGS];
    printf("[INPUT (end of input to disconnect)]>");
    fflush(stdout);
    while (fgets(snddata, sizeof snddata, stdin) != NULL) {
        size_t snd = strcspn(snddata, "\n");
        if (snd == 0) break;
        if (mf_send(conn, snddata, snd) < 0) die("mf_send", -1);
        size_t got = 0;
        while (got < snd) { /* the echo may come back in pieces */
            ptrdiff_t rcv = mf_receive(conn, rcvdata + got, sizeof rcvdata - got);
            if (rcv <= 0) return 1;
            got += (size_t)rcv;
        }
        printf("[RCV] %.*s\n[INPUT]>", (int)got, rcvdata);
        fflush(stdout);
    }
    return 0;
}

int main(int argc, char **argv) {
    double drop = 0.0;
    int debug = 0, opt;
    long long bytes = -1;
    size_t block = MSGS;
    while ((opt = getopt(argc, argv, "dl:s:b:h")) != -1) {
        switch (opt) {
        case 'd': debug = 1; break;
        case 'l': drop = real_arg("-l DROP_RATE", optarg, 0.0, 1.0); break;
        case 's': bytes = int_arg("-s BYTES", optarg, 0, 1LL << 50); break;
        case 'b': block = (size_t)int_arg("-b BLOCK", optarg, 1, MSGS); break;
        default:
            fprintf(stderr, "usage: %s [-d] [-l DROP_RATE] [-s BYTES] [-b BLOCK] HOST PORT\n", argv[0]);
            return opt == 'h' ? EXIT_SUCCESS : EXIT_FAILURE;
        }
    }
    if (argc - optind != 2 || block == 0 || block > MSGS) {
        fprintf(stderr, "usage: %s [-d] [-l DROP_RATE] [-s BYTES] [-b BLOCK<=%d] HOST PORT\n", argv[0], MSGS);
        return EXIT_FAILURE;
    }
    set_attrs(drop, debug);

    int conn = mf_connect(argv[optind], (int)int_arg("PORT", argv[optind + 1], 1, 65535));
    if (conn < 0) die("mf_connect", conn);
    char local[MF_ADDRSTRLEN], peer[MF_ADDRSTRLEN];
    mf_local(conn, local, sizeof local);
    mf_peer(conn, peer, sizeof peer);
    fprintf(stderr, "running on %s, connected to %s\n", local, peer);

    int failed = bytes >= 0 ? transfer(conn, bytes, block) : interactive(conn);

    int rc = mf_close(conn); /* active close: waits until the server has everything */
    if (rc < 0) die("mf_close", rc);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
