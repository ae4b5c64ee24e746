//! Request/reply sessions (spec §15): one short connection per exchange,
//! the request riding on the handshake together with the client's FIN,
//! so an exchange costs two round trips. The server here answers each
//! request with it in upper case.
//!
//! ```sh
//! cargo run -p manyfold --example request_reply -- server 127.0.0.1:7010
//! cargo run -p manyfold --example request_reply -- client 127.0.0.1:7010 status?
//! ```

use std::net::SocketAddr;

use manyfold::{Config, Endpoint};

type Error = Box<dyn std::error::Error + Send + Sync>;

/// The largest request and reply either side takes.
const LIMIT: usize = 1 << 20;

#[tokio::main]
async fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match (args.first().map(String::as_str), args.get(1)) {
        (Some("server"), Some(addr)) => {
            let endpoint = Endpoint::bind(addr.parse()?, Config::default()).await?;
            println!("serving on {}", endpoint.local_addr()?);
            server(&endpoint).await;
            Ok(())
        }
        (Some("client"), Some(addr)) => {
            let reply = client(addr.parse()?, args[2..].join(" ").as_bytes()).await?;
            println!("{}", String::from_utf8_lossy(&reply));
            Ok(())
        }
        _ => Err("usage: request_reply server ADDR | request_reply client ADDR WORDS...".into()),
    }
}

// ANCHOR: server
/// Answers sessions until the endpoint shuts down, one task per session.
/// `serve` listens by itself.
pub async fn server(endpoint: &Endpoint) {
    endpoint.serve(LIMIT, |_peer, request| async move { request.to_ascii_uppercase() }).await
}
// ANCHOR_END: server

// ANCHOR: client
/// One request to `server`, one reply.
pub async fn client(server: SocketAddr, request: &[u8]) -> Result<Vec<u8>, Error> {
    let endpoint = Endpoint::bind("0.0.0.0:0".parse()?, Config::default()).await?;
    let reply = endpoint.request(server, request, LIMIT).await?; // request + FIN ride on the handshake
    endpoint.wait_idle().await; // the client holds TIME-WAIT: a short linger
    Ok(reply)
}
// ANCHOR_END: client
