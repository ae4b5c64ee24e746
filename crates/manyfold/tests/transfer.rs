//! Data transfer over real sockets on 127.0.0.1: echo, bulk in both
//! directions with a hash check, and the same under injected faults.

mod common;

use std::time::Duration;

use common::*;
use manyfold::{Config, FaultConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::timeout;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn echo_round_trip() {
    timeout(TEST_TIMEOUT, async {
        let (server, client) = pair(config(), config()).await;
        let server_addr = server.local_addr().unwrap();
        let echo = tokio::spawn(async move {
            let conn = server.accept().await.expect("a connection");
            let (mut send, mut recv) = conn.split();
            tokio::io::copy(&mut recv, &mut send).await.expect("echo copy");
            send.close().await.expect("server close");
            server
        });

        let mut conn = client.connect(server_addr).await.expect("connect");
        assert_eq!(conn.peer_addr(), server_addr);
        conn.write_all(b"hello, manyfold").await.unwrap();
        let mut back = [0u8; 15];
        conn.read_exact(&mut back).await.unwrap();
        assert_eq!(&back, b"hello, manyfold");
        conn.close().await.expect("client close");
        let mut rest = Vec::new();
        conn.read_to_end(&mut rest).await.unwrap();
        assert!(rest.is_empty());
        let stats = conn.stats();
        assert_eq!(stats.bytes_sent, 15);
        assert_eq!(stats.bytes_received, 15);

        let server = echo.await.unwrap();
        server.shutdown().await;
        client.shutdown().await;
    })
    .await
    .expect("test timed out");
}

/// The driver is an ordinary task: a single-threaded runtime drives it too.
#[tokio::test(flavor = "current_thread")]
async fn echo_on_a_current_thread_runtime() {
    timeout(TEST_TIMEOUT, async {
        let (server, client) = pair(config(), config()).await;
        let server_addr = server.local_addr().unwrap();
        let echo = tokio::spawn(async move {
            let (mut send, mut recv) = server.accept().await.expect("a connection").split();
            tokio::io::copy(&mut recv, &mut send).await.expect("echo copy");
            send.close().await.expect("server close");
        });
        let data = payload(8, 1 << 20);
        let (mut send, recv) = client.connect(server_addr).await.expect("connect").split();
        let d = data.clone();
        let writer = tokio::spawn(async move {
            send.write_all(&d).await.unwrap();
            send.close().await.unwrap();
        });
        assert_eq!(drain(recv).await, (data.len(), blake3::hash(&data)));
        writer.await.unwrap();
        echo.await.unwrap();
    })
    .await
    .expect("test timed out");
}

/// Both sides send `len` bytes at once and check what arrives.
async fn bidirectional(
    server_config: Config,
    client_config: Config,
    len: usize,
) -> (manyfold::Endpoint, manyfold::Endpoint) {
    let (server, client) = pair(server_config, client_config).await;
    let server_addr = server.local_addr().unwrap();
    let to_client = payload(1, len);
    let to_server = payload(2, len);
    let expect_at_client = blake3::hash(&to_client);
    let expect_at_server = blake3::hash(&to_server);

    let srv = {
        let server = server.clone();
        tokio::spawn(async move {
            let (send, recv) = server.accept().await.expect("a connection").split();
            let writer = tokio::spawn(async move { pump(send, &to_client).await });
            let got = drain(recv).await;
            writer.await.unwrap();
            got
        })
    };
    let (send, recv) = client.connect(server_addr).await.expect("connect").split();
    let writer = tokio::spawn(async move { pump(send, &to_server).await });
    let at_client = drain(recv).await;
    writer.await.unwrap();
    let at_server = srv.await.unwrap();

    assert_eq!(at_client.0, len);
    assert_eq!(at_client.1, expect_at_client);
    assert_eq!(at_server.0, len);
    assert_eq!(at_server.1, expect_at_server);
    (server, client)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_megabytes_both_directions() {
    timeout(TEST_TIMEOUT, async {
        let (server, client) = bidirectional(fixed_size(), fixed_size(), 10 << 20).await;
        let ds = client.driver_stats();
        assert!(ds.datagrams_sent > 7000, "{ds:?}");
        assert!(ds.gso_sends > 0, "{ds:?}");
        assert_eq!(ds.send_errors, 0, "{ds:?}");
        server.shutdown().await;
        client.shutdown().await;
    })
    .await
    .expect("test timed out");
}

/// spec §3.7: on loopback a bulk transfer finds 64 KiB datagrams.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_megabytes_on_loopback_go_in_64_kib_datagrams() {
    timeout(TEST_TIMEOUT, async {
        let (server, client) = bidirectional(config(), config(), 10 << 20).await;
        let ds = client.driver_stats();
        assert!(ds.datagrams_sent < 1000, "10 MiB in 1,452-byte datagrams would be 7,200: {ds:?}");
        assert_eq!(ds.send_errors, 0, "{ds:?}");
        server.shutdown().await;
        client.shutdown().await;
    })
    .await
    .expect("test timed out");
}

/// Datagrams of the default 1,452 bytes, path MTU discovery off: the
/// fault tests need many datagrams to count faults on.
fn fixed_size() -> Config {
    let mut c = config();
    c.endpoint.connection.path_mtu_discovery = None;
    c
}

fn faulty(seed: u64) -> Config {
    let mut c = fixed_size();
    c.faults = FaultConfig {
        seed,
        loss: 0.05,
        recv_loss: Some(0.0),
        duplicate: 0.02,
        reorder: 0.03,
        reorder_delay: Duration::from_millis(2),
        jitter: Duration::from_micros(200),
        ..FaultConfig::default()
    };
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_megabytes_both_directions_under_loss_reorder_and_duplication() {
    timeout(TEST_TIMEOUT * 2, async {
        let (server, client) = bidirectional(faulty(11), faulty(12), 10 << 20).await;
        for (name, ep) in [("server", &server), ("client", &client)] {
            let f = ep.fault_stats();
            assert!(f.send_dropped > 100, "{name}: {f:?}");
            assert!(f.duplicated > 10, "{name}: {f:?}");
            assert!(f.reordered > 10, "{name}: {f:?}");
            assert_eq!(f.recv_dropped, 0, "{name}: {f:?}");
        }
        server.shutdown().await;
        client.shutdown().await;
    })
    .await
    .expect("test timed out");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn receive_side_loss_is_recovered() {
    timeout(TEST_TIMEOUT, async {
        let mut lossy = fixed_size();
        lossy.faults = FaultConfig { seed: 3, recv_loss: Some(0.05), ..FaultConfig::default() };
        let (server, client) = bidirectional(lossy, fixed_size(), 1 << 20).await;
        assert!(server.fault_stats().recv_dropped > 10, "{:?}", server.fault_stats());
        server.shutdown().await;
        client.shutdown().await;
    })
    .await
    .expect("test timed out");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn receive_side_duplication_reordering_and_delay_are_recovered() {
    timeout(TEST_TIMEOUT, async {
        let mut impaired = fixed_size();
        impaired.faults = FaultConfig {
            seed: 4,
            recv_loss: Some(0.02),
            recv_duplicate: 0.03,
            recv_reorder: 0.03,
            recv_delay: Duration::from_millis(1),
            recv_jitter: Duration::from_millis(1),
            ..FaultConfig::default()
        };
        let (server, client) = bidirectional(impaired, fixed_size(), 1 << 20).await;
        let f = server.fault_stats();
        assert!(f.recv_dropped > 0 && f.duplicated > 0 && f.reordered > 0 && f.delayed > 100, "{f:?}");
        assert_eq!((f.send_dropped, client.fault_stats().delayed), (0, 0), "{f:?}");
        server.shutdown().await;
        client.shutdown().await;
    })
    .await
    .expect("test timed out");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_connection_closes_it_gracefully() {
    timeout(TEST_TIMEOUT, async {
        let (server, client) = pair(config(), config()).await;
        let data = payload(5, 300_000);
        let mut conn = client.connect(server.local_addr().unwrap()).await.expect("connect");
        conn.write_all(&data).await.unwrap();
        drop(conn); // no close: the driver finishes sending, then sends FIN

        let mut incoming = server.accept().await.expect("a connection");
        let mut got = Vec::new();
        incoming.read_to_end(&mut got).await.expect("read to end of stream");
        assert_eq!(got, data);
        incoming.close().await.expect("server close");
        drop(incoming);
        server.shutdown().await;
        client.shutdown().await;
    })
    .await
    .expect("test timed out");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_connections_share_one_endpoint() {
    timeout(TEST_TIMEOUT, async {
        let (server, client) = pair(config(), config()).await;
        let server_addr = server.local_addr().unwrap();
        let srv = tokio::spawn(async move {
            let mut tasks = Vec::new();
            for _ in 0..8 {
                let conn = server.accept().await.expect("a connection");
                tasks.push(tokio::spawn(async move {
                    let (mut send, mut recv) = conn.split();
                    tokio::io::copy(&mut recv, &mut send).await.unwrap();
                    send.close().await.unwrap();
                }));
            }
            for t in tasks {
                t.await.unwrap();
            }
            server
        });
        let mut clients = Vec::new();
        for i in 0..8u64 {
            let client = client.clone();
            clients.push(tokio::spawn(async move {
                let data = payload(100 + i, 50_000);
                let (mut send, recv) = client.connect(server_addr).await.expect("connect").split();
                let d2 = data.clone();
                let w = tokio::spawn(async move {
                    send.write_all(&d2).await.unwrap();
                    send.close().await.unwrap();
                });
                let (n, h) = drain(recv).await;
                w.await.unwrap();
                assert_eq!((n, h), (data.len(), blake3::hash(&data)));
            }));
        }
        for c in clients {
            c.await.unwrap();
        }
        let server = srv.await.unwrap();
        server.shutdown().await;
        client.shutdown().await;
    })
    .await
    .expect("test timed out");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn injected_delay_shows_in_the_round_trip_time() {
    timeout(TEST_TIMEOUT, async {
        let mut slow = config();
        slow.faults = FaultConfig { delay: Duration::from_millis(30), ..FaultConfig::default() };
        let (server, client) = pair(slow.clone(), slow).await;
        let started = std::time::Instant::now();
        let mut conn = client.connect(server.local_addr().unwrap()).await.expect("connect");
        assert!(started.elapsed() >= Duration::from_millis(60), "handshake took {:?}", started.elapsed());
        let mut incoming = server.accept().await.unwrap();
        conn.write_all(&payload(4, 20_000)).await.unwrap();
        conn.close().await.unwrap();
        let mut got = Vec::new();
        incoming.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, payload(4, 20_000));
        let srtt = conn.stats().srtt;
        assert!(srtt >= Duration::from_millis(55), "srtt {srtt:?}");
        assert!(client.fault_stats().delayed > 0);
    })
    .await
    .expect("test timed out");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_closes_open_connections_gracefully() {
    timeout(TEST_TIMEOUT, async {
        let (server, client) = pair(config(), config()).await;
        let mut conn = client.connect(server.local_addr().unwrap()).await.expect("connect");
        let incoming = server.accept().await.unwrap();
        let started = std::time::Instant::now();
        // shutdown sends FIN on every connection and waits (bounded) for the
        // peers to finish too.
        let shutting = tokio::spawn(async move { server.shutdown().await });
        let mut rest = Vec::new();
        conn.read_to_end(&mut rest).await.expect("the server's FIN ends our stream");
        assert!(rest.is_empty());
        conn.close().await.expect("our FIN is acknowledged before the server stops");
        shutting.await.unwrap();
        assert!(started.elapsed() < Duration::from_secs(2), "shutdown took {:?}", started.elapsed());
        drop(incoming);
        client.shutdown().await;
    })
    .await
    .expect("test timed out");
}

/// A bulk transfer at 5% loss is not bound by RTO expiries: when the one ACK
/// of a GRO batch is lost, the tail-loss probe (RFC 8985 §7) resends after
/// ~2 SRTT instead of the 200 ms minimum RTO (before it: 2 MB took ~4 s
/// with 18 RTO expiries).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bulk_transfer_under_loss_is_not_bound_by_rto() {
    timeout(TEST_TIMEOUT, async {
        let mut lossy = config();
        lossy.faults = FaultConfig { seed: 1, loss: 0.05, recv_loss: Some(0.0), ..FaultConfig::default() };
        let (server, client) = pair(lossy.clone(), lossy).await;
        let data = payload(1, 2_000_000);
        let server_addr = server.local_addr().unwrap();
        let srv = tokio::spawn(async move {
            let (_send, recv) = server.accept().await.unwrap().split();
            drain(recv).await
        });
        let started = std::time::Instant::now();
        let mut conn = client.connect(server_addr).await.unwrap();
        conn.write_all(&data).await.unwrap();
        conn.close().await.unwrap();
        let stats = conn.stats();
        assert_eq!(srv.await.unwrap().0, data.len());
        assert!(stats.rto_expiries <= 3, "{stats:?} after {:?}", started.elapsed());
        assert!(started.elapsed() < Duration::from_millis(1500), "{stats:?} after {:?}", started.elapsed());
    })
    .await
    .expect("test timed out");
}

/// `write_chunk` hands `Bytes` over without a copy (issue 20 item 3): 8 MiB
/// written as four chunks, on stream 0 and on an opened stream, arrive
/// whole through 5% injected loss each way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bytes_written_as_chunks_arrive_whole_under_loss() {
    timeout(TEST_TIMEOUT, async {
        let lossy = || {
            let mut c = config();
            c.faults = FaultConfig { seed: 11, loss: 0.05, ..FaultConfig::default() };
            c
        };
        let (server, client) = pair(lossy(), lossy()).await;
        let server_addr = server.local_addr().unwrap();
        let data = bytes::Bytes::from(payload(5, 8 << 20));
        let expect = blake3::hash(&data);
        let srv = tokio::spawn(async move {
            let conn = server.accept().await.expect("a connection");
            let mut other = conn.accept_stream().await.expect("no error").expect("a stream");
            let mut on_other = Vec::new();
            other.read_to_end(&mut on_other).await.expect("read the opened stream");
            let (_, recv) = conn.split();
            let on_zero = drain(recv).await;
            (on_zero, blake3::hash(&on_other), server)
        });
        let mut conn = client.connect(server_addr).await.expect("connect");
        let mut other = conn.open_stream().expect("open a stream");
        for part in 0..4 {
            let piece = data.slice(part * (2 << 20)..(part + 1) * (2 << 20));
            other.write_chunk(piece).await.expect("write_chunk on the stream");
        }
        other.shutdown().await.expect("finish the stream");
        for part in 0..4 {
            conn.write_chunk(data.slice(part * (2 << 20)..(part + 1) * (2 << 20))).await.expect("write_chunk");
        }
        conn.close().await.expect("close");
        let (on_zero, on_other, server) = srv.await.unwrap();
        assert_eq!(on_zero, (data.len(), expect), "stream 0");
        assert_eq!(on_other, expect, "the opened stream");
        server.shutdown().await;
        client.shutdown().await;
    })
    .await
    .expect("test timed out");
}

/// `write_chunk_some` is the cancel-safe partial form of `write_chunk`: a
/// call that a timeout drops while the send buffer is full has taken
/// nothing (the bytes would arrive twice otherwise), and repeated calls
/// hand over the whole buffer. The server reads nothing until the client
/// has seen a write time out against its full buffer (its receive buffer
/// of 1 MiB and the client's send buffer hold a third of the data).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partial_chunk_write_dropped_while_waiting_takes_nothing_and_every_byte_arrives_once() {
    timeout(TEST_TIMEOUT, async {
        let mut small = config();
        small.endpoint.connection.recv_buffer = 1 << 20;
        let (server, client) = pair(small, config()).await;
        let server_addr = server.local_addr().unwrap();
        let data = bytes::Bytes::from(payload(9, 16 << 20));
        let expect = blake3::hash(&data);
        let (go, wait) = tokio::sync::oneshot::channel::<()>();
        let srv = tokio::spawn(async move {
            let conn = server.accept().await.expect("a connection");
            let _ = wait.await;
            let (_, recv) = conn.split();
            (drain(recv).await, server)
        });
        let mut conn = client.connect(server_addr).await.expect("connect");
        let (mut left, mut taken, mut dropped, mut go) = (data.clone(), 0, 0, Some(go));
        while !left.is_empty() {
            match timeout(Duration::from_millis(50), conn.write_chunk_some(&mut left)).await {
                Ok(written) => {
                    let n = written.expect("write_chunk_some");
                    assert!(n > 0, "a call on a non-empty buffer takes something");
                    taken += n;
                    assert_eq!(taken + left.len(), data.len(), "what was taken is what `left` lost");
                }
                Err(_) => {
                    dropped += 1;
                    if let Some(go) = go.take() {
                        let _ = go.send(());
                    }
                }
            }
        }
        assert!(dropped > 0, "no call waited long enough to be dropped: the send buffer never filled");
        conn.close().await.expect("close");
        let (got, server) = srv.await.unwrap();
        assert_eq!(got, (data.len(), expect), "every byte once, in order");
        server.shutdown().await;
        client.shutdown().await;
    })
    .await
    .expect("test timed out");
}

/// `read_chunk` hands received bytes over as `Bytes` (spec §7.2): 16 MiB
/// on stream 0 and 4 MiB on an opened stream, read as chunks of at most
/// 1 MiB, arrive whole and end with `None`; on loopback's 64 KiB datagrams
/// most of them are slices of the datagrams they came in, never copied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bytes_read_as_chunks_arrive_whole_and_mostly_uncopied() {
    chunks_on_two_streams(7, |mut conn, mut other| async move {
        let mut on_other = Vec::new();
        while let Some(chunk) = other.read_chunk(1 << 20).await.expect("read the opened stream") {
            on_other.push(chunk);
        }
        let mut on_zero = Vec::new();
        while let Some(chunk) = conn.read_chunk(1 << 20).await.expect("read stream 0") {
            on_zero.push(chunk);
        }
        (on_zero, on_other, conn.stats())
    })
    .await;
}

/// `read_chunks` takes a batch of chunks per call (spec §7.2): 16 MiB on
/// stream 0 and 4 MiB on an opened stream, read into 32 slots at a time,
/// arrive whole and end with `None`; on loopback's 64 KiB datagrams most
/// bytes are slices of the datagrams they came in, and a call takes more
/// than one chunk when more are there (the driver hands the reader a
/// receive call's worth of datagrams at once).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bytes_read_as_batches_of_chunks_arrive_whole_and_mostly_uncopied() {
    chunks_on_two_streams(8, |mut conn, mut other| async move {
        let mut bufs = vec![bytes::Bytes::new(); 32];
        let (mut on_other, mut on_zero, mut largest) = (Vec::new(), Vec::new(), 0);
        while let Some(n) = other.read_chunks(&mut bufs).await.expect("read the opened stream") {
            assert!(n > 0, "a batch holds a chunk");
            on_other.extend_from_slice(&bufs[..n]);
        }
        while let Some(n) = conn.read_chunks(&mut bufs).await.expect("read stream 0") {
            largest = largest.max(n);
            on_zero.extend_from_slice(&bufs[..n]);
        }
        assert_eq!(conn.read_chunks(&mut bufs).await.expect("after the end"), None, "the end stays the end");
        assert!(largest > 1, "no call took more than one chunk");
        (on_zero, on_other, conn.stats())
    })
    .await;
}

/// A client writes 4 MiB (payload `seed`) on an opened stream, then the
/// whole 16 MiB on stream 0, as uncopied chunks; `read` takes the server's
/// connection and that stream and returns the chunks read from stream 0,
/// from the opened stream, and the connection's stats. Both arrive whole,
/// and most bytes were kept as slices of their datagrams, not copied.
async fn chunks_on_two_streams<F, Fut>(seed: u64, read: F)
where
    F: FnOnce(manyfold::Connection, manyfold::StreamIo) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = (Vec<bytes::Bytes>, Vec<bytes::Bytes>, manyfold::ConnStats)> + Send,
{
    timeout(TEST_TIMEOUT, async {
        let (server, client) = pair(config(), config()).await;
        let server_addr = server.local_addr().unwrap();
        let data = bytes::Bytes::from(payload(seed, 16 << 20));
        let srv = tokio::spawn(async move {
            let conn = server.accept().await.expect("a connection");
            let other = conn.accept_stream().await.expect("no error").expect("a stream");
            (read(conn, other).await, server)
        });
        let mut conn = client.connect(server_addr).await.expect("connect");
        let mut other = conn.open_stream().expect("open a stream");
        other.write_chunk(data.slice(..4 << 20)).await.expect("write_chunk on the stream");
        other.shutdown().await.expect("finish the stream");
        conn.write_chunk(data.clone()).await.expect("write_chunk");
        conn.close().await.expect("close");
        let ((on_zero, on_other, stats), server) = srv.await.unwrap();
        assert_eq!(length_and_hash(&on_zero), (data.len(), blake3::hash(&data)), "stream 0");
        assert_eq!(length_and_hash(&on_other), (4 << 20, blake3::hash(&data[..4 << 20])), "the opened stream");
        assert!(stats.bytes_kept * 2 > stats.bytes_received, "{stats:?}");
        server.shutdown().await;
        client.shutdown().await;
    })
    .await
    .expect("test timed out");
}

/// The total length and hash of chunks read with `read_chunk(1 MiB)`, each
/// checked to be neither empty nor longer than asked.
fn length_and_hash(chunks: &[bytes::Bytes]) -> (usize, blake3::Hash) {
    let mut h = blake3::Hasher::new();
    for c in chunks {
        assert!(!c.is_empty() && c.len() <= 1 << 20, "{} bytes", c.len());
        h.update(c);
    }
    (chunks.iter().map(|c| c.len()).sum(), h.finalize())
}
