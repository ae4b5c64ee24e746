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
