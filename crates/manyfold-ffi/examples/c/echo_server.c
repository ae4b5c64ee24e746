/* A concurrent echo server on libmanyfold (paper 04 §3.1, Algorithm 4):
 * every byte a client sends comes back, until the client closes. The paper
 * forks per client; libmanyfold runs its connections on internal threads,
 * which a forked child would not have, so this serves each client on a
 * thread of its own.
 *
 *   echo_server [-d] [-l DROP_RATE] [-n CLIENTS] [-a IP] [PORT]
 *
 * PORT 0 (the default) picks a free port; the first line on stdout names
 * the address. With -n the server exits after serving that many clients. */
#include <pthread.h>
#include <unistd.h>

#include "common.h"

static void *serve(void *arg) {
    int aconn = (int)(intptr_t)arg;
    static __thread char rcvdata[MSGS];
    ptrdiff_t rcv;
    long long total = 0;
    while ((rcv = mf_receive(aconn, rcvdata, sizeof rcvdata)) > 0) {
        ptrdiff_t snd = mf_send(aconn, rcvdata, (size_t)rcv);
        if (snd < 0) {
            fprintf(stderr, "mf_send: %s\n", mf_last_error());
            break;
        }
        total += rcv;
    }
    if (rcv < 0) fprintf(stderr, "mf_receive: %s\n", mf_last_error());
    char peer[MF_ADDRSTRLEN] = "?";
    mf_peer(aconn, peer, sizeof peer);
    int rc = mf_close(aconn); /* passive close: the client closed first */
    if (rc < 0) fprintf(stderr, "mf_close: %s\n", mf_last_error());
    printf("echoed %lld bytes to %s\n", total, peer);
    fflush(stdout);
    return (void *)(intptr_t)(rcv < 0 || rc < 0);
}

int main(int argc, char **argv) {
    double drop = 0.0;
    int debug = 0, clients = -1, opt;
    const char *ip = "127.0.0.1";
    while ((opt = getopt(argc, argv, "dl:n:a:h")) != -1) {
        switch (opt) {
        case 'd': debug = 1; break;
        case 'l': drop = real_arg("-l DROP_RATE", optarg, 0.0, 1.0); break;
        case 'n': clients = (int)int_arg("-n CLIENTS", optarg, 1, 1 << 30); break;
        case 'a': ip = optarg; break;
        default:
            fprintf(stderr, "usage: %s [-d] [-l DROP_RATE] [-n CLIENTS] [-a IP] [PORT]\n", argv[0]);
            return opt == 'h' ? EXIT_SUCCESS : EXIT_FAILURE;
        }
    }
    if (argc - optind > 1) {
        fprintf(stderr, "usage: %s [-d] [-l DROP_RATE] [-n CLIENTS] [-a IP] [PORT]\n", argv[0]);
        return EXIT_FAILURE;
    }
    int port = optind < argc ? (int)int_arg("PORT", argv[optind], 0, 65535) : 0;
    set_attrs(drop, debug);

    int lconn = mf_listen(ip, port);
    if (lconn < 0) die("mf_listen", lconn);
    char local[MF_ADDRSTRLEN];
    if (mf_local(lconn, local, sizeof local) < 0) die("mf_local", -1);
    printf("listening on %s\n", local);
    fflush(stdout);

    pthread_t threads[64];
    int served = 0, failed = 0;
    while (clients < 0 || served < clients) {
        int aconn = mf_accept(lconn);
        if (aconn < 0) die("mf_accept", aconn);
        pthread_t t;
        if (pthread_create(&t, NULL, serve, (void *)(intptr_t)aconn) != 0) die("pthread_create", -1);
        if (clients < 0 || served >= 64) {
            pthread_detach(t);
        } else {
            threads[served] = t;
        }
        served++;
    }
    mf_close(lconn);
    for (int i = 0; i < served && i < 64; i++) {
        void *bad;
        pthread_join(threads[i], &bad);
        failed += bad != NULL;
    }
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
