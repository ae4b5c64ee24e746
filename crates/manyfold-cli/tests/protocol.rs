//! `manyfold recv` against senders that misbehave, played by this test
//! through the manyfold library with hand-built protocol messages: a wrong
//! hash, a sender that stops half-way, a receiver interrupted mid-transfer.
//! In every case nothing is left in the directory, under the final name or
//! a temporary one.

mod common;

use std::path::Path;
use std::time::Duration;

use common::{entries, manyfold, Running};
use manyfold::{Config, Connection, Endpoint};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const LIMIT: Duration = Duration::from_secs(60);

/// The request header of the transfer protocol (see the CLI's transfer module).
fn request(name: &str, size: u64) -> Vec<u8> {
    let mut b = b"MFXF\x01".to_vec();
    b.extend_from_slice(&(name.len() as u16).to_be_bytes());
    b.extend_from_slice(&size.to_be_bytes());
    b.extend_from_slice(name.as_bytes());
    b
}

/// Reads one status reply: (ok, text).
async fn reply(conn: &mut Connection) -> (bool, String) {
    let mut head = [0u8; 3];
    conn.read_exact(&mut head).await.expect("reply header");
    let mut text = vec![0u8; usize::from(u16::from_be_bytes([head[1], head[2]]))];
    conn.read_exact(&mut text).await.expect("reply text");
    (head[0] == 0, String::from_utf8(text).expect("utf-8 reply"))
}

fn recv_once(dir: &Path) -> (Running, std::net::SocketAddr) {
    let mut cmd = manyfold();
    cmd.args(["recv", "--listen", "127.0.0.1:0", "--once", "--dir"]).arg(dir);
    let mut recv = Running::spawn(cmd);
    let addr = recv.listening_addr();
    (recv, addr)
}

async fn connect(addr: std::net::SocketAddr) -> (Endpoint, Connection) {
    let endpoint = Endpoint::bind("127.0.0.1:0".parse().unwrap(), Config::default()).await.unwrap();
    let conn = endpoint.connect(addr).await.expect("connect to manyfold recv");
    (endpoint, conn)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_hash_is_refused_and_nothing_is_saved() {
    let tmp = tempfile::tempdir().unwrap();
    let (recv, addr) = recv_once(tmp.path());
    tokio::time::timeout(LIMIT, async {
        let (_endpoint, mut conn) = connect(addr).await;
        let data = vec![7u8; 100_000];
        conn.write_all(&request("data.bin", data.len() as u64)).await.unwrap();
        assert_eq!(reply(&mut conn).await, (true, "go ahead".to_string()));
        conn.write_all(&data).await.unwrap();
        conn.write_all(blake3::hash(b"something else").as_bytes()).await.unwrap();
        let (ok, text) = reply(&mut conn).await;
        assert!(!ok && text.contains("hash mismatch"), "{text}");
        let _ = conn.close().await;
    })
    .await
    .expect("test timed out");
    let out = recv.wait(LIMIT);
    out.assert_failure();
    assert!(out.stderr.contains("hash mismatch"), "{out}");
    assert!(entries(tmp.path()).is_empty(), "left behind: {:?}", entries(tmp.path()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sender_stopping_half_way_leaves_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let (recv, addr) = recv_once(tmp.path());
    tokio::time::timeout(LIMIT, async {
        let (_endpoint, mut conn) = connect(addr).await;
        conn.write_all(&request("half.bin", 1_000_000)).await.unwrap();
        assert!(reply(&mut conn).await.0);
        conn.write_all(&[1u8; 400_000]).await.unwrap();
        conn.close().await.unwrap(); // FIN after 400 kB of 1 MB
    })
    .await
    .expect("test timed out");
    let out = recv.wait(LIMIT);
    out.assert_failure();
    assert!(out.stderr.contains("after 400000 of 1000000 bytes"), "{out}");
    assert!(entries(tmp.path()).is_empty(), "left behind: {:?}", entries(tmp.path()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interrupted_receiver_deletes_its_partial_file() {
    for signal in ["-INT", "-TERM"] {
        interrupt_receiver_mid_transfer(signal).await;
    }
}

async fn interrupt_receiver_mid_transfer(signal: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let mut cmd = manyfold();
    cmd.args(["recv", "--listen", "127.0.0.1:0", "--dir"]).arg(tmp.path());
    let mut recv = Running::spawn(cmd);
    let addr = recv.listening_addr();
    let pid = recv.id();
    // The connection outlives the signal: dropped earlier, it would close
    // gracefully and the receiver could see "sender closed" before the signal.
    let _held = tokio::time::timeout(LIMIT, async {
        let (endpoint, mut conn) = connect(addr).await;
        conn.write_all(&request("big.bin", 10_000_000)).await.unwrap();
        assert!(reply(&mut conn).await.0);
        conn.write_all(&[1u8; 300_000]).await.unwrap();
        // Wait until the receiver holds a partial file, then interrupt it.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        while !entries(tmp.path()).iter().any(|n| n.starts_with(".big.bin.manyfold-part-")) {
            assert!(tokio::time::Instant::now() < deadline, "no partial file appeared");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let status = std::process::Command::new("kill").args([signal, &pid.to_string()]).status().unwrap();
        assert!(status.success());
        (endpoint, conn)
    })
    .await
    .expect("test timed out");
    let out = recv.wait(LIMIT);
    out.assert_failure();
    assert!(out.stderr.contains("interrupted"), "{out}");
    assert!(entries(tmp.path()).is_empty(), "left behind: {:?}", entries(tmp.path()));
}
