/* UPLOAD client (paper 04 section 3.2, Fig. 16), written against
 * librusp's API as the paper describes it (rusp.h): sends a file to the
 * server and reports size, drop rate, time and speed.
 *
 *   upc address file [-p port] [-l loss] [-d]
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "rusp.h"

#define PORT 55000
#define BSIZE 65536 /* bytes read from the file and sent per call */

static char *address, *filesnd;
static int port = PORT;
static double loss = 0.0;
static int debug = 0;

static void usage(const char *prog) {
    fprintf(stderr, "usage: %s address file [-p port] [-l loss] [-d]\n", prog);
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
    if (optind + 2 != argc) usage(argv[0]);
    address = argv[optind];
    filesnd = argv[optind + 1];
    if (ruspSetAttr(RUSP_ATTR_DROPR, &loss) == -1 || ruspSetAttr(RUSP_ATTR_DEBUG, &debug) == -1) {
        fprintf(stderr, "%s: ruspSetAttr: %s\n", argv[0], strerror(errno));
        exit(EXIT_FAILURE);
    }
}

static double seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    ConnectionId conn;
    struct sockaddr_in addr, saddr;
    char straddr[INET_ADDRSTRLEN], strsaddr[INET_ADDRSTRLEN];
    static char snddata[BSIZE];
    ssize_t rd;
    long long size, sent = 0;

    parse_arguments(argc, argv);

    int fd = open(filesnd, O_RDONLY);
    struct stat st;
    if (fd == -1 || fstat(fd, &st) == -1) {
        fprintf(stderr, "cannot open %s: %s\n", filesnd, strerror(errno));
        exit(EXIT_FAILURE);
    }
    size = (long long)st.st_size;

    if ((conn = ruspConnect(address, port)) == -1) {
        fprintf(stderr, "ruspConnect(%s, %d): %s\n", address, port, strerror(errno));
        exit(EXIT_FAILURE);
    }
    if (ruspLocal(conn, &addr) == -1 || ruspPeer(conn, &saddr) == -1) {
        fprintf(stderr, "ruspLocal/ruspPeer: %s\n", strerror(errno));
        exit(EXIT_FAILURE);
    }
    inet_ntop(AF_INET, &addr.sin_addr, straddr, sizeof straddr);
    inet_ntop(AF_INET, &saddr.sin_addr, strsaddr, sizeof strsaddr);
    printf("WELCOME TO UPLOAD CLIENT\n");
    printf("Running on %s:%d Connected to %s:%d\n", straddr, ntohs(addr.sin_port), strsaddr, ntohs(saddr.sin_port));
    printf("Sending File (size: %lld): %s\n", size, filesnd);

    double start = seconds();
    while ((rd = read(fd, snddata, BSIZE)) > 0) {
        if (ruspSend(conn, snddata, (size_t)rd) != rd) {
            fprintf(stderr, "ruspSend after %lld bytes: %s\n", sent, strerror(errno));
            exit(EXIT_FAILURE);
        }
        sent += rd;
    }
    if (rd == -1) {
        fprintf(stderr, "cannot read %s: %s\n", filesnd, strerror(errno));
        exit(EXIT_FAILURE);
    }
    close(fd);
    /* The close returns once the server has every byte: count it in. */
    errno = 0;
    ruspClose(conn);
    if (errno != 0) {
        fprintf(stderr, "ruspClose: %s (%s)\n", strerror(errno), mf_last_error());
        exit(EXIT_FAILURE);
    }
    double elapsed = seconds() - start;

    double kb = (double)sent / 1000.0;
    printf("Sent: %fKB Droprate: %f%% Time: %fs Speed: %fKbps\n", kb, loss * 100.0, elapsed,
           kb * 8.0 / (elapsed > 0 ? elapsed : 1e-9));
    return EXIT_SUCCESS;
}
