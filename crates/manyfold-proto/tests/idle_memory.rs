//! What an idle session costs a listener's engine in memory (issue 21:
//! "idle session memory stays ≤ 4 KiB"; the sessions lab's `hold` part
//! measures the whole server process's RSS, driver and allocator
//! included). A client endpoint opens N sessions to a listener, each
//! established and then idle (a bare one, and one that sent 16 bytes the
//! listener read), datagrams passed directly between the two; the
//! listener's heap is what dropping it frees, less what an empty
//! listener's drop frees. It was 4,791 bytes for a bare session (RESULTS
//! §37: the lab's hold had risen to 4,883 bytes of RSS per session from
//! 2,974 in §12); the shared connection settings, BBR's filter made with
//! its first sample, the path and 0-RTT state made when first used and
//! 8-byte timer deadlines brought it to 3,992 (4,248 with a 16-byte
//! hello, whose receive ring is allocated).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use manyfold_proto::{Endpoint, EndpointConfig};

#[global_allocator]
static GLOBAL: manyfold_testalloc::Counting = manyfold_testalloc::Counting;

const CLIENT: &str = "198.18.0.1:4000";
const SERVER: &str = "198.18.0.2:4433";
const SESSIONS: usize = 1_000;

/// Heap bytes `ep` holds: what dropping it frees.
fn heap_of(ep: Endpoint) -> i64 {
    let before = manyfold_testalloc::live_bytes();
    drop(ep);
    before - manyfold_testalloc::live_bytes()
}

/// A listener holding `n` idle sessions whose clients each sent `hello`
/// bytes (read by the listener), and the client endpoint.
fn hold(n: usize, hello: usize) -> (Endpoint, Endpoint) {
    let (client_addr, server_addr): (SocketAddr, SocketAddr) = (CLIENT.parse().unwrap(), SERVER.parse().unwrap());
    let mut now = Instant::now();
    let cfg = EndpointConfig::default();
    let mut server = Endpoint::new(EndpointConfig { seed: 2, ..cfg.clone() }, now);
    server.set_listening(true);
    let mut client = Endpoint::new(EndpointConfig { seed: 1, ..cfg }, now);
    let mut buf = Vec::with_capacity(1 << 16);
    let mut read = vec![0u8; 1 << 16];
    let hello = vec![5u8; hello];
    let mut accepted = Vec::new();
    for _ in 0..n {
        let h = client.connect(now, server_addr).expect("connect");
        if !hello.is_empty() {
            assert_eq!(client.conn_mut(h).send(&hello), Ok(hello.len()));
        }
    }
    // Rounds of 1 ms: the echoes wait out their hold (10 ms) when bare.
    for _ in 0..100 {
        while let Some(t) = client.poll_transmit(now, 1, &mut buf) {
            server.handle_datagram(now, client_addr, &buf[..t.size]);
        }
        while let Some(s) = server.accept() {
            accepted.push(s);
        }
        for &s in &accepted {
            while let Ok(Some(n)) = server.conn_mut(s).recv(&mut read) {
                if n == 0 {
                    break;
                }
            }
        }
        while let Some(t) = server.poll_transmit(now, 1, &mut buf) {
            client.handle_datagram(now, server_addr, &buf[..t.size]);
        }
        while client.poll_event().is_some() || server.poll_event().is_some() {}
        now += Duration::from_millis(1);
        client.handle_timeout(now);
        server.handle_timeout(now);
    }
    assert_eq!(accepted.len(), n, "every session established");
    (server, client)
}

#[test]
fn an_idle_session_holds_little_of_its_listeners_heap() {
    let (empty, c) = hold(0, 0);
    drop(c);
    let base = heap_of(empty);
    for (hello, bound) in [(0, 4_096.0), (16, 4_400.0)] {
        let (server, client) = hold(SESSIONS, hello);
        let per = (heap_of(server) - base) as f64 / SESSIONS as f64;
        drop(client);
        println!("idle session, {hello}-byte hello: {per:.0} heap bytes of the listener's engine per session");
        assert!(per <= bound, "{per:.0} bytes per idle session ({hello}-byte hello), above {bound}");
    }
}
