//! manyfold's C API: `libmanyfold.so` / `libmanyfold.a` and the header
//! `include/manyfold.h` (generated from these doc comments by cbindgen),
//! in the shape of librusp's API (paper 04 §2.2): `mf_listen`,
//! `mf_accept`, `mf_connect`, `mf_send`, `mf_receive`, `mf_close`,
//! `mf_local`, `mf_peer`, `mf_set_attr`, `mf_get_attr`; and manyfold's own
//! messages on streams (spec §13) and groups (spec §14).
//!
//! Conventions, as librusp and BSD sockets: every listener, connection and
//! group is a positive `int` descriptor; calls block the calling thread;
//! a failure returns a negative `MF_E*` code and `mf_last_error()` says
//! what failed and why. The calls are thread-safe: one thread may send
//! while another receives on the same connection.
//!
//! Layout: `stream` (librusp's calls), `message` (messages on streams),
//! `group`, `developer` (attributes and error text); behind them `table`
//! (descriptors, the runtime), `attrs` (the defaults and each socket's
//! drop rate and seed, changed while it runs), `error` (codes, the panic guard
//! at every entry point), `cabi` (pointer checks) and `exit` (connections
//! left open when the process exits are reset, so that no peer waits).
//!
//! Do not `fork()` after the first call: the library runs its connections
//! on two internal threads, which a child process does not have; every
//! call in such a child fails at once with `MF_EFORK`. The concurrent echo
//! server of paper 04 §3.1 forks per client; the examples here (and
//! librusp's own samples) use a thread per client instead.
//!
//! `include/rusp.h` (not generated) gives librusp's own names, argument
//! order and return conventions on top of these calls, so that librusp
//! programs build unchanged.

// This crate is a C ABI: its exported functions need `#[no_mangle]` and
// raw pointers, which the workspace's `unsafe_code = "deny"` forbids.
// Every `unsafe` block says why it is sound (`// SAFETY:`); the modules
// that need none forbid it.
#![allow(unsafe_code)]
#![deny(clippy::undocumented_unsafe_blocks)]

// In the order the header lists them: librusp's calls first.
mod stream;

mod message;

mod group;

mod developer;

mod attrs;
mod cabi;
mod error;
mod exit;
mod table;

pub use developer::*;
pub use error::{
    MF_EADDRINUSE, MF_EADDRNOTAVAIL, MF_EBADF, MF_ECLOSED, MF_ECONNREFUSED, MF_EFORK, MF_EHOSTUNREACH, MF_EINTERNAL,
    MF_EINVAL, MF_EIO, MF_ELIMIT, MF_ENOTSUP, MF_ERESET, MF_ETIMEDOUT, MF_ETOOBIG, MF_EUNREACHABLE, MF_OK,
};
pub use group::*;
pub use message::*;
pub use stream::*;

#[cfg(test)]
mod tests;
