/* Shared by the examples (paper 04 §3.1's common.h): option helpers, the
 * test pattern and its checksum. */
#ifndef EXAMPLES_COMMON_H
#define EXAMPLES_COMMON_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "manyfold.h"

#define MSGS 65536 /* the largest buffer one call moves */

/* Prints what failed, with the library's text, and exits. */
static inline void die(const char *what, long code) {
    fprintf(stderr, "%s failed: %s (%s)\n", what, mf_last_error(), mf_strerror((int)code));
    exit(EXIT_FAILURE);
}

/* The whole of `text` as an integer in [min, max], or exits naming the
 * option and the bad value: "127.0.0.1" is not silently port 127. */
static inline long long int_arg(const char *what, const char *text, long long min, long long max) {
    char *end = NULL;
    long long v = strtoll(text, &end, 10);
    if (end == text || *end != '\0' || v < min || v > max) {
        fprintf(stderr, "error: %s must be a whole number from %lld to %lld, not \"%s\"\n", what, min, max, text);
        exit(EXIT_FAILURE);
    }
    return v;
}

/* The whole of `text` as a number in [min, max], or exits naming it. */
static inline double real_arg(const char *what, const char *text, double min, double max) {
    char *end = NULL;
    double v = strtod(text, &end);
    if (end == text || *end != '\0' || !(v >= min && v <= max)) {
        fprintf(stderr, "error: %s must be a number from %g to %g, not \"%s\"\n", what, min, max, text);
        exit(EXIT_FAILURE);
    }
    return v;
}

/* -l RATE and -d: the drop rate and debug attributes, set on the defaults
 * before any descriptor is made (librusp's ruspSetAttr). */
static inline void set_attrs(double drop, int debug) {
    int rc = mf_set_attr(MF_DEFAULTS, MF_ATTR_DROP_RATE, &drop, sizeof drop);
    if (rc < 0) die("mf_set_attr(MF_ATTR_DROP_RATE)", rc);
    rc = mf_set_attr(MF_DEFAULTS, MF_ATTR_DEBUG, &debug, sizeof debug);
    if (rc < 0) die("mf_set_attr(MF_ATTR_DEBUG)", rc);
}

/* Byte i of the test pattern: deterministic, not periodic in small blocks. */
static inline unsigned char pattern(uint64_t i) {
    uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ull;
    x ^= x >> 29;
    return (unsigned char)(x ^ (x >> 17));
}

/* FNV-1a over a buffer, continued from `h` (start with FNV_START). */
#define FNV_START 0xcbf29ce484222325ull
static inline uint64_t fnv1a(uint64_t h, const unsigned char *p, size_t n) {
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

#endif
