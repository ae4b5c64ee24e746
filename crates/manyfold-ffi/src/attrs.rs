//! The attributes of paper 04 §2.2's `ruspSetAttr` that belong to a
//! socket, drop rate and seed (debug is process-wide: `developer`), and
//! manyfold's fixed datagram size (spec §3.7, fixed when the socket is
//! made, as a handshake announces it): the
//! values new descriptors take (`MF_DEFAULTS`), and each endpoint's own,
//! which `mf_set_attr` changes while it runs (`manyfold::Endpoint::
//! set_faults`: datagrams already held keep their times; the drop
//! generator is re-seeded only when the seed changes).
//!
//! An endpoint is one socket, and its attributes are shared by every
//! descriptor on it: a listener and the connections it accepted; a
//! connection made by `mf_connect`; a group. Every endpoint is entered
//! here from the moment it takes the defaults, before its socket is bound,
//! so that `MF_ALL` reaches one whose `mf_connect` is still in its
//! handshake.

#![forbid(unsafe_code)]

use std::sync::{Arc, Mutex, MutexGuard, Weak};

/// The per-socket attributes of paper 04 §2.2's `ruspSetAttr`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Attrs {
    /// Probability in [0, 1] that a received datagram is dropped, where
    /// librusp drops (on receive only: a rate set at both ends is that
    /// rate of loss each way, not twice it).
    pub(crate) drop_rate: f64,
    /// Seeds the drop generator: 0 draws a new seed for every endpoint
    /// (different drops every run); another value gives every run the same
    /// drops for the same traffic.
    pub(crate) seed: u64,
    /// 0: path MTU discovery finds the datagram size (the default, spec
    /// §3.7); otherwise every datagram is at most this many bytes, header
    /// included, and discovery is off (the CLI's `--max-datagram`). Fixed
    /// when the endpoint is made.
    pub(crate) max_datagram: u32,
}

/// The smallest and largest fixed datagram sizes `MF_ATTR_MAX_DATAGRAM`
/// takes: what every IPv4 host accepts (spec §3.4), and the largest UDP
/// payload over IPv4.
pub(crate) const DATAGRAM_RANGE: std::ops::RangeInclusive<u32> = 576..=65_507;

impl Attrs {
    /// The fault model these attributes give the `n`th endpoint the
    /// process creates (`next_endpoint`).
    pub(crate) fn faults(&self, n: u64) -> mf::FaultConfig {
        mf::FaultConfig {
            seed: self.endpoint_seed(n),
            loss: 0.0,
            send_loss: Some(0.0),
            recv_loss: Some(self.drop_rate),
            ..mf::FaultConfig::default()
        }
    }

    /// The seed of the `n`th endpoint's drop generator.
    fn endpoint_seed(&self, n: u64) -> u64 {
        if self.seed == 0 {
            random_seed()
        } else {
            splitmix64(self.seed ^ splitmix64(n))
        }
    }
}

/// An endpoint's configuration with the fault model `faults` and the
/// datagram size of `attrs`.
fn config(faults: mf::FaultConfig, attrs: &Attrs) -> mf::Config {
    let mut config = mf::Config {
        faults,
        // The packet log is switched on and off for the whole process
        // (`developer::set_debug`); every endpoint feeds it.
        trace: true,
        ..mf::Config::default()
    };
    if let Ok(size) = u16::try_from(attrs.max_datagram) {
        if size != 0 {
            // spec §3.7: a fixed size, no discovery above it.
            config.endpoint.connection.max_datagram = size;
            config.endpoint.connection.path_mtu_discovery = None;
        }
    }
    config
}

/// splitmix64's finaliser: distinct inputs, well-spread distinct outputs.
fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A seed that differs from run to run and from call to call: std's
/// per-process random hash keys (from the OS), mixed with the time and a
/// count of the calls (not `next_endpoint`, whose numbers seeded runs
/// depend on).
fn random_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static CALLS: AtomicU64 = AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    h.write_u128(t.as_nanos());
    h.write_u64(CALLS.fetch_add(1, Ordering::Relaxed));
    h.finish().max(1)
}

/// The number of the next endpoint the process creates (1, 2, ...): with
/// a seed attribute, the `n`th endpoint drops the same datagrams every run.
fn next_endpoint() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// What new descriptors take (descriptor `MF_DEFAULTS`). Held while a new
/// endpoint is entered (`SocketAttrs::from_defaults`) and while `MF_ALL`
/// is applied (`set_all`), so that no endpoint misses a change.
pub(crate) fn defaults() -> MutexGuard<'static, Attrs> {
    static DEFAULTS: Mutex<Attrs> = Mutex::new(Attrs { drop_rate: 0.0, seed: 0, max_datagram: 0 });
    DEFAULTS.lock().unwrap_or_else(|p| p.into_inner())
}

/// Every endpoint's attributes, for `MF_ALL`; an entry goes when the last
/// descriptor on its socket does.
fn registry() -> MutexGuard<'static, Vec<Weak<SocketAttrs>>> {
    static REGISTRY: Mutex<Vec<Weak<SocketAttrs>>> = Mutex::new(Vec::new());
    REGISTRY.lock().unwrap_or_else(|p| p.into_inner())
}

/// One endpoint's drop rate and seed, shared by the descriptors on its
/// socket.
#[derive(Debug)]
pub(crate) struct SocketAttrs(Mutex<State>);

#[derive(Debug)]
struct State {
    attrs: Attrs,
    /// The endpoint's number (`next_endpoint`), from which a set seed is
    /// derived.
    n: u64,
    /// The fault model the endpoint runs with (or is bound with).
    faults: mf::FaultConfig,
    socket: Socket,
}

#[derive(Debug)]
enum Socket {
    /// Being bound: a change made now is applied by `attach`.
    Binding,
    /// Running: a change applies at once.
    Bound(mf::Endpoint),
    /// Its owner (the listener, the connection made by `mf_connect`, the
    /// group) was closed: the socket cannot be reached any more (its
    /// `mf::Endpoint` handle is what kept the listener listening), and
    /// the attributes stay as they are.
    Gone,
}

impl SocketAttrs {
    /// The attributes of a new endpoint, taken from the defaults as they
    /// are now, and the configuration to bind it with. Entered at once
    /// where `set_all` finds it.
    pub(crate) fn from_defaults() -> (Arc<SocketAttrs>, mf::Config) {
        let defaults = defaults();
        let n = next_endpoint();
        let faults = defaults.faults(n);
        let state = State { attrs: *defaults, n, faults: faults.clone(), socket: Socket::Binding };
        let attrs = Arc::new(SocketAttrs(Mutex::new(state)));
        let mut registry = registry();
        registry.retain(|w| w.strong_count() > 0);
        registry.push(Arc::downgrade(&attrs));
        let config = config(faults, &defaults);
        (attrs, config)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Every change is a few assignments, none of which can panic
        // half-way, so a poisoned lock is usable.
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The endpoint is bound with `config` (from `from_defaults`):
    /// changes made since are applied to it, and later ones at once.
    pub(crate) fn attach(&self, endpoint: &mf::Endpoint, config: &mf::Config) {
        let mut state = self.lock();
        if state.faults != config.faults {
            endpoint.set_faults(state.faults.clone());
        }
        state.socket = Socket::Bound(endpoint.clone());
    }

    /// The socket's owner is being closed: lets go of the endpoint (call
    /// it in the runtime's context, where an endpoint may be dropped).
    pub(crate) fn detach(&self) {
        let gone = std::mem::replace(&mut self.lock().socket, Socket::Gone);
        drop(gone);
    }

    pub(crate) fn get(&self) -> Attrs {
        self.lock().attrs
    }

    /// Changes the attributes with `change` and applies them to the
    /// running endpoint at once. A change to nothing new succeeds; any
    /// other fails (`false`) once the socket is gone.
    /// The datagram size is not changed: it was fixed when the socket was
    /// made (`developer` refuses to change it on an open descriptor).
    pub(crate) fn set(&self, change: impl FnOnce(&mut Attrs)) -> bool {
        let mut state = self.lock();
        let mut attrs = state.attrs;
        change(&mut attrs);
        attrs.max_datagram = state.attrs.max_datagram;
        if attrs == state.attrs {
            return true;
        }
        if matches!(state.socket, Socket::Gone) {
            return false;
        }
        if attrs.seed != state.attrs.seed {
            state.faults.seed = attrs.endpoint_seed(state.n);
        }
        state.faults.recv_loss = Some(attrs.drop_rate);
        state.attrs = attrs;
        if let Socket::Bound(endpoint) = &state.socket {
            endpoint.set_faults(state.faults.clone());
        }
        true
    }
}

/// `MF_ALL`: changes the defaults and every endpoint with `change`. The
/// defaults stay locked throughout, so that an endpoint being made takes
/// either the new defaults or the change, and two calls do not interleave.
pub(crate) fn set_all(change: impl Fn(&mut Attrs)) {
    let mut defaults = defaults();
    change(&mut defaults);
    let live: Vec<Arc<SocketAttrs>> = registry().iter().filter_map(Weak::upgrade).collect();
    for socket in live {
        socket.set(&change);
    }
    drop(defaults);
}
