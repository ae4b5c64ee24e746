/* A group receiver: an ordinary listener. Accepts one connection, reads
 * whole messages (mf_recv_message) until the sender closes, and prints the
 * byte count, message count and checksum, to compare with group_send's.
 *
 *   group_recv [-d] [-l DROP_RATE] [-a IP] [PORT] */
#include <unistd.h>

#include "common.h"

int main(int argc, char **argv) {
    double drop = 0.0;
    int debug = 0, opt;
    const char *ip = "127.0.0.1";
    while ((opt = getopt(argc, argv, "dl:a:h")) != -1) {
        switch (opt) {
        case 'd': debug = 1; break;
        case 'l': drop = real_arg("-l DROP_RATE", optarg, 0.0, 1.0); break;
        case 'a': ip = optarg; break;
        default:
            fprintf(stderr, "usage: %s [-d] [-l DROP_RATE] [-a IP] [PORT]\n", argv[0]);
            return opt == 'h' ? EXIT_SUCCESS : EXIT_FAILURE;
        }
    }
    if (argc - optind > 1) {
        fprintf(stderr, "usage: %s [-d] [-l DROP_RATE] [-a IP] [PORT]\n", argv[0]);
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

    int conn = mf_accept(lconn);
    if (conn < 0) die("mf_accept", conn);
    mf_close(lconn);

    static unsigned char buf[MSGS];
    mf_message info;
    uint64_t sum = FNV_START;
    long long bytes = 0, messages = 0;
    int rc;
    while ((rc = mf_recv_message(conn, &info, buf, sizeof buf)) > 0) {
        if (info.kind != MF_MSG_DATA) continue; /* a stream's end or reset */
        sum = fnv1a(sum, buf, info.len);
        bytes += (long long)info.len;
        messages++;
    }
    if (rc < 0) die("mf_recv_message", rc);
    rc = mf_close(conn);
    if (rc < 0) die("mf_close", rc);
    printf("received %lld bytes in %lld messages, fnv1a %016llx\n", bytes, messages, (unsigned long long)sum);
    return EXIT_SUCCESS;
}
