/* UPLOAD server (paper 04 section 3.2), written against librusp's API as
 * the paper describes it (rusp.h): each client's bytes, up to its close,
 * are stored in a file of their own.
 *
 *   ups [-p port] [-l loss] [-d] [-o directory] [-n uploads]
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rusp.h"

#define PORT 55000
#define BSIZE 65536

static int port = PORT;
static double loss = 0.0;
static int debug = 0;
static const char *dir = ".";
static long uploads = -1; /* take this many, then exit; -1: forever */

static void usage(const char *prog) {
    fprintf(stderr, "usage: %s [-p port] [-l loss] [-d] [-o directory] [-n uploads]\n", prog);
    exit(EXIT_FAILURE);
}

static void parse_arguments(int argc, char **argv) {
    int opt;
    char *end;
    while ((opt = getopt(argc, argv, "hp:l:do:n:")) != -1) {
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
        case 'o': dir = optarg; break;
        case 'n':
            uploads = strtol(optarg, &end, 10);
            if (*end != '\0' || uploads < 1) {
                fprintf(stderr, "%s: -n %s: not a positive number of uploads\n", argv[0], optarg);
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

/* Receives one upload on `conn` into a new file; 0, or -1. */
static int receive_upload(ConnectionId conn, long n) {
    static char rcvdata[BSIZE];
    char path[4096], ip[INET_ADDRSTRLEN] = "?";
    struct sockaddr_in peer;
    int peer_port = 0;
    if (ruspPeer(conn, &peer) == 0) {
        inet_ntop(AF_INET, &peer.sin_addr, ip, sizeof ip);
        peer_port = ntohs(peer.sin_port);
    }
    snprintf(path, sizeof path, "%s/upload-%ld", dir, n);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd == -1) {
        fprintf(stderr, "cannot create %s: %s\n", path, strerror(errno));
        return -1;
    }
    long long got = 0;
    ssize_t rcv;
    while ((rcv = ruspReceive(conn, rcvdata, BSIZE)) > 0) {
        if (write(fd, rcvdata, (size_t)rcv) != rcv) {
            fprintf(stderr, "cannot write %s: %s\n", path, strerror(errno));
            close(fd);
            return -1;
        }
        got += rcv;
    }
    close(fd);
    if (rcv == -1) {
        fprintf(stderr, "upload from %s:%d broke after %lld bytes: %s\n", ip, peer_port, got, strerror(errno));
        return -1;
    }
    printf("Received %lld bytes from %s:%d into %s\n", got, ip, peer_port, path);
    fflush(stdout);
    return 0;
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
    printf("WELCOME TO UPLOAD SERVER\n\n");
    printf("Running on %s:%d\n", ip, ntohs(addr.sin_port));
    fflush(stdout);

    int failures = 0;
    long n = 0;
    while ((uploads < 0 || n < uploads) && (conn = ruspAccept(lconn)) != -1) {
        failures += receive_upload(conn, ++n) != 0;
        ruspClose(conn);
    }
    ruspClose(lconn);
    return failures == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
