/* One sender, many receivers (spec §14; paper 00): opens a group to every
 * receiver named on the command line with one parallel handshake, sends
 * BYTES of the test pattern as messages of BLOCK bytes (each held once in
 * memory, whatever the number of receivers), waits until they are
 * delivered in the mode's sense, closes, and prints the byte count and
 * checksum each receiver (group_recv) should print.
 *
 *   group_send [-d] [-l DROP_RATE] [-m all|any|atleast:P|balanced:K:P]
 *              [-s BYTES] [-b BLOCK] HOST:PORT... */
#include <unistd.h>

#include "common.h"

int main(int argc, char **argv) {
    double drop = 0.0;
    int debug = 0, opt, mode = MF_MODE_ALL, p = 0, k = 0;
    long long bytes = 1 << 20;
    size_t block = MSGS;
    while ((opt = getopt(argc, argv, "dl:m:s:b:h")) != -1) {
        switch (opt) {
        case 'd': debug = 1; break;
        case 'l': drop = real_arg("-l DROP_RATE", optarg, 0.0, 1.0); break;
        case 's': bytes = int_arg("-s BYTES", optarg, 0, 1LL << 50); break;
        case 'b': block = (size_t)int_arg("-b BLOCK", optarg, 1, MSGS); break;
        case 'm':
            if (strcmp(optarg, "all") == 0) mode = MF_MODE_ALL;
            else if (strcmp(optarg, "any") == 0) mode = MF_MODE_ANY;
            else if (sscanf(optarg, "atleast:%d", &p) == 1) mode = MF_MODE_AT_LEAST;
            else if (sscanf(optarg, "balanced:%d:%d", &k, &p) == 2) mode = MF_MODE_BALANCED;
            else { fprintf(stderr, "unknown mode %s\n", optarg); return EXIT_FAILURE; }
            break;
        default:
            fprintf(stderr, "usage: %s [-d] [-l DROP_RATE] [-m MODE] [-s BYTES] [-b BLOCK] HOST:PORT...\n", argv[0]);
            return opt == 'h' ? EXIT_SUCCESS : EXIT_FAILURE;
        }
    }
    int count = argc - optind;
    if (count < 1 || block == 0 || block > MSGS) {
        fprintf(stderr, "usage: %s [-d] [-l DROP_RATE] [-m MODE] [-s BYTES] [-b BLOCK<=%d] HOST:PORT...\n", argv[0], MSGS);
        return EXIT_FAILURE;
    }
    set_attrs(drop, debug);

    int status[256];
    if (count > 256) count = 256;
    int group = mf_group_connect((const char *const *)&argv[optind], (size_t)count, mode, p, k, status);
    if (group < 0) die("mf_group_connect", group);
    for (int i = 0; i < count; i++)
        if (status[i] != 0) fprintf(stderr, "warning: %s is not in the group: %s\n", argv[optind + i], mf_strerror(status[i]));

    static unsigned char msg[MSGS];
    uint64_t sum = FNV_START;
    long long messages = 0;
    for (long long off = 0; off < bytes; off += (long long)block) {
        size_t n = bytes - off < (long long)block ? (size_t)(bytes - off) : block;
        for (size_t i = 0; i < n; i++) msg[i] = pattern((uint64_t)off + i);
        int64_t seq = mf_group_send(group, msg, n);
        if (seq < 0) die("mf_group_send", seq);
        sum = fnv1a(sum, msg, n);
        messages++;
    }
    int rc = mf_group_wait(group); /* paper 00's WaitForSend */
    if (rc < 0) die("mf_group_wait", rc);
    rc = mf_group_close(group);
    if (rc < 0) die("mf_group_close", rc);
    printf("sent %lld bytes in %lld messages, fnv1a %016llx\n", bytes, messages, (unsigned long long)sum);
    return EXIT_SUCCESS;
}
