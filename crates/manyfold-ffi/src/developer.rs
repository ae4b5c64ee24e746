//! librusp's developer utilities (paper 04 §2.2): the attributes drop rate,
//! seed and debug (`mf_set_attr`, `mf_get_attr`), manyfold's fixed
//! datagram size, and the text of errors (`mf_last_error`, `mf_strerror`).
//!
//! Drop rate and seed are the fault configuration of a descriptor's
//! endpoint (`manyfold::Config::faults`: drops on receive only, where
//! librusp drops), set when it is bound and changed while it runs
//! (`manyfold::Endpoint::set_faults`, through `attrs`), as librusp's
//! `ruspSetAttr` changes them mid-connection. Debug is process-wide, as
//! librusp's: every endpoint feeds the packet log (`Config::trace`), and
//! one switch shows it on stderr or not, at any time.

use std::ffi::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Once;

use crate::attrs::{self, Attrs};
use crate::error::{describe, entry, last_error_ptr, Error, MF_ENOTSUP, MF_OK};
use crate::table;

/// The descriptor of the attributes new descriptors take (`mf_listen`,
/// `mf_connect`, `mf_group_connect` read them when they create one).
pub const MF_DEFAULTS: c_int = 0;
/// For `mf_set_attr`: `MF_DEFAULTS` and every open descriptor at once, as
/// librusp's `ruspSetAttr` (which has no descriptor argument) sets them.
pub const MF_ALL: c_int = -1;

/// Attribute: the probability, a `double` in [0, 1], that a received
/// datagram is dropped on purpose (librusp's `RUSP_ATTR_DROPR`), as
/// librusp drops: on receive only, so a rate set at both ends is that
/// rate of loss each way. Default 0. It belongs to the descriptor's
/// socket and can be changed while it runs, mid-connection (see
/// `mf_set_attr`).
pub const MF_ATTR_DROP_RATE: c_int = 1;
/// Attribute: debug mode, an `int`, 0 or 1 (librusp's `RUSP_ATTR_DEBUG`):
/// every datagram sent, received or dropped is logged on stderr with its
/// header and chunks, and connection state changes too. Process-wide, as
/// in librusp: set on any descriptor, `MF_DEFAULTS` or `MF_ALL`, at any
/// time, it switches the log of every endpoint. Default 0.
pub const MF_ATTR_DEBUG: c_int = 2;
/// Attribute: the seed of the drop generator, a `uint64_t`. 0 (the
/// default) draws a new seed for every endpoint, so that each run drops
/// other datagrams; any other value makes every run drop the same ones for
/// the same traffic (the n-th endpoint the process creates derives its
/// seed from this value and n). Set on an open descriptor, it re-seeds
/// its socket's drop generator at once (0: with a new random seed).
pub const MF_ATTR_SEED: c_int = 3;
/// Attribute: a fixed datagram size, a `uint32_t`: 0 (the default) lets
/// path MTU discovery find the size (from 1,452 bytes up to what the path
/// carries, 65,507 on loopback; spec §3.7); a value from 576 to 65,507
/// makes every datagram at most that many bytes, header included, with
/// discovery off, as the CLI's `--max-datagram` does (for paths that drop
/// large datagrams silently, or to test with paper 04's small segments).
/// A connection's size is settled in its handshake, so it is read when a
/// descriptor is made: set it on `MF_DEFAULTS` (or `MF_ALL`) before
/// `mf_listen`, `mf_connect` or `mf_group_connect`. An open descriptor
/// keeps its own: setting another value on it fails with `MF_ENOTSUP`.
pub const MF_ATTR_MAX_DATAGRAM: c_int = 4;

/// Room for any "ip:port" string `mf_local` and `mf_peer` write, NUL
/// included.
pub const MF_ADDRSTRLEN: usize = 64;

/// The process-wide debug switch.
static DEBUG: AtomicBool = AtomicBool::new(false);

/// Switches the stderr log of the packet trace (target `manyfold::packet`)
/// and of state changes (`manyfold::state`) on or off. The log is
/// installed on first use, at DEBUG (`RUST_LOG` overrides the filter),
/// unless the process already has a tracing subscriber.
pub(crate) fn set_debug(on: bool) {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::{filter, Layer};
    static INSTALL: Once = Once::new();
    DEBUG.store(on, Ordering::Relaxed);
    if !on {
        return;
    }
    INSTALL.call_once(|| {
        if tracing::dispatcher::has_been_set() {
            return;
        }
        let targets = tracing_subscriber::EnvFilter::try_from_default_env()
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("manyfold::packet=debug,manyfold::state=debug"));
        // Asked on every event, so that the switch works at any time.
        let switch = filter::dynamic_filter_fn(|_, _| DEBUG.load(Ordering::Relaxed));
        let log = tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_ansi(false)
            .with_filter(filter::FilterExt::and(targets, switch));
        let _ = tracing_subscriber::registry().with(log).try_init();
    });
}

fn debug() -> bool {
    DEBUG.load(Ordering::Relaxed)
}

fn attr_name(attr: c_int) -> Result<&'static str, Error> {
    match attr {
        MF_ATTR_DROP_RATE => Ok("MF_ATTR_DROP_RATE"),
        MF_ATTR_DEBUG => Ok("MF_ATTR_DEBUG"),
        MF_ATTR_SEED => Ok("MF_ATTR_SEED"),
        MF_ATTR_MAX_DATAGRAM => Ok("MF_ATTR_MAX_DATAGRAM"),
        _ => Err(Error::invalid(format!(
            "unknown attribute {attr} (known: MF_ATTR_DROP_RATE, MF_ATTR_DEBUG, MF_ATTR_SEED, MF_ATTR_MAX_DATAGRAM)"
        ))),
    }
}

fn check_size(call: &str, attr: c_int, size: usize) -> Result<(), Error> {
    let (want, ty) = match attr {
        MF_ATTR_DROP_RATE => (std::mem::size_of::<f64>(), "a double"),
        MF_ATTR_SEED => (std::mem::size_of::<u64>(), "a uint64_t"),
        MF_ATTR_MAX_DATAGRAM => (std::mem::size_of::<u32>(), "a uint32_t"),
        _ => (std::mem::size_of::<c_int>(), "an int"),
    };
    if size != want {
        return Err(Error::invalid(format!("{call}: {} is {ty} of {want} bytes, not {size} bytes", attr_name(attr)?)));
    }
    Ok(())
}

/// A value read from the caller, checked.
#[derive(Clone, Copy)]
enum Value {
    DropRate(f64),
    Debug(bool),
    Seed(u64),
    MaxDatagram(u32),
}

/// # Safety
/// `value` is non-null with the attribute's size (checked by the caller).
unsafe fn read_value(attr: c_int, value: *const c_void) -> Result<Value, Error> {
    match attr {
        MF_ATTR_DROP_RATE => {
            // SAFETY: 8 readable bytes by the contract; read unaligned to
            // ask nothing more of the caller's pointer.
            let rate = unsafe { value.cast::<f64>().read_unaligned() };
            if !(0.0..=1.0).contains(&rate) {
                return Err(Error::invalid(format!("mf_set_attr: drop rate {rate} is not in [0, 1]")));
            }
            Ok(Value::DropRate(rate))
        }
        MF_ATTR_SEED => {
            // SAFETY: as above, for a uint64_t.
            Ok(Value::Seed(unsafe { value.cast::<u64>().read_unaligned() }))
        }
        MF_ATTR_MAX_DATAGRAM => {
            // SAFETY: as above, for a uint32_t.
            let size = unsafe { value.cast::<u32>().read_unaligned() };
            if size != 0 && !attrs::DATAGRAM_RANGE.contains(&size) {
                return Err(Error::invalid(format!(
                    "mf_set_attr: a datagram size of {size} bytes is outside {}..={} (0 lets path MTU \
                     discovery choose)",
                    attrs::DATAGRAM_RANGE.start(),
                    attrs::DATAGRAM_RANGE.end()
                )));
            }
            Ok(Value::MaxDatagram(size))
        }
        _ => {
            // SAFETY: as above, for an int.
            let on = unsafe { value.cast::<c_int>().read_unaligned() };
            if !matches!(on, 0 | 1) {
                return Err(Error::invalid(format!("mf_set_attr: debug is {on}, not 0 or 1")));
            }
            Ok(Value::Debug(on == 1))
        }
    }
}

/// Sets attribute `attr` of `desc` to the value at `value`, of `size`
/// bytes (librusp's `ruspSetAttr`): `MF_ATTR_DROP_RATE` takes a `double`
/// in [0, 1], `MF_ATTR_DEBUG` an `int` (0 or 1), `MF_ATTR_SEED` a
/// `uint64_t`, `MF_ATTR_MAX_DATAGRAM` a `uint32_t` (0, or 576 to 65,507).
///
/// `desc` is `MF_DEFAULTS` (what descriptors created afterwards take),
/// `MF_ALL` (the defaults and every open descriptor, as librusp's
/// attributes), or an open descriptor. Debug is process-wide and takes
/// effect at once whatever `desc` is.
///
/// Drop rate and seed belong to a descriptor's socket and change at once
/// while it runs, mid-connection too, as in librusp: every datagram the
/// socket receives from then on is dropped at the new rate (0 stops the
/// drops); a new seed re-seeds its drop generator. A connection made by
/// `mf_connect` and a group each have a socket of their own. A listener's
/// socket is shared by every connection it accepted: setting either
/// attribute on the listener or on any one of those connections changes
/// it for the listener and all of them (and `mf_get_attr` on any of them
/// tells the new value). Once the listener is closed, its socket can no
/// longer be reached: setting a different value on a connection it had
/// accepted fails with `MF_ENOTSUP` and changes nothing. `MF_ALL` sets the
/// defaults and every socket, those of descriptors still being made (an
/// `mf_connect` in its handshake) included; it returns `MF_ENOTSUP` if
/// connections of a closed listener kept their value, having set the rest.
///
/// The datagram size is read when a descriptor is made (a handshake
/// settles it): on an open descriptor, a value other than its own fails
/// with `MF_ENOTSUP`; `MF_ALL` sets the defaults and returns `MF_ENOTSUP`
/// if open descriptors keep another size.
///
/// ```c
/// double drop = 0.05;
/// mf_set_attr(MF_DEFAULTS, MF_ATTR_DROP_RATE, &drop, sizeof drop); // the next descriptors
/// mf_set_attr(conn, MF_ATTR_DROP_RATE, &drop, sizeof drop);        // conn's socket, now
/// ```
///
/// Returns `MF_OK`, or `MF_EINVAL` for an unknown attribute, a wrong
/// `size`, a NULL `value` or a value out of range; `MF_EBADF` for a
/// descriptor that is not open; `MF_ENOTSUP` as said above.
///
/// # Safety
/// `value` points to `size` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn mf_set_attr(desc: c_int, attr: c_int, value: *const c_void, size: usize) -> c_int {
    entry("mf_set_attr", || {
        let name = attr_name(attr)?;
        if desc != MF_DEFAULTS && desc != MF_ALL {
            table::get(desc)?;
        }
        check_size("mf_set_attr", attr, size)?;
        if value.is_null() {
            return Err(Error::invalid("mf_set_attr: value is NULL"));
        }
        // SAFETY: non-null with the attribute's size (checked above).
        let value = unsafe { read_value(attr, value) }?;
        let change = |a: &mut Attrs| match value {
            Value::DropRate(rate) => a.drop_rate = rate,
            Value::Seed(seed) => a.seed = seed,
            Value::MaxDatagram(size) => a.max_datagram = size,
            Value::Debug(_) => {}
        };
        let kept = |a: Attrs| {
            let mut set = a;
            change(&mut set);
            set != a
        };
        match (desc, value) {
            (_, Value::Debug(on)) => set_debug(on),
            (MF_DEFAULTS, _) => change(&mut attrs::defaults()),
            (MF_ALL, Value::MaxDatagram(size)) => {
                change(&mut attrs::defaults());
                let mut left: Vec<c_int> =
                    table::open().into_iter().filter(|(_, h)| h.attrs().max_datagram != size).map(|(d, _)| d).collect();
                left.sort_unstable();
                if let Some(first) = left.first() {
                    return Err(Error::new(
                        MF_ENOTSUP,
                        format!(
                            "mf_set_attr: {name} is set on the defaults, but {} open descriptor(s) (the first \
                             {first}) keep the datagram size they were made with: a handshake settles it",
                            left.len()
                        ),
                    ));
                }
            }
            (d, Value::MaxDatagram(size)) => {
                let had = table::get(d)?.attrs().max_datagram;
                if had != size {
                    return Err(Error::new(
                        MF_ENOTSUP,
                        format!(
                            "mf_set_attr: {name} of descriptor {d} is fixed at {had} (0: path MTU discovery) \
                             since it was made: a handshake settles it; set it on MF_DEFAULTS before \
                             mf_listen, mf_connect or mf_group_connect"
                        ),
                    ));
                }
            }
            (MF_ALL, _) => {
                attrs::set_all(change);
                let mut left: Vec<c_int> =
                    table::open().into_iter().filter(|(_, h)| kept(h.attrs())).map(|(d, _)| d).collect();
                left.sort_unstable();
                if let Some(first) = left.first() {
                    return Err(Error::new(
                        MF_ENOTSUP,
                        format!(
                            "mf_set_attr: {name} is set on the defaults and every socket, but {} connection(s) \
                             (the first {first}) accepted by a listener since closed keep theirs: that \
                             listener's socket, which they share, can no longer be changed",
                            left.len()
                        ),
                    ));
                }
            }
            (d, _) => {
                let h = table::get(d)?;
                if !h.socket_attrs().set(change) {
                    // Gone: closed meanwhile, or accepted by a closed listener.
                    table::get(d)?;
                    return Err(Error::new(
                        MF_ENOTSUP,
                        format!(
                            "mf_set_attr: {name} of connection {d} cannot change: it was accepted by a \
                             listener since closed, whose socket it shares and which can no longer be \
                             changed; it keeps its value"
                        ),
                    ));
                }
            }
        }
        Ok(MF_OK)
    })
}

/// Reads attribute `attr` of `desc` into `value`, of `size` bytes
/// (librusp's `ruspGetAttr`): of `MF_DEFAULTS` (or `MF_ALL`, the same), or
/// of an open descriptor (its socket's values now, shared by a listener
/// and the connections it accepted; debug is the process's).
/// `MF_ATTR_DROP_RATE` is a `double`, `MF_ATTR_DEBUG` an `int`,
/// `MF_ATTR_SEED` a `uint64_t`, `MF_ATTR_MAX_DATAGRAM` a `uint32_t`.
/// Returns `MF_OK` or a negative code as `mf_set_attr`.
///
/// # Safety
/// `value` points to `size` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn mf_get_attr(desc: c_int, attr: c_int, value: *mut c_void, size: usize) -> c_int {
    entry("mf_get_attr", || {
        attr_name(attr)?;
        check_size("mf_get_attr", attr, size)?;
        if value.is_null() {
            return Err(Error::invalid("mf_get_attr: value is NULL"));
        }
        let attrs: Attrs =
            if matches!(desc, MF_DEFAULTS | MF_ALL) { *attrs::defaults() } else { table::get(desc)?.attrs() };
        match attr {
            // SAFETY: non-null with `size` = 8 writable bytes (checked
            // above) by the contract; written unaligned to ask nothing more.
            MF_ATTR_DROP_RATE => unsafe { value.cast::<f64>().write_unaligned(attrs.drop_rate) },
            // SAFETY: as above, for a uint64_t.
            MF_ATTR_SEED => unsafe { value.cast::<u64>().write_unaligned(attrs.seed) },
            // SAFETY: as above, for a uint32_t.
            MF_ATTR_MAX_DATAGRAM => unsafe { value.cast::<u32>().write_unaligned(attrs.max_datagram) },
            // SAFETY: as above, for an int.
            _ => unsafe { value.cast::<c_int>().write_unaligned(c_int::from(debug())) },
        }
        Ok(MF_OK)
    })
}

/// The text of the last error on the calling thread: what failed and why,
/// naming the argument, descriptor or peer (e.g. "mf_connect to
/// 127.0.0.1:9: connection refused (nothing listens there, or the
/// listener refused)"). An empty string if no call on this thread has
/// failed. The pointer is valid until the next `mf_*` call on
/// this thread; copy the text to keep it. Never NULL.
#[no_mangle]
pub extern "C" fn mf_last_error() -> *const c_char {
    last_error_ptr()
}

/// A fixed description of the code `code` (`MF_EINVAL`, ...), as
/// `strerror` does for errno; "unknown error code" for a code that is not
/// one of the library's. The string is static: never freed, never NULL.
#[no_mangle]
pub extern "C" fn mf_strerror(code: c_int) -> *const c_char {
    describe(code).as_ptr()
}
