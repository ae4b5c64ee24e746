/* ECHO client (paper 04 sections 3.1 and 3.2), written against librusp's
 * API as the paper describes it (rusp.h): each line typed is sent to the
 * server and its echo printed; an empty line or the end of input closes.
 *
 *   echoc address [-p port] [-l loss] [-d]
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rusp.h"

#define PORT 55000 /* the server port */
#define MSGS 1024  /* the maximum message size */

static char *address;
static int port = PORT;
static double loss = 0.0;
static int debug = 0;

static void usage(const char *prog) {
    fprintf(stderr, "usage: %s address [-p port] [-l loss] [-d]\n", prog);
    exit(EXIT_FAILURE);
}

static void parse_arguments(int argc, char **argv) {
    int opt;
    char *end;
    while ((opt = getopt(argc, argv, "hp:l:d")) != -1) {
        switch (opt) {
        case 'p':
            port = (int)strtol(optarg, &end, 10);
            if (*end != '\0' || port < 1 || port > 65535) {
                fprintf(stderr, "%s: -p %s: not a port number (1..65535)\n", argv[0], optarg);
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
        default: usage(argv[0]);
        }
    }
    if (optind + 1 != argc) usage(argv[0]);
    address = argv[optind];
    if (ruspSetAttr(RUSP_ATTR_DROPR, &loss) == -1 || ruspSetAttr(RUSP_ATTR_DEBUG, &debug) == -1) {
        fprintf(stderr, "%s: ruspSetAttr: %s\n", argv[0], strerror(errno));
        exit(EXIT_FAILURE);
    }
}

/* Reads one line from stdin into `buf` without its newline; its length,
 * or -1 at the end of input. */
static ssize_t get_user_input(const char *prompt, char *buf, size_t size) {
    if (isatty(STDIN_FILENO)) {
        printf("%s", prompt);
        fflush(stdout);
    }
    if (fgets(buf, (int)size, stdin) == NULL) return -1;
    size_t n = strcspn(buf, "\n");
    buf[n] = '\0';
    return (ssize_t)n;
}

static void show(const char *what, struct sockaddr_in *a) {
    char ip[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &a->sin_addr, ip, sizeof ip);
    printf("%s %s:%d", what, ip, ntohs(a->sin_port));
}

int main(int argc, char **argv) {
    ConnectionId conn;
    char snddata[MSGS], rcvdata[MSGS];
    ssize_t snd, rcv;
    struct sockaddr_in local, peer;

    parse_arguments(argc, argv);

    if ((conn = ruspConnect(address, port)) == -1) {
        fprintf(stderr, "ruspConnect(%s, %d): %s\n", address, port, strerror(errno));
        exit(EXIT_FAILURE);
    }
    if (ruspLocal(conn, &local) == -1 || ruspPeer(conn, &peer) == -1) {
        fprintf(stderr, "ruspLocal/ruspPeer: %s\n", strerror(errno));
        exit(EXIT_FAILURE);
    }
    printf("WELCOME TO ECHO CLIENT\n");
    show("Running on", &local);
    show(" Connected to", &peer);
    printf("\n");

    int failed = 0;
    while ((snd = get_user_input("[INPUT (empty to disconnect)]>", snddata, MSGS)) > 0) {
        if (ruspSend(conn, snddata, (size_t)snd) != snd) {
            fprintf(stderr, "ruspSend: %s\n", strerror(errno));
            failed = 1;
            break;
        }
        /* The echo may come back in pieces: a connection is a byte stream. */
        ssize_t got = 0;
        rcv = 1;
        while (got < snd && (rcv = ruspReceive(conn, rcvdata + got, (size_t)(snd - got))) > 0) got += rcv;
        if (got < snd) {
            fprintf(stderr, "ruspReceive: %s\n", rcv == 0 ? "the server closed the connection" : strerror(errno));
            failed = 1;
            break;
        }
        printf("[RCV] %.*s\n", (int)got, rcvdata);
    }

    ruspClose(conn);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
