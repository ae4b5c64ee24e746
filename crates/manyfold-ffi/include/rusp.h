/*
 * rusp.h: librusp's API (paper 04, section 2.2) on libmanyfold, so that a
 * librusp program builds unchanged: the same names, argument order, types
 * and return conventions (-1 on error with errno set; 0 on success for
 * ruspLocal, ruspPeer and the attribute calls). Link with -lmanyfold
 * instead of -lrusp (see crates/manyfold-ffi/README.md).
 *
 * Written by hand (it is not generated): every call is a small inline
 * wrapper of a call of manyfold.h, whose negative MF_E* code becomes -1
 * and an errno value (rusp_errno below). The text of the last error, which
 * names the call and the descriptor or peer, is still mf_last_error().
 *
 * What differs from librusp, and why:
 *   - ruspSetAttr has no descriptor: as librusp's, it sets the attribute
 *     of the whole process (manyfold's MF_ALL), at once on every open
 *     connection too, mid-connection as in librusp: debug, the drop rate
 *     (datagrams received from then on are dropped at the new rate) and
 *     the seed (every connection's drop generator is re-seeded). One
 *     exception: a connection accepted by a listening connection that was
 *     since closed shares that listener's socket, which can then no longer
 *     be changed, so it keeps its drop rate and seed; ruspSetAttr sets
 *     everything else and fails with -1 / ENOTSUP.
 *   - RUSP_ATTR_DROPR drops received segments only, as librusp does.
 *     RUSP_ATTR_SEED (a uint64_t, manyfold's) fixes the drop generator's
 *     seed; 0 (the default) draws a new one every run.
 *   - A child process forked after the first call cannot use the
 *     library (its threads stay in the parent): every call fails with -1 /
 *     EPERM, mf_last_error() says why. Serve each client on a thread.
 */
#ifndef RUSP_H_
#define RUSP_H_

#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h> /* librusp's rusp.h brings these in; its programs count on them */

#include "manyfold.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A connection, listening or established: a positive number. */
typedef long ConnectionId;

/* Attributes (ruspSetAttr / ruspGetAttr). */
#define RUSP_ATTR_DEBUG 1 /* int, 0 or 1: log every segment and state change on stderr */
#define RUSP_ATTR_DROPR 2 /* double in [0, 1]: probability of dropping a received segment */
#define RUSP_ATTR_DROP RUSP_ATTR_DROPR  /* the paper's name for it */
#define RUDP_ATTR_DEBUG RUSP_ATTR_DEBUG /* the paper's spelling */
#define RUSP_ATTR_SEED 3 /* uint64_t: the drop generator's seed; 0 draws one per run */

/* The errno value for a manyfold error code. */
static inline int rusp_errno(int code) {
    switch (code) {
    case MF_EINVAL: return EINVAL;
    case MF_EBADF: return EBADF;
    case MF_ECONNREFUSED: return ECONNREFUSED;
    case MF_ETIMEDOUT: return ETIMEDOUT;
    case MF_ECLOSED: return ENOTCONN;
    case MF_ERESET: return ECONNRESET;
    case MF_ETOOBIG: return EMSGSIZE;
    case MF_EADDRINUSE: return EADDRINUSE;
    case MF_EADDRNOTAVAIL: return EADDRNOTAVAIL;
    case MF_ENOTSUP: return ENOTSUP;
    case MF_EUNREACHABLE: return EHOSTUNREACH;
    case MF_ELIMIT: return EMFILE;
    case MF_EIO: return EIO;
    case MF_EHOSTUNREACH: return EHOSTUNREACH;
    case MF_EFORK: return EPERM;
    default: return EPROTO; /* MF_EINTERNAL */
    }
}

/* -1, with errno for `code`. */
static inline int rusp_fail(int code) {
    errno = rusp_errno(code);
    return -1;
}

/* The manyfold descriptor of `connid`, or 0 (EBADF) if it cannot be one. */
static inline int rusp_desc(ConnectionId connid) {
    if (connid <= 0 || connid > INT_MAX) {
        errno = EBADF;
        return 0;
    }
    return (int)connid;
}

/* Opens a connection listening on every local IPv4 address at `lport`
 * (0 picks a free port; ruspLocal tells which). Returns its id, or -1. */
static inline ConnectionId ruspListen(const int lport) {
    int d = mf_listen(NULL, lport);
    return d > 0 ? (ConnectionId)d : rusp_fail(d);
}

/* Waits for the next connection of the listening `lconnid` to complete
 * its handshake. Returns the new connection's id, or -1. */
static inline ConnectionId ruspAccept(const ConnectionId lconnid) {
    int l = rusp_desc(lconnid);
    if (l == 0) return -1;
    int d = mf_accept(l);
    return d > 0 ? (ConnectionId)d : rusp_fail(d);
}

/* Connects to the listener at `ip` (an address or host name) and `port`.
 * Returns the new connection's id, or -1 (ECONNREFUSED, ETIMEDOUT, ...). */
static inline ConnectionId ruspConnect(const char *ip, const int port) {
    int d = mf_connect(ip, port);
    return d > 0 ? (ConnectionId)d : rusp_fail(d);
}

/* Closes `connid`, blocking until the shutdown handshake is complete; on
 * failure errno says why (the id is closed all the same). On success errno
 * is left as it was: the close runs the library's event loop on this
 * thread, whose non-blocking socket calls may set it (EAGAIN) on the way,
 * and a caller of this void function can only tell failure by errno. */
static inline void ruspClose(const ConnectionId connid) {
    int d = rusp_desc(connid);
    if (d == 0) return;
    int saved = errno;
    int rc = mf_close(d);
    errno = rc < 0 ? rusp_errno(rc) : saved;
}

/* Sends the `msgs` bytes at `msg`. Returns `msgs`, or -1. */
static inline ssize_t ruspSend(const ConnectionId connid, const char *msg, const size_t msgs) {
    int d = rusp_desc(connid);
    if (d == 0) return -1;
    ptrdiff_t n = mf_send(d, msg, msgs);
    return n >= 0 ? (ssize_t)n : rusp_fail((int)n);
}

/* Receives up to `msgs` bytes into `msg`. Returns their number, 0 at the
 * end of the peer's data (it closed), or -1. */
static inline ssize_t ruspReceive(const ConnectionId connid, char *msg, const size_t msgs) {
    int d = rusp_desc(connid);
    if (d == 0) return -1;
    ptrdiff_t n = mf_receive(d, msg, msgs);
    return n >= 0 ? (ssize_t)n : rusp_fail((int)n);
}

/* Copies an IPv4 address from `storage` into `addr`; 0, or -1. */
static inline int rusp_sockaddr_in(int rc, const struct sockaddr_storage *storage, struct sockaddr_in *addr) {
    if (rc < 0) return rusp_fail(rc);
    if (addr == NULL) {
        errno = EINVAL;
        return -1;
    }
    if (storage->ss_family != AF_INET) {
        errno = EAFNOSUPPORT; /* an IPv6 endpoint has no sockaddr_in */
        return -1;
    }
    memcpy(addr, storage, sizeof *addr);
    return 0;
}

/* The local address of `connid` (listening or established). 0, or -1. */
static inline int ruspLocal(const ConnectionId connid, struct sockaddr_in *addr) {
    int d = rusp_desc(connid);
    if (d == 0) return -1;
    struct sockaddr_storage storage;
    return rusp_sockaddr_in(mf_local_addr(d, &storage), &storage, addr);
}

/* The peer's address of the established `connid`. 0, or -1 (EBADF for a
 * listening connection, which has no peer). */
static inline int ruspPeer(const ConnectionId connid, struct sockaddr_in *addr) {
    int d = rusp_desc(connid);
    if (d == 0) return -1;
    struct sockaddr_storage storage;
    return rusp_sockaddr_in(mf_peer_addr(d, &storage), &storage, addr);
}

/* The size of attribute `attr`'s value, or 0 if there is no such attribute. */
static inline size_t rusp_attr_size(int attr) {
    switch (attr) {
    case RUSP_ATTR_DEBUG: return sizeof(int);
    case RUSP_ATTR_DROPR: return sizeof(double);
    case RUSP_ATTR_SEED: return sizeof(uint64_t);
    default: return 0;
    }
}

/* manyfold's number of attribute `attr` (the same numbers but for debug
 * and drop rate, which librusp numbers the other way round). */
static inline int rusp_attr(int attr) {
    switch (attr) {
    case RUSP_ATTR_DEBUG: return MF_ATTR_DEBUG;
    case RUSP_ATTR_DROPR: return MF_ATTR_DROP_RATE;
    case RUSP_ATTR_SEED: return MF_ATTR_SEED;
    default: return -1;
    }
}

/* Sets attribute `attr` of the process to the value at `value` (an int
 * for RUSP_ATTR_DEBUG, a double for RUSP_ATTR_DROPR, a uint64_t for
 * RUSP_ATTR_SEED), for the connections made next and at once for the open
 * ones. 0, or -1 (ENOTSUP: connections accepted by a closed listening
 * connection kept their drop rate or seed; the rest is set). */
static inline int ruspSetAttr(const int attr, const void *value) {
    size_t size = rusp_attr_size(attr);
    if (size == 0) {
        errno = EINVAL;
        return -1;
    }
    int rc = mf_set_attr(MF_ALL, rusp_attr(attr), value, size);
    return rc < 0 ? rusp_fail(rc) : 0;
}

/* Reads attribute `attr` of the process into `value`. 0, or -1. */
static inline int ruspGetAttr(const int attr, void *value) {
    size_t size = rusp_attr_size(attr);
    if (size == 0) {
        errno = EINVAL;
        return -1;
    }
    int rc = mf_get_attr(MF_DEFAULTS, rusp_attr(attr), value, size);
    return rc < 0 ? rusp_fail(rc) : 0;
}

#ifdef __cplusplus
}
#endif

#endif /* RUSP_H_ */
