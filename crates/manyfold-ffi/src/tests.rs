//! The exported functions called directly, as a C program would: argument
//! checks and their error texts, descriptors of the wrong kind or not
//! open, attributes, a loopback connection carrying bytes and messages,
//! refusal, closing a listener under a blocked accept, groups, the panic
//! guard.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::net::SocketAddr;
use std::ptr::{null, null_mut};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use crate::*;

/// Tests that create descriptors or change `MF_DEFAULTS` run one at a
/// time, so that none sees another's attributes.
fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

fn last_error() -> String {
    // SAFETY: mf_last_error never returns NULL and its text is
    // NUL-terminated; it is copied before the next call.
    unsafe { CStr::from_ptr(mf_last_error()) }.to_string_lossy().into_owned()
}

fn listen() -> (c_int, SocketAddr) {
    // SAFETY: a NUL-terminated literal.
    let l = unsafe { mf_listen(c"127.0.0.1".as_ptr(), 0) };
    assert!(l > 0, "mf_listen: {}", last_error());
    (l, local(l))
}

fn local(d: c_int) -> SocketAddr {
    let mut buf = [0 as c_char; MF_ADDRSTRLEN];
    // SAFETY: buf has MF_ADDRSTRLEN writable bytes.
    let n = unsafe { mf_local(d, buf.as_mut_ptr(), buf.len()) };
    assert!(n > 0, "mf_local: {}", last_error());
    // SAFETY: mf_local wrote a NUL-terminated string into buf.
    unsafe { CStr::from_ptr(buf.as_ptr()) }.to_str().unwrap().parse().unwrap()
}

fn connect(to: SocketAddr) -> c_int {
    let ip = std::ffi::CString::new(to.ip().to_string()).unwrap();
    // SAFETY: a NUL-terminated string.
    unsafe { mf_connect(ip.as_ptr(), c_int::from(to.port())) }
}

fn send(d: c_int, data: &[u8]) -> isize {
    // SAFETY: data.len() readable bytes.
    unsafe { mf_send(d, data.as_ptr().cast(), data.len()) }
}

fn receive(d: c_int, buf: &mut [u8]) -> isize {
    // SAFETY: buf.len() writable bytes.
    unsafe { mf_receive(d, buf.as_mut_ptr().cast(), buf.len()) }
}

fn recv_message(d: c_int, info: &mut MfMessage, buf: &mut [u8]) -> c_int {
    // SAFETY: a writable record and buf.len() writable bytes.
    unsafe { mf_recv_message(d, info, buf.as_mut_ptr().cast(), buf.len()) }
}

fn set_drop(d: c_int, rate: f64) -> c_int {
    // SAFETY: 8 readable bytes.
    unsafe { mf_set_attr(d, MF_ATTR_DROP_RATE, (&rate as *const f64).cast(), 8) }
}

fn get_drop(d: c_int) -> f64 {
    let mut rate = -1.0f64;
    // SAFETY: 8 writable bytes.
    let rc = unsafe { mf_get_attr(d, MF_ATTR_DROP_RATE, (&mut rate as *mut f64).cast(), 8) };
    assert_eq!(rc, MF_OK, "{}", last_error());
    rate
}

fn set_max_datagram(d: c_int, size: u32) -> c_int {
    // SAFETY: 4 readable bytes.
    unsafe { mf_set_attr(d, MF_ATTR_MAX_DATAGRAM, (&size as *const u32).cast(), 4) }
}

fn get_max_datagram(d: c_int) -> u32 {
    let mut size = u32::MAX;
    // SAFETY: 4 writable bytes.
    let rc = unsafe { mf_get_attr(d, MF_ATTR_MAX_DATAGRAM, (&mut size as *mut u32).cast(), 4) };
    assert_eq!(rc, MF_OK, "{}", last_error());
    size
}

/// A fixed datagram size on `MF_DEFAULTS` for the descriptors a test
/// makes, back to path MTU discovery when the test ends, passed or not.
struct FixedDatagrams;

impl FixedDatagrams {
    fn of(size: u32) -> Self {
        assert_eq!(set_max_datagram(MF_DEFAULTS, size), MF_OK, "{}", last_error());
        FixedDatagrams
    }
}

impl Drop for FixedDatagrams {
    fn drop(&mut self) {
        set_max_datagram(MF_DEFAULTS, 0);
    }
}

/// The counters of stream descriptor `d`'s connection.
fn conn_stats(d: c_int) -> mf::ConnStats {
    let s = crate::table::stream(d, "test").unwrap();
    let stats = s.conn.lock().unwrap().as_ref().expect("open").stats();
    stats
}

#[test]
fn a_fixed_datagram_size_turns_path_mtu_discovery_off_for_descriptors_made_after_it() {
    let _s = serial();
    let fixed = FixedDatagrams::of(1200);
    let (l, addr) = listen();
    let (accepted_tx, accepted) = std::sync::mpsc::channel();
    let server = std::thread::spawn(move || {
        let c = mf_accept(l);
        assert!(c > 0, "mf_accept: {}", last_error());
        let mut buf = [0u8; 65536];
        let mut got = 0usize;
        while got < 1 << 20 {
            let n = receive(c, &mut buf);
            assert!(n > 0, "mf_receive: {}", last_error());
            got += n as usize;
        }
        accepted_tx.send((c, conn_stats(c))).unwrap();
        assert_eq!(receive(c, &mut buf), 0, "the client's end");
        assert_eq!(mf_close(c), MF_OK, "{}", last_error());
    });
    let c = connect(addr);
    assert!(c > 0, "mf_connect: {}", last_error());
    drop(fixed);
    // Descriptors made from now on discover again; these keep 1,200.
    assert_eq!((get_max_datagram(c), get_max_datagram(l), get_max_datagram(MF_DEFAULTS)), (1200, 1200, 0));
    assert_eq!(send(c, &vec![5u8; 1 << 20]), 1 << 20, "{}", last_error());
    let (s, theirs) = accepted.recv_timeout(Duration::from_secs(30)).expect("the data arrived");
    let ours = conn_stats(c);
    for (end, st) in [("client", ours), ("server", theirs)] {
        assert_eq!(st.datagram_size, 1200, "{end}: {st:?}");
        assert_eq!(st.pmtu_probes_sent, 0, "{end}: no discovery: {st:?}");
    }
    // A handshake settled it: an open descriptor keeps its size.
    assert_eq!(set_max_datagram(c, 1452), MF_ENOTSUP);
    assert!(last_error().contains("fixed at 1200"), "{}", last_error());
    assert_eq!(set_max_datagram(s, 1200), MF_OK, "the same size is no change");
    assert_eq!(mf_close(c), MF_OK, "{}", last_error());
    server.join().unwrap();
    assert_eq!(mf_close(l), MF_OK);
}

#[test]
fn a_datagram_size_outside_576_to_65507_or_of_the_wrong_width_is_refused() {
    let _s = serial();
    for bad in [1, 575, 65_508, u32::MAX] {
        assert_eq!(set_max_datagram(MF_DEFAULTS, bad), MF_EINVAL, "{bad}");
        assert!(last_error().contains(&format!("{bad} bytes is outside 576..=65507")), "{}", last_error());
    }
    let wide = 1200u64;
    // SAFETY: 8 readable bytes; the size is what is being tested.
    let rc = unsafe { mf_set_attr(MF_DEFAULTS, MF_ATTR_MAX_DATAGRAM, (&wide as *const u64).cast(), 8) };
    assert_eq!(rc, MF_EINVAL);
    assert!(last_error().contains("a uint32_t of 4 bytes"), "{}", last_error());
    assert_eq!(get_max_datagram(MF_DEFAULTS), 0, "unchanged");
}

#[test]
fn null_pointers_are_einval_and_the_text_names_the_argument() {
    // SAFETY: null is what is being tested; the calls check it.
    unsafe {
        assert_eq!(mf_connect(null(), 80), MF_EINVAL);
        assert!(last_error().contains("mf_connect: ip is NULL"), "{}", last_error());
        assert_eq!(mf_set_attr(MF_DEFAULTS, MF_ATTR_DROP_RATE, null(), 8), MF_EINVAL);
        assert!(last_error().contains("value is NULL"), "{}", last_error());
        let addrs: [*const c_char; 1] = [null()];
        assert_eq!(mf_group_connect(addrs.as_ptr(), 1, MF_MODE_ALL, 0, 0, null_mut()), MF_EINVAL);
        assert!(last_error().contains("addrs[0] is NULL"), "{}", last_error());
        assert_eq!(mf_group_connect(null(), 2, MF_MODE_ALL, 0, 0, null_mut()), MF_EINVAL);
    }
}

#[test]
fn a_descriptor_not_open_is_ebadf_with_its_number() {
    assert_eq!(mf_close(987_654), MF_EBADF);
    assert!(last_error().contains("descriptor 987654 is not open"), "{}", last_error());
    assert_eq!(receive(-3, &mut [0u8; 4]), MF_EBADF as isize);
    assert_eq!(mf_accept(0), MF_EBADF);
}

#[test]
fn a_listener_is_not_a_connection_nor_a_group() {
    let _s = serial();
    let (l, addr) = listen();
    assert_eq!(addr.ip().to_string(), "127.0.0.1");
    assert_ne!(addr.port(), 0, "port 0 picks a free port");
    assert_eq!(send(l, b"x"), MF_EBADF as isize);
    assert!(
        last_error().contains(&format!("mf_send: descriptor {l} is a listener, not a connection")),
        "{}",
        last_error()
    );
    let mut buf = [0 as c_char; 64];
    // SAFETY: 64 writable bytes.
    assert_eq!(unsafe { mf_peer(l, buf.as_mut_ptr(), buf.len()) }, MF_EBADF);
    assert_eq!(mf_group_close(l), MF_EBADF);
    assert_eq!(mf_close(l), MF_OK, "mf_group_close of a listener left it open");
    assert_eq!(mf_close(l), MF_EBADF, "a closed descriptor stays closed");
}

fn set_int(d: c_int, attr: c_int, v: c_int) -> c_int {
    // SAFETY: an int's readable bytes.
    unsafe { mf_set_attr(d, attr, (&v as *const c_int).cast(), std::mem::size_of::<c_int>()) }
}

fn get_int(d: c_int, attr: c_int) -> c_int {
    let mut v: c_int = -7;
    // SAFETY: an int's writable bytes.
    let rc = unsafe { mf_get_attr(d, attr, (&mut v as *mut c_int).cast(), std::mem::size_of::<c_int>()) };
    assert_eq!(rc, MF_OK, "{}", last_error());
    v
}

#[test]
fn drop_rate_and_seed_set_on_the_defaults_go_to_new_descriptors_and_on_an_open_one_to_it_alone() {
    let _s = serial();
    assert_eq!(set_drop(MF_DEFAULTS, 0.25), MF_OK, "{}", last_error());
    assert_eq!(get_drop(MF_DEFAULTS), 0.25);
    let (l, _) = listen();
    assert_eq!(set_drop(MF_DEFAULTS, 0.0), MF_OK);
    assert_eq!(get_drop(l), 0.25, "the listener keeps the rate it was made with");
    assert_eq!(set_drop(l, 0.5), MF_OK, "a live descriptor's rate changes: {}", last_error());
    assert_eq!((get_drop(l), get_drop(MF_DEFAULTS)), (0.5, 0.0), "on that descriptor alone");
    assert_eq!(set_drop(MF_ALL, 0.1), MF_OK, "{}", last_error());
    assert_eq!((get_drop(l), get_drop(MF_DEFAULTS)), (0.1, 0.1), "MF_ALL sets the defaults and the listener");
    assert_eq!(set_drop(MF_DEFAULTS, 1.5), MF_EINVAL);
    assert!(last_error().contains("not in [0, 1]"), "{}", last_error());
    assert_eq!(set_drop(MF_DEFAULTS, f64::NAN), MF_EINVAL);
    let rate = 0.1f32;
    // SAFETY: 4 readable bytes: the size check refuses them.
    let rc = unsafe { mf_set_attr(MF_DEFAULTS, MF_ATTR_DROP_RATE, (&rate as *const f32).cast(), 4) };
    assert_eq!(rc, MF_EINVAL);
    assert!(last_error().contains("a double of 8 bytes, not 4"), "{}", last_error());
    assert_eq!(set_int(MF_DEFAULTS, MF_ATTR_DEBUG, 2), MF_EINVAL);
    assert_eq!(set_int(MF_DEFAULTS, 99, 1), MF_EINVAL);
    assert!(last_error().contains("unknown attribute 99"), "{}", last_error());
    assert_eq!(set_int(MF_DEFAULTS, MF_ATTR_DEBUG, 0), MF_OK);
    assert_eq!(last_error(), "", "a successful call clears the last error");
    assert_eq!(set_drop(MF_DEFAULTS, 0.0), MF_OK);

    let seed = 42u64;
    // SAFETY: 8 readable bytes.
    let rc = unsafe { mf_set_attr(MF_DEFAULTS, MF_ATTR_SEED, (&seed as *const u64).cast(), 8) };
    assert_eq!(rc, MF_OK, "{}", last_error());
    let mut got = 0u64;
    // SAFETY: 8 writable bytes.
    let rc = unsafe { mf_get_attr(l, MF_ATTR_SEED, (&mut got as *mut u64).cast(), 8) };
    assert_eq!((rc, got), (MF_OK, 0), "the listener was made with the random seed");
    let seven = 7u64;
    // SAFETY: 8 readable bytes.
    assert_eq!(unsafe { mf_set_attr(l, MF_ATTR_SEED, (&seven as *const u64).cast(), 8) }, MF_OK);
    // SAFETY: 8 writable bytes.
    let rc = unsafe { mf_get_attr(l, MF_ATTR_SEED, (&mut got as *mut u64).cast(), 8) };
    assert_eq!((rc, got), (MF_OK, 7), "a live descriptor's seed changes too");
    let zero = 0u64;
    // SAFETY: 8 readable bytes.
    assert_eq!(unsafe { mf_set_attr(MF_DEFAULTS, MF_ATTR_SEED, (&zero as *const u64).cast(), 8) }, MF_OK);
    assert_eq!(mf_close(l), MF_OK);
    assert_eq!(set_drop(l, 0.5), MF_EBADF, "a closed descriptor has no attributes");
}

#[test]
fn debug_is_switched_on_and_off_on_a_live_descriptor_for_the_whole_process() {
    let _s = serial();
    let (l, _) = listen();
    assert_eq!(get_int(l, MF_ATTR_DEBUG), 0);
    assert_eq!(set_int(l, MF_ATTR_DEBUG, 1), MF_OK, "{}", last_error());
    assert_eq!((get_int(l, MF_ATTR_DEBUG), get_int(MF_DEFAULTS, MF_ATTR_DEBUG)), (1, 1));
    assert_eq!(set_int(MF_ALL, MF_ATTR_DEBUG, 0), MF_OK, "{}", last_error());
    assert_eq!((get_int(l, MF_ATTR_DEBUG), get_int(MF_DEFAULTS, MF_ATTR_DEBUG)), (0, 0));
    assert_eq!(set_int(-5, MF_ATTR_DEBUG, 1), MF_EBADF);
    assert_eq!(mf_close(l), MF_OK);
}

#[test]
fn a_loopback_connection_carries_bytes_then_messages_and_ends_with_zero() {
    let _s = serial();
    let (l, addr) = listen();
    let server = std::thread::spawn(move || {
        let c = mf_accept(l);
        assert!(c > 0, "mf_accept: {}", last_error());
        let mut got = Vec::new();
        let mut buf = [0u8; 1000];
        while got.len() < 100_000 {
            let n = receive(c, &mut buf);
            assert!(n > 0, "mf_receive: {n} {}", last_error());
            got.extend_from_slice(&buf[..n as usize]);
        }
        let mut info = MfMessage::default();
        let mut small = [0u8; 2];
        assert_eq!(recv_message(c, &mut info, &mut small), MF_ETOOBIG);
        assert_eq!((info.kind, info.stream, info.len), (MF_MSG_DATA, 3, 5), "the size is told");
        let mut big = [0u8; 16];
        assert_eq!(recv_message(c, &mut info, &mut big), 1, "{}", last_error());
        assert_eq!((info.kind, info.stream, &big[..info.len]), (MF_MSG_DATA, 3, &b"hello"[..]), "kept, not lost");
        // Whatever notices follow, the connection's end is 0.
        while recv_message(c, &mut info, &mut big) == 1 {
            assert_ne!(info.kind, MF_MSG_DATA);
        }
        assert_eq!(receive(c, &mut buf), 0, "end of the peer's data");
        let peer = {
            let mut b = [0 as c_char; MF_ADDRSTRLEN];
            // SAFETY: MF_ADDRSTRLEN writable bytes.
            assert!(unsafe { mf_peer(c, b.as_mut_ptr(), b.len()) } > 0);
            // SAFETY: NUL-terminated by mf_peer.
            unsafe { CStr::from_ptr(b.as_ptr()) }.to_str().unwrap().parse::<SocketAddr>().unwrap()
        };
        assert_eq!(mf_close(c), MF_OK, "{}", last_error());
        (got, peer.port())
    });
    let c = connect(addr);
    assert!(c > 0, "mf_connect: {}", last_error());
    let mut storage = std::mem::MaybeUninit::<libc::sockaddr_storage>::uninit();
    // SAFETY: a writable sockaddr_storage.
    let len = unsafe { mf_peer_addr(c, storage.as_mut_ptr()) };
    assert_eq!(len as usize, std::mem::size_of::<libc::sockaddr_in>());
    let sin = storage.as_ptr().cast::<libc::sockaddr_in>();
    // SAFETY: mf_peer_addr wrote a sockaddr_in at the start of the storage.
    let (family, port) = unsafe { ((*sin).sin_family, u16::from_be((*sin).sin_port)) };
    assert_eq!((c_int::from(family), port), (libc::AF_INET, addr.port()));

    let data: Vec<u8> = (0..100_000u32).map(|i| (i * 7 % 251) as u8).collect();
    assert_eq!(send(c, &data), data.len() as isize);
    // SAFETY: 5 readable bytes.
    assert_eq!(unsafe { mf_send_message(c, 3, b"hello".as_ptr().cast(), 5) }, MF_OK, "{}", last_error());
    // SAFETY: null with length 0 is allowed: nothing is read.
    assert_eq!(unsafe { mf_send(c, null(), 0) }, 0);
    // SAFETY: null with a length is refused before any read.
    assert_eq!(unsafe { mf_send(c, null(), 5) }, MF_EINVAL as isize);
    assert!(last_error().contains("mf_send: buf is NULL with a length of 5"), "{}", last_error());
    assert_eq!(receive(c, &mut []), MF_EINVAL as isize, "a buffer of 0 bytes could not tell data from the end");
    // SAFETY: null info is refused before anything is received.
    assert_eq!(unsafe { mf_recv_message(c, null_mut(), null_mut::<c_void>(), 0) }, MF_EINVAL);
    let client_port = local(c).port();
    assert_eq!(mf_close(c), MF_OK, "{}", last_error());
    let (got, seen_port) = server.join().unwrap();
    assert!(got == data, "{} bytes arrived, not the {} sent", got.len(), data.len());
    assert_eq!(seen_port, client_port, "mf_peer on one side is mf_local on the other");
    assert_eq!(send(c, b"x"), MF_EBADF as isize, "closed");
    assert_eq!(mf_close(l), MF_OK);
}

#[test]
fn connecting_to_an_endpoint_that_does_not_listen_is_refused() {
    let _s = serial();
    let rt = crate::table::runtime().unwrap();
    let quiet = rt.block_on(mf::Endpoint::bind("127.0.0.1:0".parse().unwrap(), mf::Config::default())).unwrap();
    let addr = quiet.local_addr().unwrap();
    assert_eq!(connect(addr), MF_ECONNREFUSED, "{}", last_error());
    assert!(last_error().contains(&format!("mf_connect to {addr}")), "{}", last_error());
    // A group to it and to a listener: formed with the listener alone; the
    // status array says which peer is missing and why.
    let (l, live) = listen();
    let names = [std::ffi::CString::new(addr.to_string()).unwrap(), std::ffi::CString::new(live.to_string()).unwrap()];
    let ptrs = [names[0].as_ptr(), names[1].as_ptr()];
    let mut status = [7 as c_int; 2];
    let receiver = std::thread::spawn(move || {
        let c = mf_accept(l);
        let mut info = MfMessage::default();
        let mut buf = [0u8; 64];
        let mut got = Vec::new();
        while recv_message(c, &mut info, &mut buf) == 1 {
            if info.kind == MF_MSG_DATA {
                got.push(buf[..info.len].to_vec());
            }
        }
        assert_eq!(mf_close(c), MF_OK, "{}", last_error());
        got
    });
    // SAFETY: two NUL-terminated strings and two writable ints.
    let g = unsafe { mf_group_connect(ptrs.as_ptr(), 2, MF_MODE_ALL, 0, 0, status.as_mut_ptr()) };
    assert!(g > 0, "mf_group_connect: {}", last_error());
    assert_eq!(status, [MF_ECONNREFUSED, 0]);
    for m in [&b"one"[..], b"two"] {
        // SAFETY: m.len() readable bytes.
        assert!(unsafe { mf_group_send(g, m.as_ptr().cast(), m.len()) } >= 0, "{}", last_error());
    }
    assert_eq!(mf_group_wait(g), MF_OK, "{}", last_error());
    assert_eq!(mf_group_close(g), MF_OK, "{}", last_error());
    assert_eq!(receiver.join().unwrap(), vec![b"one".to_vec(), b"two".to_vec()]);
    assert_eq!(mf_close(l), MF_OK);
    rt.block_on(quiet.shutdown());
}

#[test]
fn group_arguments_are_checked_before_any_handshake() {
    let one = [c"127.0.0.1:9".as_ptr()];
    // SAFETY: valid strings or null, which is checked.
    unsafe {
        assert_eq!(mf_group_connect(one.as_ptr(), 0, MF_MODE_ALL, 0, 0, null_mut()), MF_EINVAL);
        assert_eq!(mf_group_connect(one.as_ptr(), 1, 42, 0, 0, null_mut()), MF_EINVAL);
        assert!(last_error().contains("unknown mode 42"), "{}", last_error());
        assert_eq!(mf_group_connect(one.as_ptr(), 1, MF_MODE_AT_LEAST, 70_000, 0, null_mut()), MF_EINVAL);
        let bad = [c"no port here".as_ptr()];
        assert_eq!(mf_group_connect(bad.as_ptr(), 1, MF_MODE_ANY, 0, 0, null_mut()), MF_EINVAL);
        assert!(last_error().contains("addrs[0]"), "{}", last_error());
    }
}

#[test]
fn closing_a_listener_wakes_an_accept_blocked_on_it() {
    let _s = serial();
    let (l, _) = listen();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send((mf_accept(l), last_error())).unwrap());
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(mf_close(l), MF_OK);
    let (rc, text) = rx.recv_timeout(Duration::from_secs(5)).expect("mf_accept returned");
    assert_eq!(rc, MF_ECLOSED);
    assert!(text.contains(&format!("mf_accept on listener {l}: closed by mf_close on another thread")), "{text}");
}

#[test]
fn a_panic_inside_a_call_becomes_einternal_with_its_message() {
    let rc: c_int = crate::error::entry("mf_test", || panic!("boom at the boundary"));
    assert_eq!(rc, MF_EINTERNAL);
    assert!(last_error().contains("mf_test: internal error"), "{}", last_error());
    assert!(last_error().contains("boom at the boundary"), "{}", last_error());
}

#[test]
fn every_code_has_its_own_description_and_others_are_unknown() {
    let text = |c| {
        // SAFETY: mf_strerror returns a static NUL-terminated string.
        unsafe { CStr::from_ptr(mf_strerror(c)) }.to_str().unwrap()
    };
    let codes: Vec<c_int> = (MF_EFORK..=MF_OK).collect();
    assert_eq!(codes.len(), 17);
    let texts: std::collections::HashSet<&str> = codes.iter().map(|&c| text(c)).collect();
    assert_eq!(texts.len(), codes.len(), "two codes share a description");
    assert!(!texts.contains("unknown error code"));
    assert_eq!(text(-999), "unknown error code");
    assert_eq!(text(1), "unknown error code");
}

#[test]
fn the_drop_rate_drops_received_datagrams_only_at_about_its_rate() {
    let _s = serial();
    assert_eq!(set_drop(MF_DEFAULTS, 0.1), MF_OK, "{}", last_error());
    // Datagrams of 1,200 bytes (no discovery up to loopback's 64 KiB, spec
    // §3.7): 1 MiB makes some 900 of them.
    let fixed = FixedDatagrams::of(1200);
    let (l, addr) = listen();
    let server = std::thread::spawn(move || {
        let c = mf_accept(l);
        assert!(c > 0, "mf_accept: {}", last_error());
        let mut buf = [0u8; 65536];
        let mut got = 0usize;
        loop {
            let n = receive(c, &mut buf);
            assert!(n >= 0, "mf_receive: {}", last_error());
            if n == 0 {
                break;
            }
            got += n as usize;
        }
        assert_eq!(mf_close(c), MF_OK, "{}", last_error());
        got
    });
    let c = connect(addr);
    assert!(c > 0, "mf_connect: {}", last_error());
    assert_eq!(set_drop(MF_DEFAULTS, 0.0), MF_OK);
    drop(fixed);
    let data = vec![7u8; 1 << 20];
    assert_eq!(send(c, &data), data.len() as isize, "{}", last_error());
    assert_eq!(mf_close(c), MF_OK, "{}", last_error());
    assert_eq!(server.join().unwrap(), data.len());
    let endpoint = crate::table::listener(l, "test").unwrap().endpoint.clone();
    let (faults, driver) = (endpoint.fault_stats(), endpoint.driver_stats());
    drop(endpoint);
    assert_eq!(faults.send_dropped, 0, "librusp drops on receive only");
    let n = driver.datagrams_received as f64;
    let rate = faults.recv_dropped as f64 / n;
    // Within four standard deviations of a binomial draw of n at 10%.
    let bound = 4.0 * (0.1 * 0.9 / n).sqrt();
    assert!((rate - 0.1).abs() <= bound, "{faults:?} of {n} received: {rate} (±{bound:.3})");
    assert_eq!(mf_close(l), MF_OK);
}

/// The listener's datagrams received and dropped so far.
fn listener_counts(l: c_int) -> (u64, u64) {
    let endpoint = crate::table::listener(l, "test").unwrap().endpoint.clone();
    let counts = (endpoint.driver_stats().datagrams_received, endpoint.fault_stats().recv_dropped);
    drop(endpoint);
    counts
}

#[test]
fn a_drop_rate_switched_on_mid_connection_drops_received_datagrams_until_switched_off() {
    let _s = serial();
    // Datagrams of 1,200 bytes (no discovery up to loopback's 64 KiB, spec
    // §3.7): 512 KiB is some 450 of them, enough to measure a 20% drop
    // rate on.
    const PHASE: usize = 512 << 10;
    let fixed = FixedDatagrams::of(1200);
    let pattern = |phase: usize| -> Vec<u8> { (0..PHASE).map(|i| ((i * 31 + phase * 7) % 251) as u8).collect() };
    let (l, addr) = listen();
    let (accepted_tx, accepted) = std::sync::mpsc::channel();
    let (done_tx, done) = std::sync::mpsc::channel();
    let server = std::thread::spawn(move || {
        let s = mf_accept(l);
        assert!(s > 0, "mf_accept: {}", last_error());
        accepted_tx.send(s).unwrap();
        let mut buf = vec![0u8; 65536];
        for phase in 0..3 {
            let mut got = Vec::with_capacity(PHASE);
            while got.len() < PHASE {
                let n = receive(s, &mut buf[..(PHASE - got.len()).min(65536)]);
                assert!(n > 0, "mf_receive in phase {phase}: {n} {}", last_error());
                got.extend_from_slice(&buf[..n as usize]);
            }
            assert!(got == pattern(phase), "phase {phase}: the data arrived changed");
            done_tx.send(phase).unwrap();
        }
        assert_eq!(receive(s, &mut buf), 0, "the client's end");
        assert_eq!(mf_close(s), MF_OK, "{}", last_error());
    });
    let c = connect(addr);
    assert!(c > 0, "mf_connect: {}", last_error());
    drop(fixed);
    let s = accepted.recv_timeout(Duration::from_secs(10)).expect("accepted");
    let phase = |n: usize| {
        let before = listener_counts(l);
        assert_eq!(send(c, &pattern(n)), PHASE as isize, "{}", last_error());
        assert_eq!(done.recv_timeout(Duration::from_secs(60)), Ok(n), "phase {n} did not arrive in time");
        let after = listener_counts(l);
        (after.0 - before.0, after.1 - before.1)
    };
    let (received, dropped) = phase(0);
    assert_eq!(dropped, 0, "dropped before the rate was set, of {received}");

    // On the accepted connection: the listener's socket, which it shares.
    assert_eq!(set_drop(s, 0.2), MF_OK, "{}", last_error());
    assert_eq!((get_drop(s), get_drop(l), get_drop(c), get_drop(MF_DEFAULTS)), (0.2, 0.2, 0.0, 0.0));
    let (received, dropped) = phase(1);
    let rate = dropped as f64 / received as f64;
    println!("{dropped} of {received} datagrams received dropped: {rate:.3}");
    assert!((0.10..0.30).contains(&rate), "{dropped} of {received} received dropped: {rate}");

    assert_eq!(set_drop(s, 0.0), MF_OK, "{}", last_error());
    let (received, dropped) = phase(2);
    assert_eq!(dropped, 0, "dropped after the rate was switched off, of {received}");
    assert!(received > 0);

    // The listener closed, its socket can no longer be reached: the
    // connection it accepted keeps its rate, and says so.
    assert_eq!(mf_close(l), MF_OK);
    assert_eq!(set_drop(s, 0.3), MF_ENOTSUP);
    assert!(last_error().contains("accepted by a listener since closed"), "{}", last_error());
    assert_eq!(set_drop(s, 0.0), MF_OK, "setting the value it has is no change");
    assert_eq!(set_drop(MF_ALL, 0.3), MF_ENOTSUP);
    assert!(last_error().contains(&format!("1 connection(s) (the first {s})")), "{}", last_error());
    assert_eq!((get_drop(s), get_drop(c), get_drop(MF_DEFAULTS)), (0.0, 0.3, 0.3), "MF_ALL set the rest");
    assert_eq!(set_drop(MF_ALL, 0.0), MF_OK, "{}", last_error());

    assert_eq!(mf_close(c), MF_OK, "{}", last_error());
    server.join().unwrap();
}

#[test]
fn a_seed_gives_each_endpoint_the_same_drops_every_run_and_no_seed_new_ones() {
    use crate::attrs::Attrs;
    let seeded = Attrs { drop_rate: 0.1, seed: 42, max_datagram: 0 };
    assert_eq!(seeded.faults(3), seeded.faults(3), "the 3rd endpoint of every run");
    assert_ne!(seeded.faults(3).seed, seeded.faults(4).seed, "endpoints differ from each other");
    assert_ne!(seeded.faults(3).seed, Attrs { seed: 43, ..seeded }.faults(3).seed);
    let unseeded = Attrs { drop_rate: 0.1, seed: 0, max_datagram: 0 };
    assert_ne!(unseeded.faults(3).seed, unseeded.faults(3).seed, "a new seed each time");
    let f = seeded.faults(1);
    assert_eq!((f.effective_send_loss(), f.effective_recv_loss()), (0.0, 0.1));
}

#[test]
fn closing_a_group_wakes_a_receive_blocked_on_it_with_eclosed() {
    let _s = serial();
    let (l, addr) = listen();
    let receiver = std::thread::spawn(move || {
        let c = mf_accept(l);
        assert!(c > 0, "mf_accept: {}", last_error());
        let mut buf = [0u8; 64];
        while receive(c, &mut buf) > 0 {}
        assert_eq!(mf_close(c), MF_OK, "{}", last_error());
    });
    let name = std::ffi::CString::new(addr.to_string()).unwrap();
    let ptrs = [name.as_ptr()];
    // SAFETY: one NUL-terminated string; no status array.
    let g = unsafe { mf_group_connect(ptrs.as_ptr(), 1, MF_MODE_ALL, 0, 0, null_mut()) };
    assert!(g > 0, "mf_group_connect: {}", last_error());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut info = MfMessage::default();
        let mut buf = [0u8; 64];
        // SAFETY: a writable record and 64 writable bytes.
        let rc = unsafe { mf_group_recv_message(g, &mut info, buf.as_mut_ptr().cast(), buf.len()) };
        tx.send((rc, last_error())).unwrap();
    });
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(mf_close(g), MF_OK, "{}", last_error());
    let (rc, text) = rx.recv_timeout(Duration::from_secs(5)).expect("mf_group_recv_message returned");
    assert_eq!(rc, MF_ECLOSED, "{text}");
    assert!(text.contains(&format!("mf_group_recv_message on group {g}: closed by mf_close")), "{text}");
    receiver.join().unwrap();
    assert_eq!(mf_close(l), MF_OK);
}

#[test]
fn closing_a_connection_wakes_a_send_blocked_on_flow_control_with_eclosed() {
    let _s = serial();
    let (l, addr) = listen();
    let receiver = std::thread::spawn(move || {
        let c = mf_accept(l);
        assert!(c > 0, "mf_accept: {}", last_error());
        // Not reading yet: the sender fills the window and blocks.
        std::thread::sleep(Duration::from_millis(600));
        let mut buf = [0u8; 65536];
        while receive(c, &mut buf) > 0 {}
        assert_eq!(mf_close(c), MF_OK, "{}", last_error());
    });
    let c = connect(addr);
    assert!(c > 0, "mf_connect: {}", last_error());
    let (tx, rx) = std::sync::mpsc::channel();
    // More than the send buffer and the peer's window together.
    let data = vec![1u8; 256 << 20];
    std::thread::spawn(move || {
        let rc = send(c, &data);
        tx.send((rc, last_error(), std::time::Instant::now())).unwrap();
    });
    std::thread::sleep(Duration::from_millis(300));
    let closing = std::time::Instant::now();
    let rc = mf_close(c);
    let (sent, text, at) = rx.recv_timeout(Duration::from_secs(10)).expect("mf_send returned");
    assert_eq!(sent, MF_ECLOSED as isize, "{text}");
    assert!(text.contains(&format!("mf_send on connection {c}: closed by mf_close")), "{text}");
    assert!(at.duration_since(closing) < Duration::from_millis(300), "woken after {:?}", at.duration_since(closing));
    assert_eq!(rc, MF_OK, "what was queued before the close is delivered: {}", last_error());
    receiver.join().unwrap();
    assert_eq!(mf_close(l), MF_OK);
}
