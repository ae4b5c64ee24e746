//! The descriptor table: C sees every listener, connection and group as a
//! positive `int`, as librusp's `ConnectionId` (paper 04 §2.2), and this
//! table maps it to the Rust objects. An integer cannot dangle: a closed or
//! never-opened descriptor is looked up, not dereferenced, and fails with
//! `MF_EBADF`. Descriptors are not reused until the counter wraps at
//! `INT_MAX`, so a stale one is very unlikely to name a newer object.
//!
//! Also here: the attributes (drop rate, debug) that new descriptors take
//! from `MF_DEFAULTS`, and the tokio runtime every blocking call runs on.

#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::ffi::c_int;
use std::net::SocketAddr;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use tokio::runtime::Runtime;
use tokio::sync::watch;

use crate::error::{Error, MF_EBADF, MF_EINTERNAL, MF_ELIMIT};

/// The runtime that drives every endpoint of the library, built on first
/// use. Its threads keep connections going (acknowledging, retransmitting)
/// between the caller's calls.
pub(crate) fn runtime() -> Result<&'static Runtime, Error> {
    static RUNTIME: OnceLock<Result<Runtime, String>> = OnceLock::new();
    RUNTIME
        .get_or_init(|| {
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

/// The attributes of paper 04 §2.2's `ruspSetAttr`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Attrs {
    /// Probability in [0, 1] that a datagram is dropped, on sending and
    /// again on receiving (`FaultConfig::loss`).
    pub(crate) drop_rate: f64,
    /// Log every datagram (`Config::trace`).
    pub(crate) debug: bool,
}

impl Attrs {
    /// The endpoint configuration these attributes give; `seed` makes the
    /// fault pattern of each endpoint its own and repeatable.
    pub(crate) fn config(&self, seed: u64) -> mf::Config {
        mf::Config {
            faults: mf::FaultConfig { seed, loss: self.drop_rate, ..mf::FaultConfig::default() },
            trace: self.debug,
            ..mf::Config::default()
        }
    }
}

/// What new descriptors take (descriptor `MF_DEFAULTS`).
pub(crate) fn defaults() -> MutexGuard<'static, Attrs> {
    static DEFAULTS: Mutex<Attrs> = Mutex::new(Attrs { drop_rate: 0.0, debug: false });
    DEFAULTS.lock().unwrap_or_else(|p| p.into_inner())
}

/// A listening endpoint (`mf_listen`).
#[derive(Debug)]
pub(crate) struct ListenerEntry {
    pub(crate) endpoint: mf::Endpoint,
    pub(crate) attrs: Attrs,
    /// Set by `mf_close`: wakes an `mf_accept` blocked on another thread.
    pub(crate) closed: watch::Sender<bool>,
}

/// One connection (`mf_accept`, `mf_connect`).
#[derive(Debug)]
pub(crate) struct StreamEntry {
    /// Sending and receiving go through this handle, so that one thread
    /// may send while another receives on the same descriptor.
    pub(crate) streams: mf::Streams,
    /// Taken by `mf_close` for the graceful close.
    pub(crate) conn: Mutex<Option<mf::Connection>>,
    /// The socket of a connecting stream (an accepted one shares the
    /// listener's, and must not keep the listener listening).
    pub(crate) _endpoint: Option<mf::Endpoint>,
    pub(crate) local: SocketAddr,
    pub(crate) peer: SocketAddr,
    pub(crate) attrs: Attrs,
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
    pub(crate) attrs: Attrs,
    pub(crate) pending: Mutex<Option<(mf::Destination, mf::StreamItem)>>,
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

    pub(crate) fn attrs(&self) -> Attrs {
        match self {
            Handle::Listener(l) => l.attrs,
            Handle::Stream(s) => s.attrs,
            Handle::Group(g) => g.attrs,
        }
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

/// A seed for the next endpoint's fault injection: endpoints of one
/// process drop different datagrams, the same ones from run to run.
pub(crate) fn next_seed() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static SEED: AtomicU64 = AtomicU64::new(1);
    SEED.fetch_add(1, Ordering::Relaxed)
}
