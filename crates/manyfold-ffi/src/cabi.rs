//! Reading and writing C arguments. Every pointer is checked for null and
//! every length against `isize::MAX` here, once, before any slice is made;
//! the calls in the other modules only see Rust references.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::net::{SocketAddr, ToSocketAddrs};

use crate::error::{Error, MF_ETOOBIG};

/// `len` bytes at `ptr`, the caller's data to send. `ptr` may be null
/// when `len` is 0.
///
/// # Safety
/// Unless null, `ptr` points to `len` readable bytes that stay unchanged
/// for the returned lifetime.
pub(crate) unsafe fn data<'a>(ptr: *const c_void, len: usize, what: &str) -> Result<&'a [u8], Error> {
    if len == 0 {
        return Ok(&[]);
    }
    if ptr.is_null() {
        return Err(Error::invalid(format!("{what} is NULL with a length of {len}")));
    }
    if len > isize::MAX as usize {
        return Err(Error::invalid(format!("{what}: length {len} is larger than the address space")));
    }
    // SAFETY: non-null, len <= isize::MAX; the caller promises `len`
    // readable bytes that outlive the call (the C API's contract).
    Ok(unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) })
}

/// `cap` writable bytes at `ptr`, a buffer the caller gives us to fill.
/// `ptr` may be null when `cap` is 0.
///
/// # Safety
/// Unless null, `ptr` points to `cap` writable bytes nothing else accesses
/// during the call.
pub(crate) unsafe fn buffer<'a>(ptr: *mut c_void, cap: usize, what: &str) -> Result<&'a mut [u8], Error> {
    if cap == 0 {
        return Ok(&mut []);
    }
    if ptr.is_null() {
        return Err(Error::invalid(format!("{what} is NULL with a size of {cap}")));
    }
    if cap > isize::MAX as usize {
        return Err(Error::invalid(format!("{what}: size {cap} is larger than the address space")));
    }
    // SAFETY: non-null, cap <= isize::MAX; the caller promises `cap`
    // writable bytes, not used elsewhere during the call.
    Ok(unsafe { std::slice::from_raw_parts_mut(ptr.cast::<u8>(), cap) })
}

/// A NUL-terminated UTF-8 string argument.
///
/// # Safety
/// Unless null, `ptr` points to a NUL-terminated string.
pub(crate) unsafe fn text<'a>(ptr: *const c_char, what: &str) -> Result<&'a str, Error> {
    if ptr.is_null() {
        return Err(Error::invalid(format!("{what} is NULL")));
    }
    // SAFETY: non-null and NUL-terminated by the caller's contract.
    let s = unsafe { CStr::from_ptr(ptr) };
    s.to_str().map_err(|_| Error::invalid(format!("{what} is not valid UTF-8")))
}

/// A mutable reference to the caller's out-parameter, or `None` if it
/// passed NULL.
///
/// # Safety
/// Unless null, `ptr` points to a valid, writable, aligned `T`.
pub(crate) unsafe fn out<'a, T>(ptr: *mut T) -> Option<&'a mut T> {
    // SAFETY: the caller's contract; `as_mut` checks for null.
    unsafe { ptr.as_mut() }
}

/// Writes `s` and a NUL into `buf`; returns the length of `s`.
pub(crate) fn put_str(buf: &mut [u8], s: &str, what: &str) -> Result<c_int, Error> {
    let n = s.len();
    let Some(dst) = buf.get_mut(..=n) else {
        return Err(Error::new(
            MF_ETOOBIG,
            format!("{what}: {s:?} needs {} bytes, the buffer has {}", n + 1, buf.len()),
        ));
    };
    dst[..n].copy_from_slice(s.as_bytes());
    dst[n] = 0;
    c_int::try_from(n).map_err(|_| Error::invalid("string too long"))
}

/// The addresses `host` and `port` name (a literal IP or a host name).
pub(crate) fn resolve(host: &str, port: c_int, what: &str) -> Result<Vec<SocketAddr>, Error> {
    let port = u16::try_from(port).map_err(|_| Error::invalid(format!("{what}: port {port} is not in 0..=65535")))?;
    // Accept "[::1]" as well as "::1" for IPv6.
    let host = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
    let addrs: Vec<SocketAddr> = (host, port)
        .to_socket_addrs()
        .map_err(|e| Error::invalid(format!("{what}: cannot resolve {host:?}: {e}")))?
        .collect();
    if addrs.is_empty() {
        return Err(Error::invalid(format!("{what}: {host:?} resolved to no address")));
    }
    Ok(addrs)
}

/// The address of an "ip:port" or "host:port" string.
pub(crate) fn resolve_pair(s: &str, what: &str) -> Result<SocketAddr, Error> {
    if let Ok(a) = s.parse::<SocketAddr>() {
        return Ok(a);
    }
    let (host, port) =
        s.rsplit_once(':').ok_or_else(|| Error::invalid(format!("{what}: {s:?} is not \"host:port\"")))?;
    let port = port.parse::<c_int>().map_err(|_| Error::invalid(format!("{what}: {s:?} has no port number")))?;
    Ok(resolve(host, port, what)?[0])
}

/// Writes `addr` into a `struct sockaddr_storage` (as `sockaddr_in` or
/// `sockaddr_in6`); returns its length.
///
/// # Safety
/// Unless null, `storage` points to a writable `struct sockaddr_storage`.
pub(crate) unsafe fn put_sockaddr(storage: *mut libc::sockaddr_storage, addr: SocketAddr) -> Result<c_int, Error> {
    if storage.is_null() {
        return Err(Error::invalid("addr is NULL"));
    }
    // SAFETY: non-null and writable by the caller's contract; all-zero
    // bytes are a valid sockaddr_storage.
    unsafe { std::ptr::write_bytes(storage, 0, 1) };
    let len = match addr {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr { s_addr: u32::from_ne_bytes(a.ip().octets()) },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than and aligned for
            // every sockaddr type (that is its purpose).
            unsafe { storage.cast::<libc::sockaddr_in>().write(sin) };
            std::mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo().to_be(),
                sin6_addr: libc::in6_addr { s6_addr: a.ip().octets() },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: as above.
            unsafe { storage.cast::<libc::sockaddr_in6>().write(sin6) };
            std::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    c_int::try_from(len).map_err(|_| Error::invalid("sockaddr too long"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::MF_EINVAL;

    #[test]
    fn a_string_that_does_not_fit_with_its_nul_is_too_big() {
        let mut buf = [0xffu8; 9];
        assert_eq!(put_str(&mut buf, "1.2.3.4:5", "mf_local").unwrap_err().code, MF_ETOOBIG);
        let mut buf = [0xffu8; 10];
        assert_eq!(put_str(&mut buf, "1.2.3.4:5", "mf_local"), Ok(9));
        assert_eq!(&buf, b"1.2.3.4:5\0");
    }

    #[test]
    fn addresses_parse_with_and_without_brackets_and_bad_ports_are_invalid() {
        assert_eq!(resolve("[::1]", 80, "t").unwrap()[0], "[::1]:80".parse().unwrap());
        assert_eq!(resolve("127.0.0.1", 80, "t").unwrap()[0], "127.0.0.1:80".parse().unwrap());
        assert_eq!(resolve("127.0.0.1", 70000, "t").unwrap_err().code, MF_EINVAL);
        assert_eq!(resolve_pair("127.0.0.1:9", "t").unwrap(), "127.0.0.1:9".parse().unwrap());
        assert_eq!(resolve_pair("localhost:9", "t").unwrap().port(), 9);
        assert_eq!(resolve_pair("127.0.0.1", "t").unwrap_err().code, MF_EINVAL);
    }
}
