//! Failures the API must report clearly: refused and unanswered connects,
//! an address in use, a shut-down endpoint.

mod common;

use std::io;
use std::time::{Duration, Instant};

use common::*;
use manyfold::{ConnectError, Endpoint};
use tokio::time::timeout;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_to_an_endpoint_not_listening_is_refused() {
    timeout(TEST_TIMEOUT, async {
        let deaf = Endpoint::bind(localhost(), config()).await.unwrap(); // no listen()
        let client = Endpoint::bind(localhost(), config()).await.unwrap();
        let err = client.connect(deaf.local_addr().unwrap()).await.expect_err("must be refused");
        assert!(matches!(err, ConnectError::Refused), "{err:?}");
        assert_eq!(io::Error::from(err).kind(), io::ErrorKind::ConnectionRefused);
        assert!(deaf.stats().refused_not_listening >= 1);
    })
    .await
    .expect("test timed out");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_to_a_closed_port_times_out() {
    timeout(TEST_TIMEOUT, async {
        // A port that was just free: nothing answers there.
        let port = std::net::UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
        let mut cfg = config();
        cfg.endpoint.connection.connect_timeout = Duration::from_millis(800);
        let client = Endpoint::bind(localhost(), cfg).await.unwrap();
        let started = Instant::now();
        let err = client.connect(port).await.expect_err("nothing listens there");
        let kind = err.kind();
        assert!(matches!(err, ConnectError::TimedOut | ConnectError::Refused), "{err:?}");
        assert!(matches!(kind, io::ErrorKind::TimedOut | io::ErrorKind::ConnectionRefused));
        if kind == io::ErrorKind::TimedOut {
            assert_eq!(err.to_string(), "peer did not answer the handshake");
        }
        assert!(started.elapsed() < Duration::from_secs(10), "took {:?}", started.elapsed());
        assert_eq!(client.connection_count(), 0, "the failed connection is released");
    })
    .await
    .expect("test timed out");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bind_to_an_address_in_use_fails_with_addr_in_use() {
    timeout(TEST_TIMEOUT, async {
        let first = Endpoint::bind(localhost(), config()).await.unwrap();
        let taken = first.local_addr().unwrap();
        let err = Endpoint::bind(taken, config()).await.expect_err("address in use");
        assert_eq!(err.kind(), io::ErrorKind::AddrInUse, "{err}");
    })
    .await
    .expect("test timed out");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_ends_accept_and_refuses_new_work() {
    timeout(TEST_TIMEOUT, async {
        let (server, client) = pair(config(), config()).await;
        let waiting = {
            let server = server.clone();
            tokio::spawn(async move { server.accept().await.is_none() })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        server.shutdown().await;
        assert!(waiting.await.unwrap(), "accept returns None after shutdown");
        assert!(server.accept().await.is_none());
        let err = server.connect(client.local_addr().unwrap()).await.expect_err("endpoint closed");
        assert!(matches!(err, ConnectError::EndpointClosed), "{err:?}");
    })
    .await
    .expect("test timed out");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_to_an_unspecified_address_is_invalid_input() {
    timeout(TEST_TIMEOUT, async {
        let client = Endpoint::bind(localhost(), config()).await.unwrap();
        let err = client.connect("0.0.0.0:9".parse().unwrap()).await.expect_err("invalid");
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{err:?}");
    })
    .await
    .expect("test timed out");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_across_address_families_fails_at_once() {
    timeout(TEST_TIMEOUT, async {
        let client = Endpoint::bind(localhost(), config()).await.unwrap();
        let err = client.connect("[::1]:9".parse().unwrap()).await.expect_err("v4 socket, v6 peer");
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{err}");
        assert!(err.to_string().contains("IPv6"), "{err}");
    })
    .await
    .expect("test timed out");
}
