/* ECHO server (paper 04 section 3.2), written against librusp's API as
 * the paper describes it (rusp.h): every byte a client sends is sent back
 * until it closes; a thread per client, as librusp's own sample (the
 * paper's listing forks instead, which libmanyfold cannot follow: its
 * connections stay with the process that made them).
 *
 *   echos [-p port] [-l loss] [-d] [-n clients]
 */
#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rusp.h"

#define PORT 55000 /* the server port */
#define MSGS 1024  /* the maximum message size */

static int port = PORT;
static double loss = 0.0;
static int debug = 0;
static long clients = -1; /* serve this many, then exit; -1: forever */

static void usage(const char *prog) {
    fprintf(stderr, "usage: %s [-p port] [-l loss] [-d] [-n clients]\n", prog);
    exit(EXIT_FAILURE);
}

static void parse_arguments(int argc, char **argv) {
    int opt;
    char *end;
    while ((opt = getopt(argc, argv, "hp:l:dn:")) != -1) {
        switch (opt) {
        case 'p':
            port = (int)strtol(optarg, &end, 10);
            if (*end != '\0' || port < 0 || port > 65535) {
                fprintf(stderr, "%s: -p %s: not a port number (0..65535)\n", argv[0], optarg);
                exit(EXIT_FAILURE);
            }
            break;
        case 'l':
            loss = strtod(optarg, &end);
            if (*end != '\0' || !(loss >= 0.0 && loss <= 1.0)) {
                fprintf(stderr, "%s: -l %s: not a drop rate in [0, 1]\n", argv[0], optarg);
                exit(EXIT_FAILURE);
            }
            break;
        case 'd': debug = 1; break;
        case 'n':
            clients = strtol(optarg, &end, 10);
            if (*end != '\0' || clients < 1) {
                fprintf(stderr, "%s: -n %s: not a positive number of clients\n", argv[0], optarg);
                exit(EXIT_FAILURE);
            }
            break;
        default: usage(argv[0]);
        }
    }
    if (optind != argc) usage(argv[0]);
    if (ruspSetAttr(RUSP_ATTR_DROPR, &loss) == -1 || ruspSetAttr(RUSP_ATTR_DEBUG, &debug) == -1) {
        fprintf(stderr, "%s: ruspSetAttr: %s\n", argv[0], strerror(errno));
        exit(EXIT_FAILURE);
    }
}

static void *service(void *arg) {
    ConnectionId conn = (ConnectionId)(intptr_t)arg;
    char rcvdata[MSGS];
    ssize_t rcv;
    long long echoed = 0;
    struct sockaddr_in peer;
    char ip[INET_ADDRSTRLEN] = "?";
    int peer_port = 0;
    if (ruspPeer(conn, &peer) == 0) {
        inet_ntop(AF_INET, &peer.sin_addr, ip, sizeof ip);
        peer_port = ntohs(peer.sin_port);
    }
    while ((rcv = ruspReceive(conn, rcvdata, MSGS)) > 0) {
        if (ruspSend(conn, rcvdata, (size_t)rcv) != rcv) break;
        echoed += rcv;
    }
    int failed = rcv != 0;
    if (failed) fprintf(stderr, "connection %ld from %s:%d: %s\n", conn, ip, peer_port, strerror(errno));
    ruspClose(conn);
    printf("Echoed %lld bytes to %s:%d%s\n", echoed, ip, peer_port, failed ? " (failed)" : "");
    fflush(stdout);
    return (void *)(intptr_t)failed;
}

int main(int argc, char **argv) {
    ConnectionId lconn, conn;
    struct sockaddr_in addr;
    char ip[INET_ADDRSTRLEN];

    parse_arguments(argc, argv);

    if ((lconn = ruspListen(port)) == -1) {
        fprintf(stderr, "ruspListen(%d): %s\n", port, strerror(errno));
        exit(EXIT_FAILURE);
    }
    if (ruspLocal(lconn, &addr) == -1) {
        fprintf(stderr, "ruspLocal: %s\n", strerror(errno));
        exit(EXIT_FAILURE);
    }
    inet_ntop(AF_INET, &addr.sin_addr, ip, sizeof ip);
    printf("WELCOME TO ECHO SERVER\n\n");
    printf("Running on %s:%d\n", ip, ntohs(addr.sin_port));
    fflush(stdout);

    pthread_t *threads = NULL;
    long served = 0;
    while ((clients < 0 || served < clients) && (conn = ruspAccept(lconn)) != -1) {
        pthread_t *more = realloc(threads, (size_t)(served + 1) * sizeof *threads);
        if (more == NULL) {
            fprintf(stderr, "out of memory\n");
            exit(EXIT_FAILURE);
        }
        threads = more;
        if (pthread_create(&threads[served], NULL, service, (void *)(intptr_t)conn) != 0) {
            fprintf(stderr, "pthread_create failed\n");
            exit(EXIT_FAILURE);
        }
        served++;
    }
    int failures = 0;
    for (long i = 0; i < served; i++) {
        void *failed;
        pthread_join(threads[i], &failed);
        failures += failed != NULL;
    }
    free(threads);
    ruspClose(lconn);
    printf("Server Shutdown\n");
    return failures == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
