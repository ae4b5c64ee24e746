//! What one short request/reply session costs the whole stack in heap
//! allocations over real sockets on 127.0.0.1 (issue 21 item 3): a client
//! endpoint's `request` against a server on `serve` (a task per session)
//! and against one on `serve_inline` (the handler run by the driver, spec
//! §15.4). A counting global allocator counts every allocation in the
//! process — both endpoints, their drivers, the engine, tokio, the
//! handler's reply — over sequential sessions after a warm-up has grown
//! every table and pool. Both handlers build their reply as a fresh
//! `Vec` (one allocation each). The figures are printed; the inline
//! server must cost at least 2 fewer than the task-per-session one (today
//! 21 against 24: no task, no request buffer; they were 45 and 49 before
//! spare connections kept stream 0's send buffer, receive ring and the
//! scheduler's queue, 37 and 41 before the driver kept its `sendmmsg`
//! headers, 27 and 31 before spares kept the sent queue and the
//! congestion controller and the driver pooled its connection states),
//! and the bound is today's 21 with a margin of 3 (tokio's wakers and
//! timers vary a little). Of the 21:
//! - the server's engine, 1 (manyfold-proto's tests/session_allocs.rs: a
//!   packet's chunk list, all an engine with spares allocates);
//! - the client's engine, 17: the same 1, and 16 that a spare would save
//!   but the client has none: its connections wait in TIME-WAIT (15 s) and
//!   leave their spares only then (stream 0's buffers and queues, the
//!   scheduler's queue and leaf, the event queue: 11; the sent queue's
//!   three containers and the congestion controller's two: 5);
//! - none in the driver's `sendmmsg` (socket.rs, `send_many`): its message
//!   headers are made once per thread (they were about 10 per session,
//!   built on each call);
//! - the client's `Connection` (its `Arc`), its reply `Vec` and the test
//!   handler's reply: 3. The first waker of a connection's state no longer
//!   allocates: the driver keeps finished connections' states, emptied
//!   (shared.rs `Conns`), and a released connection's state leaves at
//!   TIME-WAIT, not after it.
//!
//! `MANYFOLD_ALLOC_SITES=1 cargo test --release -p manyfold --test
//! session_allocs -- --nocapture` prints where each comes from.

use std::net::SocketAddr;
use std::sync::Arc;

use manyfold::Endpoint;
use tokio::time::timeout;

mod common;
use common::{config, localhost, payload, TEST_TIMEOUT};

#[global_allocator]
static GLOBAL: manyfold_testalloc::Counting = manyfold_testalloc::Counting;

/// The test configuration with 256 spare connections (the default,
/// `EndpointConfig::max_spare_connections`, set here explicitly).
fn pooled() -> manyfold::Config {
    let mut c = config();
    c.endpoint.max_spare_connections = 256;
    c
}

const WARM: usize = 300;
const MEASURED: usize = 1000;

/// Allocations per session of `MEASURED` sequential 300-byte sessions
/// against `addr`, after `WARM` of them.
async fn per_session(client: &Endpoint, addr: SocketAddr) -> f64 {
    let request = payload(1, 300);
    for _ in 0..WARM {
        assert_eq!(client.request(addr, &request, 4096).await.expect("warm-up request").len(), 300);
    }
    manyfold_testalloc::record_sites_from_env();
    manyfold_testalloc::start();
    for _ in 0..MEASURED {
        let reply = client.request(addr, &request, 4096).await.expect("request");
        assert_eq!(reply.len(), 300);
    }
    let allocs = manyfold_testalloc::stop().allocs;
    manyfold_testalloc::print_sites(MEASURED as u64);
    allocs as f64 / MEASURED as f64
}

/// One test, so that the two measurements never run at once (the counter
/// is global).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inline_session_costs_fewer_allocations_than_a_task_per_session() {
    timeout(TEST_TIMEOUT, async {
        let mut figures = Vec::new();
        for inline in [false, true] {
            let server = Arc::new(Endpoint::bind(localhost(), pooled()).await.expect("bind"));
            server.listen();
            let addr = server.local_addr().unwrap();
            let serving = server.clone();
            if inline {
                tokio::spawn(async move { serving.serve_inline(4096, |_, req: &[u8]| req.to_vec()).await });
            } else {
                tokio::spawn(async move { serving.serve(4096, |_, req: Vec<u8>| async move { req }).await });
            }
            let client = Endpoint::bind(localhost(), pooled()).await.expect("bind");
            figures.push(per_session(&client, addr).await);
            client.shutdown().await;
            server.shutdown().await;
        }
        let (task, inline) = (figures[0], figures[1]);
        println!(
            "allocations per session, client and server with their drivers: serve (a task per session) {task:.1}, serve_inline {inline:.1}"
        );
        assert!(inline + 2.0 <= task, "serve_inline {inline:.1} against serve {task:.1}");
        assert!(inline <= 24.0, "serve_inline: {inline:.1} allocations per session (21 expected)");
    })
    .await
    .expect("test timed out");
}
