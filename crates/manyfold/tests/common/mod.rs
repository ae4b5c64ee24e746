//! Helpers shared by the integration tests: configs with short timeouts,
//! deterministic payloads, and pumps that write or hash a stream.
#![allow(dead_code)]

pub mod netns;

use std::net::SocketAddr;
use std::time::Duration;

use manyfold::{Config, Endpoint, RecvHalf, SendHalf};
use rand::{RngCore, SeedableRng};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Every test finishes within this, or fails.
pub const TEST_TIMEOUT: Duration = Duration::from_secs(60);

pub fn localhost() -> SocketAddr {
    "127.0.0.1:0".parse().expect("literal address")
}

/// Default settings with timeouts short enough for tests.
pub fn config() -> Config {
    let mut c = Config::default();
    c.endpoint.connection.connect_timeout = Duration::from_secs(2);
    c.endpoint.seed = 0;
    c
}

pub async fn pair(server_config: Config, client_config: Config) -> (Endpoint, Endpoint) {
    let server = Endpoint::bind(localhost(), server_config).await.expect("bind server");
    server.listen();
    let client = Endpoint::bind(localhost(), client_config).await.expect("bind client");
    (server, client)
}

/// `len` deterministic pseudo-random bytes.
pub fn payload(seed: u64, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    rand_chacha::ChaCha8Rng::seed_from_u64(seed).fill_bytes(&mut v);
    v
}

/// Writes `data` in uneven chunks, then closes gracefully.
pub async fn pump(mut send: SendHalf, data: &[u8]) {
    let mut off = 0;
    let mut chunk = 1000;
    while off < data.len() {
        let end = (off + chunk).min(data.len());
        send.write_all(&data[off..end]).await.expect("write");
        off = end;
        chunk = chunk * 7 % 65_536 + 1;
    }
    send.close().await.expect("close: everything acknowledged");
}

/// Reads to the end of stream, hashing.
pub async fn drain(mut recv: RecvHalf) -> (usize, blake3::Hash) {
    let mut hasher = blake3::Hasher::new();
    let mut buf = vec![0u8; 64 * 1024];
    let mut total = 0;
    loop {
        let n = recv.read(&mut buf).await.expect("read");
        if n == 0 {
            return (total, hasher.finalize());
        }
        hasher.update(&buf[..n]);
        total += n;
    }
}

/// The reply the request/reply tests' servers give: the request reversed.
pub fn reverse(req: &[u8]) -> Vec<u8> {
    req.iter().rev().copied().collect()
}

/// Sends `n` requests to `addr` at once, request `i` being `payload(i,
/// size(i))` from `clients[i % clients.len()]`, and checks each reply is
/// the request reversed. Returns the failures, each naming its client.
pub async fn request_many(
    clients: &[std::sync::Arc<Endpoint>],
    addr: SocketAddr,
    n: u64,
    size: impl Fn(u64) -> usize,
) -> Vec<String> {
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..n {
        let client = clients[(i % clients.len() as u64) as usize].clone();
        let req = payload(i, size(i));
        tasks.spawn(async move {
            let reply = client.request(addr, &req, 4096).await.map_err(|e| format!("client {i}: {e}"))?;
            if reply != reverse(&req) {
                return Err(format!("client {i}: wrong reply"));
            }
            Ok::<_, String>(())
        });
    }
    let mut failures = Vec::new();
    while let Some(r) = tasks.join_next().await {
        if let Err(e) = r.expect("a request task") {
            failures.push(e);
        }
    }
    failures
}
