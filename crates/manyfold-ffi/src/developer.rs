//! librusp's developer utilities (paper 04 §2.2): the attributes drop rate
//! and debug (`mf_set_attr`, `mf_get_attr`), and the text of errors
//! (`mf_last_error`, `mf_strerror`).
//!
//! Both attributes become the endpoint's configuration when it is bound
//! (`manyfold::Config::faults.loss` and `Config::trace`); the driver offers
//! no way to change them on a live endpoint, so a descriptor keeps the
//! values `MF_DEFAULTS` had when it was created, and setting them on it
//! fails with `MF_ENOTSUP`.

use std::ffi::{c_char, c_int, c_void};
use std::sync::Once;

use crate::error::{describe, entry, last_error_ptr, Error, MF_ENOTSUP, MF_OK};
use crate::table::{self, Attrs};

/// The descriptor of the attributes new descriptors take (`mf_listen`,
/// `mf_connect`, `mf_group_connect` read them when they create one).
pub const MF_DEFAULTS: c_int = 0;

/// Attribute: the probability, a `double` in [0, 1], that a datagram is
/// dropped on purpose, applied to datagrams sent and again to datagrams
/// received (librusp's `RUSP_ATTR_DROP`). Default 0.
pub const MF_ATTR_DROP_RATE: c_int = 1;
/// Attribute: debug mode, an `int`, 0 or 1 (librusp's `RUSP_ATTR_DEBUG`):
/// every datagram sent, received or dropped is logged on stderr with its
/// header and chunks, and connection state changes too. Default 0.
pub const MF_ATTR_DEBUG: c_int = 2;

/// Room for any "ip:port" string `mf_local` and `mf_peer` write, NUL
/// included.
pub const MF_ADDRSTRLEN: usize = 64;

/// Installs a stderr log of the packet trace (target `manyfold::packet`)
/// and of state changes (`manyfold::state`) at DEBUG, once, unless the
/// process already has a tracing subscriber. `RUST_LOG` overrides the
/// filter.
pub(crate) fn enable_debug_log(debug: bool) {
    static INSTALL: Once = Once::new();
    if !debug {
        return;
    }
    INSTALL.call_once(|| {
        if tracing::dispatcher::has_been_set() {
            return;
        }
        let filter = tracing_subscriber::EnvFilter::try_from_default_env()
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("manyfold::packet=debug,manyfold::state=debug"));
        let _ =
            tracing_subscriber::fmt().with_writer(std::io::stderr).with_ansi(false).with_env_filter(filter).try_init();
    });
}

fn attr_name(attr: c_int) -> Result<&'static str, Error> {
    match attr {
        MF_ATTR_DROP_RATE => Ok("MF_ATTR_DROP_RATE"),
        MF_ATTR_DEBUG => Ok("MF_ATTR_DEBUG"),
        _ => Err(Error::invalid(format!("unknown attribute {attr} (known: MF_ATTR_DROP_RATE, MF_ATTR_DEBUG)"))),
    }
}

fn check_size(call: &str, attr: c_int, size: usize) -> Result<(), Error> {
    let (want, ty) = match attr {
        MF_ATTR_DROP_RATE => (std::mem::size_of::<f64>(), "double"),
        _ => (std::mem::size_of::<c_int>(), "int"),
    };
    if size != want {
        return Err(Error::invalid(format!(
            "{call}: {} is an {ty} of {want} bytes, not {size} bytes",
            attr_name(attr)?
        )));
    }
    Ok(())
}

/// Sets attribute `attr` to the value at `value`, of `size` bytes
/// (librusp's `ruspSetAttr`): `MF_ATTR_DROP_RATE` takes a `double` in
/// [0, 1], `MF_ATTR_DEBUG` an `int` (0 or 1).
///
/// Only `desc` = `MF_DEFAULTS` can be set: the values descriptors created
/// afterwards take, fixed for their lifetime (manyfold applies them when
/// it binds the socket). On an open descriptor it fails with `MF_ENOTSUP`.
///
/// ```c
/// double drop = 0.05;
/// mf_set_attr(MF_DEFAULTS, MF_ATTR_DROP_RATE, &drop, sizeof drop);
/// ```
///
/// Returns `MF_OK`, or `MF_EINVAL` for an unknown attribute, a wrong
/// `size`, a NULL `value` or a value out of range; `MF_EBADF` for a
/// descriptor that is not open.
///
/// # Safety
/// `value` points to `size` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn mf_set_attr(desc: c_int, attr: c_int, value: *const c_void, size: usize) -> c_int {
    entry("mf_set_attr", || {
        let name = attr_name(attr)?;
        if desc != MF_DEFAULTS {
            table::get(desc)?;
            return Err(Error::new(
                MF_ENOTSUP,
                format!(
                    "mf_set_attr: {name} of descriptor {desc} was fixed when it was created; \
                     set it on MF_DEFAULTS before mf_listen, mf_connect or mf_group_connect"
                ),
            ));
        }
        check_size("mf_set_attr", attr, size)?;
        if value.is_null() {
            return Err(Error::invalid("mf_set_attr: value is NULL"));
        }
        let mut attrs = table::defaults();
        match attr {
            MF_ATTR_DROP_RATE => {
                // SAFETY: non-null with `size` = 8 readable bytes (checked
                // above) by the contract; read unaligned to ask nothing more.
                let rate = unsafe { value.cast::<f64>().read_unaligned() };
                if !(0.0..=1.0).contains(&rate) {
                    return Err(Error::invalid(format!("mf_set_attr: drop rate {rate} is not in [0, 1]")));
                }
                attrs.drop_rate = rate;
            }
            _ => {
                // SAFETY: as above, for an int.
                let on = unsafe { value.cast::<c_int>().read_unaligned() };
                if !matches!(on, 0 | 1) {
                    return Err(Error::invalid(format!("mf_set_attr: debug is {on}, not 0 or 1")));
                }
                attrs.debug = on == 1;
                enable_debug_log(attrs.debug);
            }
        }
        Ok(MF_OK)
    })
}

/// Reads attribute `attr` of `desc` into `value`, of `size` bytes
/// (librusp's `ruspGetAttr`): of `MF_DEFAULTS`, or of an open descriptor
/// (the values it was created with). `MF_ATTR_DROP_RATE` is a `double`,
/// `MF_ATTR_DEBUG` an `int`. Returns `MF_OK` or a negative code as
/// `mf_set_attr`.
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
        let attrs: Attrs = if desc == MF_DEFAULTS { *table::defaults() } else { table::get(desc)?.attrs() };
        match attr {
            // SAFETY: non-null with `size` = 8 writable bytes (checked
            // above) by the contract; written unaligned to ask nothing more.
            MF_ATTR_DROP_RATE => unsafe { value.cast::<f64>().write_unaligned(attrs.drop_rate) },
            // SAFETY: as above, for an int.
            _ => unsafe { value.cast::<c_int>().write_unaligned(c_int::from(attrs.debug)) },
        }
        Ok(MF_OK)
    })
}

/// The text of the last error on the calling thread: what failed and why,
/// naming the argument, descriptor or peer (e.g. "mf_connect to
/// 127.0.0.1:9: connection refused"). An empty string if no call on this
/// thread has failed. The pointer is valid until the next `mf_*` call on
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
