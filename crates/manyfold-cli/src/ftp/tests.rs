//! The server and the client in one process on 127.0.0.1 (spec §17), for
//! what the end-to-end tests (tests/ftp.rs) cannot reach: the control
//! protocol spoken directly, and what a long session holds on to.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use manyfold::StreamItem;

use super::client::Client;
use super::root::Root;
use super::server::{serve, Service};
use super::wire::{Code, Reply, Request, CONTROL_STREAM, HASH_LEN, VERSION};
use crate::net::{self, Config};

/// Every wait in these tests is bounded by this.
const LIMIT: Duration = Duration::from_secs(60);

fn config(max_streams: usize) -> Config {
    let mut c = Config::default();
    c.endpoint.connection.max_streams = max_streams;
    c
}

/// A server on 127.0.0.1 serving `root`; it ends with the test's runtime.
async fn start(root: &Path, config: Config) -> SocketAddr {
    let service = Arc::new(Service::new(Root::open(root, false, u64::MAX).unwrap()));
    let endpoint = Arc::new(net::bind("127.0.0.1:0".parse().unwrap(), config).await.unwrap());
    endpoint.listen();
    let addr = endpoint.local_addr().unwrap();
    tokio::spawn(async move {
        while let Some(conn) = endpoint.accept().await {
            let service = Arc::clone(&service);
            tokio::spawn(async move { serve(conn, &service, None).await });
        }
    });
    addr
}

/// `len` bytes that differ from one offset to the next.
fn sample(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed).wrapping_add((i >> 13) as u8)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_session_of_finished_and_broken_off_transfers_does_not_use_up_its_streams() {
    // Both sides hold at most 16 streams: the session below runs 96
    // transfers through one connection, half of them broken off once the
    // server has started, so each must leave its stream forgotten.
    let tmp = tempfile::tempdir().unwrap();
    let (root, local) = (tmp.path().join("root"), tmp.path().join("local"));
    std::fs::create_dir(&root).unwrap();
    std::fs::create_dir(&local).unwrap();
    let big = sample(4 << 20, 1);
    std::fs::write(root.join("small"), sample(1000, 2)).unwrap();
    std::fs::write(root.join("big"), &big).unwrap();
    std::fs::write(local.join("up"), sample(1000, 3)).unwrap();
    std::fs::write(local.join("bigup"), sample(4 << 20, 4)).unwrap();
    let addr = start(&root, config(16)).await;
    let client = Client::connect(addr, None, config(16)).await.unwrap();
    let quiet = |_: u64, _: u64| {};

    let session = async {
        for round in 0..24 {
            client.get("small", &local.join("small"), true, &quiet).await.unwrap();
            client.put(&local.join("up"), "up", true, &quiet).await.unwrap();
            // Broken off (as Ctrl-C does) once the server has said go.
            let started = tokio::sync::Notify::new();
            let go = |_: u64, _: u64| started.notify_one();
            let dst = local.join("big");
            tokio::select! {
                r = client.get("big", &dst, true, &go) => { r.unwrap(); }
                _ = started.notified() => {}
            }
            let started = tokio::sync::Notify::new();
            let go = |_: u64, _: u64| started.notify_one();
            let src = local.join("bigup");
            tokio::select! {
                r = client.put(&src, "bigup", true, &go) => { r.unwrap(); }
                _ = started.notified() => {}
            }
            // The server's end of the broken-off put lets go of its partial file.
            if round % 8 == 7 {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        // And the connection still carries whole transfers.
        let _ = std::fs::remove_file(local.join("big"));
        client.get("big", &local.join("big"), true, &quiet).await.unwrap();
        client.put(&local.join("bigup"), "bigup", true, &quiet).await.unwrap();
    };
    tokio::time::timeout(LIMIT, session).await.expect("the session did not finish in time");
    assert!(std::fs::read(local.join("big")).unwrap() == big);
    assert!(std::fs::read(root.join("bigup")).unwrap() == std::fs::read(local.join("bigup")).unwrap());
    client.close().await;
}

/// A raw control-stream session: requests in, replies out, by id.
struct Raw {
    _endpoint: manyfold::Endpoint,
    streams: manyfold::Streams,
    _conn: manyfold::Connection,
}

impl Raw {
    async fn connect(addr: SocketAddr) -> Raw {
        // Each stream's credit is 1 MiB: a larger download nobody reads
        // stays on its stream (with the default 16 MiB it could be sent
        // whole, and its stream freed, before the next request comes).
        let mut config = Config::default();
        config.endpoint.connection.max_message = 1 << 20;
        config.endpoint.connection.stream_window = 1 << 20;
        let (endpoint, conn) = net::connect(addr, config).await.unwrap();
        let raw = Raw { streams: conn.streams(), _endpoint: endpoint, _conn: conn };
        let welcome = raw.ask(0, Request::Hello { version: VERSION, token: Vec::new() }).await;
        assert!(matches!(welcome, Reply::Welcome { .. }), "{welcome:?}");
        raw
    }

    async fn ask(&self, id: u32, req: Request) -> Reply {
        self.streams.send_message(CONTROL_STREAM, &req.encode(id)).await.unwrap();
        self.reply(id).await
    }

    async fn reply(&self, id: u32) -> Reply {
        let got = tokio::time::timeout(LIMIT, self.streams.recv_message_on(CONTROL_STREAM)).await;
        let Ok(Ok(Some(StreamItem::Message(m)))) = got else { panic!("no reply to request {id}: {got:?}") };
        let (got_id, reply) = Reply::parse(&m).unwrap();
        assert_eq!(got_id, id, "{reply:?}");
        reply
    }
}

fn refused(reply: &Reply) -> Code {
    match reply {
        Reply::Error(f) => f.code,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transfer_on_stream_0_the_control_stream_or_a_busy_stream_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("big"), sample(4 << 20, 5)).unwrap();
    let addr = start(tmp.path(), Config::default()).await;
    let raw = Raw::connect(addr).await;
    let get = |stream| Request::Get { path: "big".into(), stream, offset: 0, prefix: [0; HASH_LEN] };
    let put = |stream| Request::Put { path: "new".into(), stream, size: 10, mtime: 0, force: false };
    assert_eq!(refused(&raw.ask(1, get(0)).await), Code::BadRequest);
    assert_eq!(refused(&raw.ask(2, get(CONTROL_STREAM)).await), Code::BadRequest);
    assert_eq!(refused(&raw.ask(3, put(CONTROL_STREAM)).await), Code::BadRequest);
    // A 4 MiB download nobody reads stays on its stream (its 1 MiB credit
    // runs out): the stream is busy until it ends.
    assert!(matches!(raw.ask(4, get(7)).await, Reply::GetStart { .. }));
    assert_eq!(refused(&raw.ask(5, get(7)).await), Code::BadRequest);
    assert_eq!(refused(&raw.ask(6, put(7)).await), Code::BadRequest);
    assert!(!tmp.path().join(".new.manyfold-partial").exists());
    // Another stream is free.
    assert!(matches!(raw.ask(7, get(8)).await, Reply::GetStart { .. }));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_malformed_reply_every_request_fails_at_once_instead_of_waiting() {
    // A fake server: a proper welcome, then a reply no parser accepts, and
    // the connection left open.
    let endpoint = Arc::new(net::bind("127.0.0.1:0".parse().unwrap(), Config::default()).await.unwrap());
    endpoint.listen();
    let addr = endpoint.local_addr().unwrap();
    let server = {
        let endpoint = Arc::clone(&endpoint);
        tokio::spawn(async move {
            let conn = endpoint.accept().await.expect("a client");
            let streams = conn.streams();
            let Ok(Some(StreamItem::Message(m))) = streams.recv_message_on(CONTROL_STREAM).await else { return };
            let (id, _) = Request::parse(&m).expect("hello");
            let welcome = Reply::Welcome { version: VERSION, read_only: false, max_file: u64::MAX }.encode(id);
            streams.send_message(CONTROL_STREAM, &welcome).await.unwrap();
            streams.send_message(CONTROL_STREAM, b"?garbage").await.unwrap();
            tokio::time::sleep(LIMIT).await;
            drop(conn);
        })
    };
    let client = Client::connect(addr, None, Config::default()).await.unwrap();
    // The reader gives up on the garbage; a request made afterwards must
    // learn that, not wait for a reply nobody will route.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let r = tokio::time::timeout(Duration::from_secs(5), client.stat("x")).await;
        let err = r.expect("a request after the reader stopped must not hang").unwrap_err();
        if err.to_string().contains("malformed") {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{err:#}");
    }
    server.abort();
}
