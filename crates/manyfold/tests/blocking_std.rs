//! The blocking `Stream` in std's shape: read and write timeouts that
//! fail with `WouldBlock` as `TcpStream`'s do, and `shutdown(Write)`
//! that sends our FIN while reading goes on.

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::Shutdown;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use common::*;
use manyfold::blocking::{Listener, Stream};

/// Runs `f` on a thread and fails if it does not finish in time.
fn bounded<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(TEST_TIMEOUT).expect("test timed out")
}

#[test]
fn a_read_with_nothing_to_read_fails_with_would_block_after_the_timeout() {
    bounded(|| {
        let listener = Listener::listen("127.0.0.1:0").expect("listen");
        let mut client = Stream::connect(listener.local().unwrap()).expect("connect");
        let mut server = listener.accept().expect("accept");
        assert_eq!(client.read_timeout(), None);
        client.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
        let started = Instant::now();
        let mut buf = [0u8; 16];
        let e = client.read(&mut buf).expect_err("nothing was sent");
        assert_eq!(e.kind(), ErrorKind::WouldBlock);
        assert!(started.elapsed() >= Duration::from_millis(200), "waited the timeout");
        // The connection is still fine: what comes later is read.
        server.write_all(b"late").unwrap();
        client.set_read_timeout(None).unwrap();
        let mut got = [0u8; 4];
        client.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"late");
    });
}

#[test]
fn a_zero_timeout_is_refused_as_std_refuses_it() {
    bounded(|| {
        let listener = Listener::listen("127.0.0.1:0").expect("listen");
        let mut client = Stream::connect(listener.local().unwrap()).expect("connect");
        let e = client.set_write_timeout(Some(Duration::ZERO)).expect_err("zero");
        assert_eq!(e.kind(), ErrorKind::InvalidInput);
        client.set_write_timeout(Some(Duration::from_secs(5))).unwrap();
        assert_eq!(client.write_timeout(), Some(Duration::from_secs(5)));
    });
}

#[test]
fn shutdown_write_ends_our_side_and_the_reply_still_arrives() {
    bounded(|| {
        let listener = Listener::listen("127.0.0.1:0").expect("listen");
        let addr = listener.local().unwrap();
        let server = thread::spawn(move || {
            let mut s = listener.accept().expect("accept");
            let mut request = Vec::new();
            s.read_to_end(&mut request).expect("to the client's FIN");
            s.write_all(&request.to_ascii_uppercase()).unwrap();
            s.close().expect("server close");
        });
        let mut client = Stream::connect(addr).expect("connect");
        client.write_all(b"question").unwrap();
        client.shutdown(Shutdown::Write).unwrap();
        client.shutdown(Shutdown::Write).expect("a second shutdown does nothing");
        let mut reply = Vec::new();
        client.read_to_end(&mut reply).unwrap();
        assert_eq!(reply, b"QUESTION");
        client.shutdown(Shutdown::Read).unwrap();
        assert_eq!(client.read(&mut [0u8; 8]).unwrap(), 0, "reads end after shutdown(Read)");
        client.close().expect("client close");
        server.join().unwrap();
    });
}
