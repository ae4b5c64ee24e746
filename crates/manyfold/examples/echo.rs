//! An echo server and client (RFC 862's service over manyfold): the server
//! sends back every byte it reads on each connection until the client's
//! FIN; the client sends its words and prints what came back.
//!
//! ```sh
//! cargo run -p manyfold --example echo -- server 127.0.0.1:7007
//! cargo run -p manyfold --example echo -- client 127.0.0.1:7007 hello world
//! ```

use std::net::SocketAddr;

use manyfold::{Config, Endpoint};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

type Error = Box<dyn std::error::Error + Send + Sync>;

#[tokio::main]
async fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match (args.first().map(String::as_str), args.get(1)) {
        (Some("server"), Some(addr)) => {
            let endpoint = Endpoint::bind(addr.parse()?, Config::default()).await?;
            println!("echoing on {}", endpoint.local_addr()?);
            server(endpoint, usize::MAX).await
        }
        (Some("client"), Some(addr)) => {
            let reply = client(addr.parse()?, args[2..].join(" ").as_bytes()).await?;
            println!("{}", String::from_utf8_lossy(&reply));
            Ok(())
        }
        _ => Err("usage: echo server ADDR | echo client ADDR WORDS...".into()),
    }
}

// ANCHOR: server
/// Serves `count` connections, each in a task of its own, then waits
/// until every one of them has finished with its peer.
pub async fn server(endpoint: Endpoint, count: usize) -> Result<(), Error> {
    endpoint.listen();
    for _ in 0..count {
        let Some(conn) = endpoint.accept().await else { break };
        tokio::spawn(async move {
            let (mut send, mut recv) = conn.split();
            // Every byte back until the client's FIN, then our own FIN.
            if tokio::io::copy(&mut recv, &mut send).await.is_ok() {
                send.close().await.ok();
            }
        });
    }
    endpoint.wait_idle().await;
    Ok(())
}
// ANCHOR_END: server

// ANCHOR: client
/// Sends `message` to the echo server at `server` and returns what it
/// sent back. Writes and reads at once, so a message larger than the
/// windows cannot stall either side.
pub async fn client(server: SocketAddr, message: &[u8]) -> Result<Vec<u8>, Error> {
    let endpoint = Endpoint::bind("0.0.0.0:0".parse()?, Config::default()).await?;
    let (mut send, mut recv) = endpoint.connect(server).await?.split();
    let message = message.to_vec();
    let writer = tokio::spawn(async move {
        send.write_all(&message).await?;
        send.close().await?; // our FIN; returns once the server has it all
        std::io::Result::Ok(())
    });
    let mut reply = Vec::new();
    recv.read_to_end(&mut reply).await?; // to the server's FIN
    writer.await??;
    endpoint.wait_idle().await; // TIME-WAIT's short linger, then nothing is left
    Ok(reply)
}
// ANCHOR_END: client
