//! Request/reply sessions over real sockets on 127.0.0.1 (spec §15):
//! `request` and `serve` round trips of any size, 2,000 concurrent
//! clients, a server that keeps nothing afterwards, an oversized request
//! refused by a stream reset, a full backlog refused at once, and a
//! repeat client's requests on its SYN with a token (0-RTT, spec §6.9).

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use manyfold::{ConnectError, Endpoint, RequestError, REQUEST_TOO_LARGE};
use tokio::time::timeout;

async fn server(config: manyfold::Config, max_request: usize) -> (Arc<Endpoint>, SocketAddr) {
    let ep = Arc::new(Endpoint::bind(localhost(), config).await.expect("bind"));
    ep.listen();
    let addr = ep.local_addr().unwrap();
    let serving = ep.clone();
    tokio::spawn(async move { serving.serve(max_request, |_, req: Vec<u8>| async move { reverse(&req) }).await });
    (ep, addr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_of_every_size_get_their_replies() {
    timeout(TEST_TIMEOUT, async {
        let (srv, addr) = server(config(), 1 << 20).await;
        let client = Endpoint::bind(localhost(), config()).await.unwrap();
        for (i, len) in [0usize, 1, 100, 1400, 5000, 64 << 10, 300 << 10].into_iter().enumerate() {
            let req = payload(i as u64, len);
            let reply = client.request(addr, &req, 1 << 20).await.unwrap_or_else(|e| panic!("{len} bytes: {e}"));
            assert!(reply == reverse(&req), "reply to {len} bytes");
        }
        client.shutdown().await;
        srv.shutdown().await;
    })
    .await
    .expect("test timed out");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_thousand_concurrent_clients_all_get_replies_and_the_server_keeps_nothing() {
    timeout(TEST_TIMEOUT, async {
        let mut cfg = config();
        cfg.endpoint.accept_backlog = 4096;
        let (srv, addr) = server(cfg, 4096).await;
        // Four client endpoints (sockets), 500 sessions on each at once.
        let mut clients = Vec::new();
        for _ in 0..4 {
            clients.push(Arc::new(Endpoint::bind(localhost(), config()).await.unwrap()));
        }
        let failures = request_many(&clients, addr, 2000, |_| 1000).await;
        assert!(failures.is_empty(), "{} failures, first: {:?}", failures.len(), failures.first());
        // spec §15: the server closed second; once its FINs are acknowledged
        // it holds no connection (the clients hold TIME-WAIT).
        let mut left = srv.connection_count();
        for _ in 0..100 {
            if left == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
            left = srv.connection_count();
        }
        assert_eq!(left, 0, "the server still holds connections");
        assert!(clients.iter().map(|c| c.connection_count()).sum::<usize>() > 0, "the clients hold TIME-WAIT");
        // Issue 21: the server's answers to many clients share sendmmsg calls.
        #[cfg(target_os = "linux")]
        {
            let d = srv.driver_stats();
            assert!(d.mmsg_sends > 0 && d.mmsg_datagrams >= 2 * d.mmsg_sends, "{d:?}");
        }
        srv.shutdown().await;
    })
    .await
    .expect("test timed out");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeat_client_with_reuse_tokens_sends_its_requests_on_the_syn() {
    timeout(TEST_TIMEOUT, async {
        let (srv, addr) = server(config(), 1 << 20).await;
        let mut cfg = config();
        cfg.endpoint.reuse_tokens = true;
        let client = Endpoint::bind(localhost(), cfg).await.unwrap();
        assert!(!client.has_token(addr), "no token before the first session");
        let first = payload(0, 100);
        assert!(client.request(addr, &first, 1 << 20).await.expect("first request") == reverse(&first));
        assert!(client.has_token(addr), "the first session's SYN-ACK handed a token");
        // Requests that fit the SYN and requests that do not (the rest
        // follows the SYN-ACK) alike.
        for (i, len) in [0usize, 1, 1000, 1400, 5000, 64 << 10].into_iter().enumerate() {
            let req = payload(i as u64 + 1, len);
            let reply = client.request(addr, &req, 1 << 20).await.unwrap_or_else(|e| panic!("{len} bytes: {e}"));
            assert!(reply == reverse(&req), "reply to {len} bytes");
        }
        let stats = srv.stats();
        assert_eq!(stats.early_accepted, 6, "every repeat session was 0-RTT: {stats:?}");
        assert_eq!((stats.tokens_rejected, stats.early_replayed), (0, 0));
        client.shutdown().await;
        srv.shutdown().await;
    })
    .await
    .expect("test timed out");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_request_is_refused_with_a_stream_reset() {
    timeout(TEST_TIMEOUT, async {
        let (srv, addr) = server(config(), 1000).await;
        let client = Endpoint::bind(localhost(), config()).await.unwrap();
        let err = client.request(addr, &payload(1, 5000), 1 << 20).await.unwrap_err();
        assert_eq!(err, RequestError::Reset(REQUEST_TOO_LARGE), "{err}");
        // The server still serves.
        assert_eq!(client.request(addr, b"ok", 10).await.unwrap(), b"ko");
        srv.shutdown().await;
    })
    .await
    .expect("test timed out");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_backlog_refuses_new_sessions_at_once() {
    timeout(TEST_TIMEOUT, async {
        // A listener that never accepts, with room for two waiting sessions.
        let mut cfg = config();
        cfg.endpoint.accept_backlog = 2;
        let srv = Endpoint::bind(localhost(), cfg).await.unwrap();
        srv.listen();
        let addr = srv.local_addr().unwrap();
        let client = Arc::new(Endpoint::bind(localhost(), config()).await.unwrap());
        let mut waiting = Vec::new();
        for _ in 0..2 {
            let c = client.clone();
            waiting.push(tokio::spawn(async move { c.request(addr, b"x", 10).await }));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        let started = std::time::Instant::now();
        match client.request(addr, b"y", 10).await {
            Err(RequestError::Connect(ConnectError::Refused)) => {}
            other => panic!("expected a refusal, got {other:?}"),
        }
        assert!(started.elapsed() < Duration::from_secs(1), "refused explicitly, not by silence");
        for w in waiting {
            w.abort();
        }
        srv.shutdown().await;
    })
    .await
    .expect("test timed out");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reuseport_endpoints_share_one_port_and_each_serves_sessions() {
    timeout(TEST_TIMEOUT, async {
        let servers = Endpoint::bind_reuseport(localhost(), config(), 2).await.expect("bind twice");
        let addr = servers[0].local_addr().unwrap();
        assert_eq!(servers[1].local_addr().unwrap(), addr, "one port");
        let servers: Vec<Arc<Endpoint>> = servers.into_iter().map(Arc::new).collect();
        for s in &servers {
            s.listen();
            let serving = s.clone();
            tokio::spawn(async move { serving.serve(4096, |_, req: Vec<u8>| async move { reverse(&req) }).await });
        }
        // Sixteen client sockets: the kernel spreads them over the two by hash.
        let mut tasks = tokio::task::JoinSet::new();
        for c in 0..16u64 {
            let client = Endpoint::bind(localhost(), config()).await.unwrap();
            tasks.spawn(async move {
                for i in 0..25 {
                    let req = payload(c * 100 + i, 300);
                    let reply = client.request(addr, &req, 4096).await.expect("request");
                    assert!(reply == reverse(&req));
                }
            });
        }
        while let Some(r) = tasks.join_next().await {
            r.unwrap();
        }
        let accepted: Vec<u64> = servers.iter().map(|s| s.stats().connections_accepted).collect();
        assert_eq!(accepted.iter().sum::<u64>(), 400);
        assert!(accepted.iter().all(|&n| n > 0), "both sockets served: {accepted:?}");
        for s in servers {
            s.shutdown().await;
        }
    })
    .await
    .expect("test timed out");
}
