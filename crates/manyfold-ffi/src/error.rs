//! Error codes of the C API and where they come from: every failure is a
//! negative `MF_E*` code, and its text is kept per thread for
//! `mf_last_error` (the errno + strerror convention, with a message that
//! names the argument or peer instead of a fixed string). Rust errors map
//! by kind: `io::ErrorKind`, the library's per-call errors
//! (`ConnectError`, `SendError`, `CloseError`, `ConnectionError`: by what
//! they name, then by the close reason, spec §4), `manyfold::GroupError`.
//!
//! `entry` is the one wrapper around every exported function: it catches a
//! panic before it can unwind into C and turns it into `MF_EINTERNAL`.

#![forbid(unsafe_code)]

use std::cell::RefCell;
use std::ffi::{c_char, c_int, CStr, CString};
use std::io;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Success.
pub const MF_OK: c_int = 0;
/// An argument is invalid: a null pointer, a zero or too large length, an
/// address that does not parse, an unknown attribute or mode, a value out
/// of range.
pub const MF_EINVAL: c_int = -1;
/// The descriptor is not open (never opened, or already closed by
/// `mf_close`), or is of the wrong kind for the call (a listener given to
/// `mf_send`, say).
pub const MF_EBADF: c_int = -2;
/// The peer refused the connection (nothing listening there, or its
/// backlog is full).
pub const MF_ECONNREFUSED: c_int = -3;
/// The peer did not answer: the handshake, the connection's idle timer,
/// its stall timer (data unacknowledged for 15 s) or its retransmissions
/// timed out.
pub const MF_ETIMEDOUT: c_int = -4;
/// Closed while in use: a call blocked on a descriptor (receiving,
/// sending, accepting, waiting) when another thread called `mf_close` on
/// it returns this; so does writing after our side was closed. A call
/// made on a descriptor after `mf_close` returned gets `MF_EBADF`.
pub const MF_ECLOSED: c_int = -5;
/// The peer reset the connection or the stream, or it was aborted; or the
/// peer is gone: its host answered ICMP port unreachable to an established
/// connection.
pub const MF_ERESET: c_int = -6;
/// Too big: a message larger than the connection's maximum (nothing was
/// sent), or a result larger than the buffer given for it (nothing was
/// lost: call again with a larger buffer).
pub const MF_ETOOBIG: c_int = -7;
/// The local address is already in use.
pub const MF_EADDRINUSE: c_int = -8;
/// The local address is not available on this host.
pub const MF_EADDRNOTAVAIL: c_int = -9;
/// The operation is not supported here; the text says which and why.
pub const MF_ENOTSUP: c_int = -10;
/// A group could not be formed: fewer peers answered than it needs.
pub const MF_EUNREACHABLE: c_int = -11;
/// A limit was reached: too many open streams, descriptors or group peers.
pub const MF_ELIMIT: c_int = -12;
/// Another I/O error of the socket or the system.
pub const MF_EIO: c_int = -13;
/// A bug inside the library (a caught panic); the text says where.
pub const MF_EINTERNAL: c_int = -14;
/// The peer's host, or the network to it, is unreachable (an ICMP host or
/// network unreachable answered our datagrams).
pub const MF_EHOSTUNREACH: c_int = -15;
/// Called in a child process after `fork()`: the library's connections and
/// threads belong to the parent, and the child has neither. Every call in
/// the child fails at once with this code (before touching any state);
/// a process that forks before its first call is not affected.
pub const MF_EFORK: c_int = -16;

/// A failed call: the code it returns and the text `mf_last_error` gives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Error {
    pub(crate) code: c_int,
    pub(crate) text: String,
}

impl Error {
    pub(crate) fn new(code: c_int, text: impl Into<String>) -> Error {
        Error { code, text: text.into() }
    }

    pub(crate) fn invalid(text: impl Into<String>) -> Error {
        Error::new(MF_EINVAL, text)
    }

    /// An I/O error of `what` (e.g. "connect to 10.0.0.1:4000").
    pub(crate) fn io(what: &str, e: &io::Error) -> Error {
        Error::new(kind_code(e.kind()), format!("{what}: {e}"))
    }

    /// A failure of a connection call: any of the library's per-call errors.
    pub(crate) fn conn(what: &str, e: &impl Failure) -> Error {
        Error::new(e.code(), format!("{what}: {e}"))
    }

    pub(crate) fn group(what: &str, e: &mf::GroupError) -> Error {
        use manyfold_proto::GroupError as E;
        use mf::GroupError as G;
        let code = match e {
            G::Unreachable(_) => MF_EUNREACHABLE,
            G::EndpointClosed => MF_ECLOSED,
            G::Engine(E::MessageTooLarge { .. }) => MF_ETOOBIG,
            G::Engine(E::TooManyPeers(_)) => MF_ELIMIT,
            G::Engine(E::InvalidAddress(_)) => MF_EINVAL,
            G::Engine(E::NoPeers) => MF_EUNREACHABLE,
            G::Engine(E::Closed | E::NotEstablished | E::UnknownGroup) => MF_ECLOSED,
            G::Engine(E::UnknownPeer) => MF_EINVAL,
            _ => MF_EIO,
        };
        Error::new(code, format!("{what}: {e}"))
    }
}

/// The library's per-call errors, each to its `MF_E*` code.
pub(crate) trait Failure: std::fmt::Display {
    fn code(&self) -> c_int;
}

/// The code for a connection's end. spec §6.7: ICMP port unreachable in
/// SYN-SENT is Refused; later it means the peer is gone (as a reset); host
/// unreachable is its own.
fn reason_code(reason: mf::CloseReason, kind: io::ErrorKind) -> c_int {
    match reason {
        mf::CloseReason::Refused => MF_ECONNREFUSED,
        mf::CloseReason::Unreachable(manyfold_proto::UnreachableKind::Host) => MF_EHOSTUNREACH,
        mf::CloseReason::Unreachable(manyfold_proto::UnreachableKind::Port) => MF_ERESET,
        _ => kind_code(kind),
    }
}

impl Failure for mf::ConnectionError {
    fn code(&self) -> c_int {
        match self.close_reason() {
            Some(r) => reason_code(r, self.kind()),
            None => MF_ECLOSED,
        }
    }
}

impl Failure for mf::ConnectError {
    fn code(&self) -> c_int {
        match self {
            mf::ConnectError::EndpointClosed => MF_ECLOSED,
            // The engine's refusals to start one (as before: an I/O error).
            mf::ConnectError::TooManyConnections(_) => MF_EIO,
            other => match other.close_reason() {
                Some(r) => reason_code(r, other.kind()),
                None => kind_code(other.kind()),
            },
        }
    }
}

impl Failure for mf::SendError {
    fn code(&self) -> c_int {
        match self {
            mf::SendError::TooLarge { .. } => MF_ETOOBIG,
            mf::SendError::StreamLimit(_) => MF_ELIMIT,
            mf::SendError::Reset(_) => MF_ERESET,
            mf::SendError::EndpointClosed | mf::SendError::Finished => MF_ECLOSED,
            mf::SendError::NoPeers => MF_EUNREACHABLE,
            mf::SendError::UnknownDestination => MF_EINVAL,
            other => match other.close_reason() {
                Some(r) => reason_code(r, other.kind()),
                None => kind_code(other.kind()),
            },
        }
    }
}

impl Failure for mf::CloseError {
    fn code(&self) -> c_int {
        match self.close_reason() {
            Some(r) => reason_code(r, self.kind()),
            None => MF_ECLOSED,
        }
    }
}

/// The code for an `io::ErrorKind`.
pub(crate) fn kind_code(kind: io::ErrorKind) -> c_int {
    use io::ErrorKind as K;
    match kind {
        K::InvalidInput | K::InvalidData => MF_EINVAL,
        K::ConnectionRefused => MF_ECONNREFUSED,
        K::TimedOut => MF_ETIMEDOUT,
        K::ConnectionReset | K::ConnectionAborted => MF_ERESET,
        K::BrokenPipe | K::NotConnected => MF_ECLOSED,
        K::HostUnreachable | K::NetworkUnreachable => MF_EHOSTUNREACH,
        K::AddrInUse => MF_EADDRINUSE,
        K::AddrNotAvailable => MF_EADDRNOTAVAIL,
        K::QuotaExceeded => MF_ELIMIT,
        K::Unsupported => MF_ENOTSUP,
        _ => MF_EIO,
    }
}

/// The fixed description of a code (`mf_strerror`).
pub(crate) fn describe(code: c_int) -> &'static CStr {
    match code {
        MF_OK => c"success",
        MF_EINVAL => c"invalid argument",
        MF_EBADF => c"bad descriptor: not open, or the wrong kind for this call",
        MF_ECONNREFUSED => c"connection refused",
        MF_ETIMEDOUT => c"timed out: the peer did not answer",
        MF_ECLOSED => c"closed",
        MF_ERESET => c"reset by the peer, or aborted",
        MF_ETOOBIG => c"too big: message over the maximum, or buffer too small",
        MF_EADDRINUSE => c"address already in use",
        MF_EADDRNOTAVAIL => c"address not available",
        MF_ENOTSUP => c"not supported",
        MF_EUNREACHABLE => c"group not formed: too few peers answered",
        MF_ELIMIT => c"limit reached",
        MF_EIO => c"I/O error",
        MF_EINTERNAL => c"internal error in libmanyfold",
        MF_EHOSTUNREACH => c"host unreachable",
        MF_EFORK => c"called in a child process after fork(): the library belongs to the parent",
        _ => c"unknown error code",
    }
}

thread_local! {
    /// The text of this thread's last error; its buffer is what
    /// `mf_last_error` points into, replaced on the next failure.
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

/// Empties this thread's last error (a successful call). Allocates
/// nothing when it is already empty.
pub(crate) fn clear_last_error() {
    LAST_ERROR.with(|e| {
        let mut e = e.borrow_mut();
        if !e.as_bytes().is_empty() {
            *e = CString::default();
        }
    });
}

pub(crate) fn set_last_error(text: &str) {
    // An interior NUL would end the C string early; show it instead.
    let text = CString::new(text.replace('\0', "\\0")).unwrap_or_default();
    LAST_ERROR.with(|e| *e.borrow_mut() = text);
}

/// Where this thread's last error text lives (valid until the next failure
/// on this thread replaces it).
pub(crate) fn last_error_ptr() -> *const c_char {
    LAST_ERROR.with(|e| e.borrow().as_ptr())
}

/// What an exported function returns: a value, or a negative code.
pub(crate) trait Code {
    fn from_code(code: c_int) -> Self;
}

impl Code for c_int {
    fn from_code(code: c_int) -> Self {
        code
    }
}

impl Code for isize {
    fn from_code(code: c_int) -> Self {
        code as isize
    }
}

impl Code for i64 {
    fn from_code(code: c_int) -> Self {
        i64::from(code)
    }
}

/// Runs the body of an exported function: its error becomes its code and
/// this thread's last error, success empties the last error; a panic is
/// caught here, never unwinding into C, and becomes `MF_EINTERNAL`. In a
/// child process after `fork()` the body does not run: `MF_EFORK`.
pub(crate) fn entry<T: Code>(name: &str, body: impl FnOnce() -> Result<T, Error>) -> T {
    if let Err(e) = crate::table::check_process(name) {
        set_last_error(&e.text);
        return T::from_code(e.code);
    }
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(v)) => {
            clear_last_error();
            v
        }
        Ok(Err(e)) => {
            set_last_error(&e.text);
            T::from_code(e.code)
        }
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic without a message".into());
            set_last_error(&format!("{name}: internal error (please report it): {what}"));
            T::from_code(MF_EINTERNAL)
        }
    }
}
