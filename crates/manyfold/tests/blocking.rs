//! The librusp-shaped blocking API (paper 04 §2.2): an echo client and server
//! on threads.

mod common;

use std::io::{Read, Write};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use common::*;
use manyfold::blocking::{Listener, Stream};

/// Runs `f` on a thread and fails if it does not finish in time.
fn bounded<T: Send + 'static>(limit: Duration, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(limit).expect("test timed out")
}

#[test]
fn blocking_echo_client_and_server() {
    bounded(TEST_TIMEOUT, || {
        let listener = Listener::listen("127.0.0.1:0").expect("listen");
        let addr = listener.local().unwrap();
        let server = thread::spawn(move || {
            let mut s = listener.accept().expect("accept");
            let mut buf = [0u8; 4096];
            let mut echoed = 0;
            loop {
                let n = s.receive(&mut buf).expect("receive");
                if n == 0 {
                    break;
                }
                assert_eq!(s.send(&buf[..n]).expect("send"), n);
                echoed += n;
            }
            s.close().expect("server close");
            echoed
        });

        let mut c = Stream::connect(addr).expect("connect");
        assert_eq!(c.peer(), addr);
        assert!(c.local().unwrap().port() != 0);
        let msg = payload(9, 100_000);
        c.send(&msg).expect("send");
        // std::io traits work too.
        c.write_all(b"!").unwrap();
        c.flush().unwrap();
        // And a chunk handed over without a copy.
        c.write_chunk(bytes::Bytes::from_static(b"?")).expect("write_chunk");
        let mut back = vec![0u8; msg.len()];
        c.read_exact(&mut back).unwrap();
        assert_eq!(&back[..], &msg[..]);
        assert_eq!(c.read_chunk(0).expect("no wait").as_deref(), Some(&b""[..]), "asked for nothing");
        // The rest read as chunks of at most 1 byte.
        assert_eq!(c.read_chunk(1).expect("a chunk").as_deref(), Some(&b"!"[..]));
        assert_eq!(c.read_chunk(1).expect("a chunk").as_deref(), Some(&b"?"[..]));
        c.close().expect("client close");
        let mut bufs = vec![bytes::Bytes::new(); 4];
        assert_eq!(c.read_chunks(&mut bufs).expect("the end"), None, "end of stream after the server closed");
        assert_eq!(c.read_chunk(16).expect("the end"), None, "end of stream after the server closed");
        let mut buf = [0u8; 16];
        assert_eq!(c.receive(&mut buf).unwrap(), 0, "end of stream after the server closed");
        assert_eq!(server.join().unwrap(), msg.len() + 2);
    });
}

#[test]
fn blocking_connect_to_a_closed_port_fails() {
    bounded(TEST_TIMEOUT, || {
        let port = std::net::UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
        let mut cfg = config();
        cfg.endpoint.connection.connect_timeout = Duration::from_millis(500);
        let err = Stream::connect_with(port, cfg).expect_err("nothing listens");
        assert!(matches!(err.kind(), std::io::ErrorKind::TimedOut | std::io::ErrorKind::ConnectionRefused), "{err}");
    });
}

#[test]
fn a_blocking_abort_with_a_reason_fails_the_peers_receive_with_its_words() {
    bounded(TEST_TIMEOUT, || {
        let listener = Listener::listen("127.0.0.1:0").expect("listen");
        let addr = listener.local().unwrap();
        let server = thread::spawn(move || {
            let mut s = listener.accept().expect("accept");
            let mut hello = [0u8; 5];
            s.read_exact(&mut hello).expect("the client's hello");
            s.abort_with(manyfold::ErrorCode(301), "quota exceeded");
        });
        let mut c = Stream::connect(addr).expect("connect");
        c.send(b"hello").expect("send");
        let mut buf = [0u8; 16];
        let err = c.receive(&mut buf).expect_err("the server aborted");
        assert_eq!(manyfold::peer_close_text(&err), Some("quota exceeded"), "{err:?}");
        assert_eq!(err.kind(), std::io::ErrorKind::ConnectionReset);
        server.join().unwrap();
    });
}

/// Sends `request` on a new blocking stream and reads the reply to its end.
fn blocking_request(addr: std::net::SocketAddr, request: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut s = Stream::connect(addr)?;
    s.write_all(request)?;
    s.shutdown(std::net::Shutdown::Write)?;
    let mut reply = Vec::new();
    s.read_to_end(&mut reply)?;
    s.close()?;
    Ok(reply)
}

#[test]
fn blocking_serve_inline_answers_every_session_and_refuses_an_oversized_request() {
    bounded(TEST_TIMEOUT, || {
        let listener = std::sync::Arc::new(Listener::listen("127.0.0.1:0").expect("listen"));
        let addr = listener.local().unwrap();
        let server = listener.clone();
        let serving = thread::spawn(move || server.serve_inline(4096, |_, req: &[u8]| reverse(req)));
        let clients: Vec<_> = (0..3u64)
            .map(|c| {
                thread::spawn(move || {
                    for i in 0..10u64 {
                        let request = payload(c * 100 + i, 100 + (i as usize) * 37);
                        let reply = blocking_request(addr, &request).expect("request");
                        assert_eq!(reply, reverse(&request), "client {c}, session {i}");
                    }
                })
            })
            .collect();
        for c in clients {
            c.join().expect("client thread");
        }
        // Over the limit: the client's read fails with the server's reset.
        let err = blocking_request(addr, &payload(9, 5000)).expect_err("an oversized request is refused");
        assert!(err.to_string().contains("413"), "{err}");
        let stats = listener.inline_stats();
        assert_eq!(stats.served, 30);
        listener.shutdown();
        serving.join().expect("serve_inline returns after shutdown");
    });
}
