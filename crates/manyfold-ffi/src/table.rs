//! The descriptor table: C sees every listener, connection and group as a
//! positive `int`, as librusp's `ConnectionId` (paper 04 §2.2), and this
//! table maps it to the Rust objects. An integer cannot dangle: a closed or
//! never-opened descriptor is looked up, not dereferenced, and fails with
//! `MF_EBADF`. Descriptors are not reused until the counter wraps at
//! `INT_MAX`, so a stale one is very unlikely to name a newer object.
//!
//! Also here: the tokio runtime every blocking call runs on and
//! the process it belongs to (a child after `fork()` has neither its
//! threads nor its sockets); and `Closing`, with which `mf_close` wakes
//! every call blocked on a descriptor.

#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::ffi::c_int;
use std::net::SocketAddr;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use tokio::runtime::Runtime;
use tokio::sync::watch;

use crate::attrs::{Attrs, SocketAttrs};
use crate::error::{Error, MF_EBADF, MF_ECLOSED, MF_EFORK, MF_EINTERNAL, MF_ELIMIT};

/// The process that started the runtime: the only one whose calls may use it.
static OWNER: OnceLock<u32> = OnceLock::new();

/// Fails with `MF_EFORK` in a child process forked after the runtime
/// started: the runtime's threads do not exist in the child, its locks may
/// have been held by them at the fork, and its sockets are shared with the
/// parent. Checked before anything else by every call (`error::entry`).
pub(crate) fn check_process(call: &str) -> Result<(), Error> {
    match OWNER.get() {
        Some(&owner) if owner != std::process::id() => Err(Error::new(
            MF_EFORK,
            format!(
                "{call}: called in process {} after fork(); libmanyfold's connections and threads belong to \
                 process {owner}, which made the first call. Make the calls in that process (a thread per \
                 client instead of a process), or fork before the first call",
                std::process::id()
            ),
        )),
        _ => Ok(()),
    }
}

/// The runtime that drives every endpoint of the library, built on first
/// use. Its threads keep connections going (acknowledging, retransmitting)
/// between the caller's calls.
pub(crate) fn runtime() -> Result<&'static Runtime, Error> {
    static RUNTIME: OnceLock<Result<Runtime, String>> = OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            OWNER.get_or_init(std::process::id);
            crate::exit::register();
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .thread_name("manyfold-ffi")
                .enable_all()
                .build()
                .map_err(|e| format!("cannot start libmanyfold's runtime threads: {e}"))
        })
        .as_ref()
        .map_err(|e| Error::new(MF_EINTERNAL, e.clone()))
}

/// Runs `f` and returns its value, dropping nothing outside the runtime's
/// context: endpoint and connection handles may need it when they go.
pub(crate) fn in_runtime<T>(f: impl FnOnce(&'static Runtime) -> Result<T, Error>) -> Result<T, Error> {
    let rt = runtime()?;
    let _guard = rt.enter();
    f(rt)
}

/// Set by `mf_close`: wakes every call blocked on the descriptor, which
/// then returns `MF_ECLOSED`.
#[derive(Debug)]
pub(crate) struct Closing(watch::Sender<bool>);

impl Default for Closing {
    fn default() -> Self {
        Closing(watch::channel(false).0)
    }
}

impl Closing {
    pub(crate) fn close(&self) {
        self.0.send_replace(true);
    }

    pub(crate) fn is_closed(&self) -> bool {
        *self.0.borrow()
    }

    /// Blocks the calling thread on `work` until it completes or the
    /// descriptor is closed, whichever comes first (a close already made
    /// wins: nothing of `work` runs). `what` names the call for the error.
    pub(crate) fn block_on<T>(
        &self,
        rt: &Runtime,
        what: impl FnOnce() -> String,
        work: impl std::future::Future<Output = Result<T, Error>>,
    ) -> Result<T, Error> {
        let mut closed = self.0.subscribe();
        let woken = rt.block_on(async {
            tokio::select! {
                biased;
                _ = closed.wait_for(|c| *c) => None,
                r = work => Some(r),
            }
        });
        match woken {
            Some(Ok(v)) => Ok(v),
            Some(Err(e)) if !self.is_closed() => Err(e),
            // Closed; or failed because of the close while `work` was being
            // polled (the connection's sending side finished, say).
            _ => Err(Error::new(MF_ECLOSED, format!("{}: closed by mf_close on another thread", what()))),
        }
    }
}

/// A listening endpoint (`mf_listen`).
#[derive(Debug)]
pub(crate) struct ListenerEntry {
    pub(crate) endpoint: mf::Endpoint,
    /// Its socket's drop rate and seed, shared with the connections it
    /// accepted.
    pub(crate) attrs: Arc<SocketAttrs>,
    /// Set by `mf_close`: wakes an `mf_accept` blocked on another thread.
    pub(crate) closing: Closing,
}

/// One connection (`mf_accept`, `mf_connect`).
#[derive(Debug)]
pub(crate) struct StreamEntry {
    /// Sending and receiving go through this handle, so that one thread
    /// may send while another receives on the same descriptor.
    pub(crate) streams: mf::Streams,
    /// Taken by `mf_close` for the graceful close.
    pub(crate) conn: Mutex<Option<mf::Connection>>,
    /// The socket of a connecting stream, shut down (released) by
    /// `mf_close` once the connection has ended. An accepted one shares
    /// the listener's, and must not keep the listener listening.
    pub(crate) endpoint: Mutex<Option<mf::Endpoint>>,
    /// Set by `mf_close` first: wakes the calls blocked on this descriptor.
    pub(crate) closing: Closing,
    pub(crate) local: SocketAddr,
    pub(crate) peer: SocketAddr,
    /// Its socket's drop rate and seed: its own (`mf_connect`), or its
    /// listener's, whose socket it shares (`mf_accept`).
    pub(crate) attrs: Arc<SocketAttrs>,
    /// A message that did not fit the caller's buffer, kept for the next call.
    pub(crate) pending: Mutex<Option<(u16, mf::StreamItem)>>,
    /// The caller has read the end of the peer's data (so `mf_close` is
    /// the passive close).
    pub(crate) peer_ended: AtomicBool,
}

/// One group (`mf_group_connect`).
#[derive(Debug)]
pub(crate) struct GroupEntry {
    pub(crate) group: mf::Group,
    pub(crate) endpoint: mf::Endpoint,
    pub(crate) attrs: Arc<SocketAttrs>,
    pub(crate) pending: Mutex<Option<(mf::Destination, mf::StreamItem)>>,
    /// Set by `mf_close` first: wakes the calls blocked on this descriptor.
    pub(crate) closing: Closing,
}

#[derive(Debug, Clone)]
pub(crate) enum Handle {
    Listener(Arc<ListenerEntry>),
    Stream(Arc<StreamEntry>),
    Group(Arc<GroupEntry>),
}

impl Handle {
    fn kind(&self) -> &'static str {
        match self {
            Handle::Listener(_) => "a listener",
            Handle::Stream(_) => "a connection",
            Handle::Group(_) => "a group",
        }
    }

    /// The drop rate and seed of the socket this descriptor is on.
    pub(crate) fn socket_attrs(&self) -> &SocketAttrs {
        match self {
            Handle::Listener(l) => &l.attrs,
            Handle::Stream(s) => &s.attrs,
            Handle::Group(g) => &g.attrs,
        }
    }

    pub(crate) fn attrs(&self) -> Attrs {
        self.socket_attrs().get()
    }

    pub(crate) fn local(&self) -> SocketAddr {
        match self {
            Handle::Listener(l) => l.endpoint.local_addr().unwrap_or(([0, 0, 0, 0], 0).into()),
            Handle::Stream(s) => s.local,
            Handle::Group(g) => g.endpoint.local_addr().unwrap_or(([0, 0, 0, 0], 0).into()),
        }
    }
}

#[derive(Debug, Default)]
struct Table {
    last: c_int,
    open: HashMap<c_int, Handle>,
}

fn table() -> MutexGuard<'static, Table> {
    static TABLE: OnceLock<Mutex<Table>> = OnceLock::new();
    // A panic while the lock is held cannot leave the map half-changed
    // (every change is one insert or remove), so a poisoned lock is usable.
    TABLE.get_or_init(Mutex::default).lock().unwrap_or_else(|p| p.into_inner())
}

/// Enters `h` in the table; returns its new descriptor (> 0).
pub(crate) fn insert(h: Handle) -> Result<c_int, Error> {
    let mut t = table();
    for _ in 0..=t.open.len() {
        t.last = if t.last == c_int::MAX { 1 } else { t.last + 1 };
        if !t.open.contains_key(&t.last) {
            let d = t.last;
            t.open.insert(d, h);
            return Ok(d);
        }
    }
    Err(Error::new(MF_ELIMIT, "every descriptor number is in use"))
}

/// The object behind `d`, shared: the table keeps it until `mf_close`.
pub(crate) fn get(d: c_int) -> Result<Handle, Error> {
    table().open.get(&d).cloned().ok_or_else(|| not_open(d))
}

/// Takes `d` out of the table: later calls on it fail with `MF_EBADF`.
pub(crate) fn remove(d: c_int) -> Result<Handle, Error> {
    table().open.remove(&d).ok_or_else(|| not_open(d))
}

fn not_open(d: c_int) -> Error {
    Error::new(MF_EBADF, format!("descriptor {d} is not open"))
}

fn wrong_kind(d: c_int, h: &Handle, call: &str, want: &str) -> Error {
    Error::new(MF_EBADF, format!("{call}: descriptor {d} is {}, not {want}", h.kind()))
}

pub(crate) fn listener(d: c_int, call: &str) -> Result<Arc<ListenerEntry>, Error> {
    match get(d)? {
        Handle::Listener(l) => Ok(l),
        h => Err(wrong_kind(d, &h, call, "a listener")),
    }
}

pub(crate) fn stream(d: c_int, call: &str) -> Result<Arc<StreamEntry>, Error> {
    match get(d)? {
        Handle::Stream(s) => Ok(s),
        h => Err(wrong_kind(d, &h, call, "a connection")),
    }
}

pub(crate) fn group(d: c_int, call: &str) -> Result<Arc<GroupEntry>, Error> {
    match get(d)? {
        Handle::Group(g) => Ok(g),
        h => Err(wrong_kind(d, &h, call, "a group")),
    }
}

/// Every open descriptor and its object, in no particular order.
pub(crate) fn open() -> Vec<(c_int, Handle)> {
    table().open.iter().map(|(&d, h)| (d, h.clone())).collect()
}

/// Takes every descriptor out of the table (the process is exiting).
pub(crate) fn take_all() -> Vec<Handle> {
    table().open.drain().map(|(_, h)| h).collect()
}
