//! Failures known at once on real sockets (spec §4.7, §4.8, §6.7): a
//! closed port refuses a connect from ICMP, a peer whose process died is
//! found from ICMP, an abort reaches the peer with its code (and its
//! reason in words, spec §3.3.4), and
//! `wait_idle` keeps TIME-WAIT answering for a peer whose last ack was lost.

mod common;

use std::io;
use std::time::{Duration, Instant};

use common::*;
use manyfold::{CloseReason, ConnectError, Endpoint, ErrorCode, FaultConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::timeout;

/// A port on 127.0.0.1 where nothing listens (just freed).
fn closed_port() -> std::net::SocketAddr {
    std::net::UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_to_a_closed_port_is_refused_at_once_by_icmp() {
    timeout(TEST_TIMEOUT, async {
        let client = Endpoint::bind(localhost(), config()).await.unwrap();
        let started = Instant::now();
        let err = client.connect(closed_port()).await.expect_err("nothing listens there");
        let took = started.elapsed();
        assert_eq!(err, ConnectError::Refused, "{err:?}");
        assert_eq!(io::Error::from(err).kind(), io::ErrorKind::ConnectionRefused);
        // The target is 50 ms; a loaded CI machine gets some slack, the
        // old behaviour (the 2 s connect_timeout here) none.
        assert!(took < Duration::from_millis(500), "took {took:?}");
        assert_eq!(client.stats().icmp_received, 1);
        assert_eq!(client.stats().icmp_ignored, 0);
    })
    .await
    .expect("test timed out");
}

/// Runs `body` as another process would: on a runtime of its own in a
/// thread. When `body` returns, the runtime is dropped without any
/// shutdown of the endpoint, as a program's is when `main` returns.
fn process<F, T>(body: impl FnOnce() -> F + Send + 'static) -> std::thread::JoinHandle<T>
where
    F: std::future::Future<Output = T>,
    T: Send + 'static,
{
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let out = rt.block_on(body());
        rt.shutdown_background();
        out
    })
}

/// The `echo` example's server as a process of its own (built beside
/// this test by `cargo test`), and the address it serves on.
fn echo_server_process() -> (std::process::Child, std::net::SocketAddr) {
    use std::io::BufRead;
    let exe = std::env::current_exe().unwrap();
    let bin = exe.parent().and_then(|deps| deps.parent()).unwrap().join("examples").join("echo");
    assert!(bin.exists(), "{} is missing: `cargo test` builds the examples", bin.display());
    let mut child = std::process::Command::new(&bin)
        .args(["server", "127.0.0.1:0"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let addr = line.trim().strip_prefix("echoing on ").unwrap_or_else(|| panic!("echo printed {line:?}"));
    (child, addr.parse().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sender_learns_at_once_that_its_receiver_was_killed() {
    timeout(TEST_TIMEOUT, async {
        let (mut receiver, addr) = echo_server_process();
        let client = Endpoint::bind(localhost(), config()).await.unwrap();
        let mut conn = client.connect(addr).await.unwrap();
        conn.write_all(&payload(1, 100_000)).await.unwrap();
        let mut echoed = vec![0u8; 100_000];
        conn.read_exact(&mut echoed).await.unwrap();
        assert_eq!(echoed, payload(1, 100_000));
        // SIGKILL: nothing more is sent, the socket closes with the process.
        receiver.kill().unwrap();
        receiver.wait().unwrap();
        let started = Instant::now();
        let data = payload(2, 1 << 20);
        let err = loop {
            match timeout(Duration::from_secs(20), conn.write_all(&data)).await.expect("write must fail, not hang") {
                Ok(()) => continue,
                Err(e) => break e,
            }
        };
        let took = started.elapsed();
        let reason = manyfold::close_reason(&err);
        assert!(matches!(reason, Some(CloseReason::Unreachable(_))), "{err:?} after {took:?}");
        assert!(took < Duration::from_secs(1), "took {took:?}");
        assert!(err.to_string().contains("port unreachable"), "{err}");
    })
    .await
    .expect("test timed out");
}

/// spec §8.3: a program that returns from `main` (an error, say) with a
/// connection open drops its runtime, and the endpoint's driver resets
/// the peer on its way out: a reader waiting for data hears of it at
/// once, not from its keep-alive half a minute later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_program_that_exits_with_a_connection_open_resets_its_peer_at_once() {
    timeout(TEST_TIMEOUT, async {
        let (server, _) = pair(config(), config()).await;
        let addr = server.local_addr().unwrap();
        let (fail_tx, fail_rx) = tokio::sync::oneshot::channel::<()>();
        let program = process(move || async move {
            let client = Endpoint::bind(localhost(), config()).await.unwrap();
            let mut conn = client.connect(addr).await.unwrap();
            conn.write_all(b"hello").await.unwrap();
            // `main` fails here, with the connection open: no close.
            fail_rx.await.unwrap();
            (client, conn)
        });
        let mut accepted = server.accept().await.unwrap();
        let mut hello = [0u8; 5];
        accepted.read_exact(&mut hello).await.unwrap();
        let started = Instant::now();
        fail_tx.send(()).unwrap();
        let mut buf = [0u8; 16];
        let err = timeout(Duration::from_secs(20), accepted.read(&mut buf))
            .await
            .expect("the read must fail, not wait for the keep-alive")
            .expect_err("the peer's program exited");
        let took = started.elapsed();
        assert_eq!(manyfold::close_reason(&err), Some(CloseReason::PeerReset(Some(ErrorCode::APPLICATION))), "{err:?}");
        assert!(took < Duration::from_secs(1), "took {took:?}");
        // The program's handles outlived its runtime: dropping them now is harmless.
        drop(tokio::task::spawn_blocking(move || program.join().unwrap()).await.unwrap());
    })
    .await
    .expect("test timed out");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abort_reaches_the_peer_with_its_code() {
    timeout(TEST_TIMEOUT, async {
        let (server, client) = pair(config(), config()).await;
        let conn = client.connect(server.local_addr().unwrap()).await.unwrap();
        let mut accepted = server.accept().await.unwrap();
        let started = Instant::now();
        client.abort_all(ErrorCode::INTERRUPTED).await;
        let mut buf = [0u8; 16];
        let err = accepted.read(&mut buf).await.expect_err("the peer aborted");
        assert_eq!(manyfold::close_reason(&err), Some(CloseReason::PeerReset(Some(ErrorCode::INTERRUPTED))), "{err:?}");
        assert_eq!(err.to_string(), "the peer was interrupted");
        assert!(started.elapsed() < Duration::from_secs(1));
        drop(conn);
    })
    .await
    .expect("test timed out");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_abort_names_its_code_to_the_peer() {
    timeout(TEST_TIMEOUT, async {
        let (server, client) = pair(config(), config()).await;
        let conn = client.connect(server.local_addr().unwrap()).await.unwrap();
        let mut accepted = server.accept().await.unwrap();
        conn.abort(ErrorCode(77));
        let mut buf = [0u8; 16];
        let err = accepted.read(&mut buf).await.expect_err("the peer aborted");
        assert_eq!(manyfold::close_reason(&err), Some(CloseReason::PeerReset(Some(ErrorCode(77)))));
    })
    .await
    .expect("test timed out");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abort_with_a_reason_gives_the_peer_its_words_in_reads_writes_and_streams() {
    timeout(TEST_TIMEOUT, async {
        let (server, client) = pair(config(), config()).await;
        let conn = client.connect(server.local_addr().unwrap()).await.unwrap();
        let mut accepted = server.accept().await.unwrap();
        conn.abort_with(ErrorCode(300), "disk full on /srv");
        let mut buf = [0u8; 16];
        let err = accepted.read(&mut buf).await.expect_err("the peer aborted");
        assert_eq!(manyfold::close_reason(&err), Some(CloseReason::PeerReset(Some(ErrorCode(300)))));
        assert_eq!(manyfold::peer_close_text(&err), Some("disk full on /srv"), "{err:?}");
        assert_eq!(err.to_string(), r#"reset by peer (error code 300): "disk full on /srv""#);
        let werr = accepted.write_all(b"x").await.expect_err("closed");
        assert_eq!(manyfold::peer_close_text(&werr), Some("disk full on /srv"), "{werr:?}");
        let serr = accepted.accept_stream().await.expect_err("closed");
        assert!(
            matches!(&serr, manyfold::ConnectionError::ClosedByPeer(p) if &*p.text == "disk full on /srv"),
            "{serr:?}"
        );
        // Our own end knows only its code.
        let mut conn = conn;
        let ours = conn.read(&mut buf).await.expect_err("we aborted");
        assert_eq!(manyfold::close_reason(&ours), Some(CloseReason::Aborted(ErrorCode(300))));
        assert_eq!(manyfold::peer_close_text(&ours), None);
    })
    .await
    .expect("test timed out");
}

/// The active closer's process exits right after `wait_idle`, at 30%
/// loss each way: its final ack is often lost. The passive closer, in
/// LAST-ACK, must be done within 2 s of that exit: answered by the
/// lingering TIME-WAIT, or told by ICMP that the socket is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_peer_is_stranded_when_a_process_exits_after_wait_idle() {
    let lossy = |seed| {
        let mut c = config();
        c.faults = FaultConfig { send_loss: Some(0.3), seed, ..FaultConfig::default() };
        c.endpoint.connection.connect_timeout = Duration::from_secs(20);
        c
    };
    timeout(Duration::from_secs(150), async {
        for run in 0..8u64 {
            let (server, _) = pair(lossy(1000 + run), config()).await;
            let addr = server.local_addr().unwrap();
            let client_cfg = lossy(2000 + run);
            let closer = process(move || async move {
                let client = Endpoint::bind(localhost(), client_cfg).await.unwrap();
                let mut conn = client.connect(addr).await.unwrap();
                conn.write_all(&payload(run, 20_000)).await.unwrap();
                conn.close().await.unwrap();
                let mut rest = Vec::new();
                conn.read_to_end(&mut rest).await.unwrap();
                let started = Instant::now();
                client.wait_idle().await;
                started.elapsed()
            });
            let mut accepted = timeout(Duration::from_secs(25), server.accept()).await.expect("accept").unwrap();
            let mut got = Vec::new();
            accepted.read_to_end(&mut got).await.unwrap();
            assert_eq!(got.len(), 20_000);
            let closing = tokio::spawn(async move { accepted.close().await });
            let idled = tokio::task::spawn_blocking(move || closer.join().unwrap()).await.unwrap();
            assert!(idled < Duration::from_secs(3), "run {run}: wait_idle took {idled:?}");
            let exited = Instant::now();
            let closed = timeout(Duration::from_secs(10), closing).await.expect("LAST-ACK must end").unwrap();
            let waited = exited.elapsed();
            assert!(closed.is_ok(), "run {run}: {closed:?}");
            assert!(waited < Duration::from_secs(2), "run {run}: the peer waited {waited:?} after the process exited");
        }
    })
    .await
    .expect("test timed out");
}

/// spec §6.2: a client's cookie echo waits up to `echo_delay` for the
/// first write, so that the request rides on it. A client that reads
/// first (its server speaks first) ends the wait: here, with the wait
/// set to 5 s, the server hears of the connection and its greeting
/// arrives well before; a client that neither reads nor writes keeps the
/// server waiting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_reads_first_is_heard_by_its_server_at_once() {
    timeout(TEST_TIMEOUT, async {
        let mut client_cfg = config();
        client_cfg.endpoint.connection.echo_delay = Duration::from_secs(5);
        let (server, client) = pair(config(), client_cfg).await;
        let addr = server.local_addr().unwrap();
        let started = Instant::now();
        let greeter = tokio::spawn(async move {
            let mut conn = server.accept().await.expect("accepted");
            conn.write_all(b"220 ready\r\n").await.unwrap();
            (server, conn)
        });
        let mut conn = client.connect(addr).await.unwrap();
        let mut buf = [0u8; 11];
        conn.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"220 ready\r\n");
        let took = started.elapsed();
        assert!(took < Duration::from_secs(2), "the greeting took {took:?} (the echo's wait is 5 s)");
        let (server, _greeted) = greeter.await.unwrap();
        // A client that does neither: its server does not hear of it yet.
        let _idle = client.connect(addr).await.unwrap();
        assert!(timeout(Duration::from_millis(500), server.accept()).await.is_err(), "the echo still waits");
    })
    .await
    .expect("test timed out");
}
