//! Streams with messages: one connection carrying several independent
//! streams of whole messages. The client sends orders on stream 1
//! (reliable, in order) and positions on stream 2 (unordered, dropped if
//! older than 200 ms); the server counts what it got on each and answers
//! on stream 3. A loss on one stream does not delay the others.
//!
//! ```sh
//! cargo run -p manyfold --example streams -- server 127.0.0.1:7012
//! cargo run -p manyfold --example streams -- client 127.0.0.1:7012
//! ```

use std::net::SocketAddr;
use std::time::Duration;

use manyfold::{Config, Endpoint, MessageOptions, StreamItem};

type Error = Box<dyn std::error::Error + Send + Sync>;

const ORDERS: u16 = 1;
const POSITIONS: u16 = 2;
const SUMMARY: u16 = 3;

#[tokio::main]
async fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match (args.first().map(String::as_str), args.get(1)) {
        (Some("server"), Some(addr)) => {
            let endpoint = Endpoint::bind(addr.parse()?, Config::default()).await?;
            println!("serving on {}", endpoint.local_addr()?);
            loop {
                server(&endpoint).await?;
            }
        }
        (Some("client"), Some(addr)) => {
            println!("{}", client(addr.parse()?, 10).await?);
            Ok(())
        }
        _ => Err("usage: streams server ADDR | streams client ADDR".into()),
    }
}

// ANCHOR: client
/// Sends `count` orders and `count` positions to `server`; returns its summary.
pub async fn client(server: SocketAddr, count: usize) -> Result<String, Error> {
    let endpoint = Endpoint::bind("0.0.0.0:0".parse()?, Config::default()).await?;
    let mut conn = endpoint.connect(server).await?;
    let streams = conn.streams(); // cloneable, for any number of tasks
    let late = MessageOptions { unordered: true, lifetime: Some(Duration::from_millis(200)), ..Default::default() };
    for i in 0..count {
        streams.send_message(ORDERS, format!("order {i}")).await?; // whole, reliable, in order
        streams.send_message_with(POSITIONS, format!("position {i},{i}"), late).await?;
    }
    streams.finish_stream(ORDERS)?; // the server reads StreamItem::Finished after the last one
    streams.finish_stream(POSITIONS)?;
    let summary = match streams.recv_message_on(SUMMARY).await? {
        Some(StreamItem::Message(m)) => String::from_utf8(m.into())?, // Bytes into Vec: no copy
        other => return Err(format!("no summary: {other:?}").into()),
    };
    conn.close().await?;
    endpoint.wait_idle().await;
    Ok(summary)
}
// ANCHOR_END: client

// ANCHOR: server
/// Serves one connection: reads messages from every stream until the
/// client has finished both, then answers with what arrived.
pub async fn server(endpoint: &Endpoint) -> Result<(), Error> {
    endpoint.listen();
    let mut conn = endpoint.accept().await.ok_or("the endpoint is closed")?;
    let streams = conn.streams();
    let (mut orders, mut positions, mut finished) = (0, 0, 0);
    while finished < 2 {
        match streams.recv_message().await? {
            Some((ORDERS, StreamItem::Message(_))) => orders += 1,
            Some((POSITIONS, StreamItem::Message(_))) => positions += 1,
            // A position given up by its sender (too late): nothing to read.
            Some((_, StreamItem::Abandoned)) => {}
            Some((_, StreamItem::Finished)) => finished += 1,
            Some((stream, other)) => return Err(format!("stream {stream}: unexpected {other:?}").into()),
            None => return Err("the client closed early".into()),
        }
    }
    let summary = format!("{orders} orders, {positions} positions");
    streams.send_message(SUMMARY, summary).await?;
    streams.finish_stream(SUMMARY)?;
    conn.close().await?; // returns once the client has the summary and our FIN
    endpoint.wait_idle().await;
    Ok(())
}
// ANCHOR_END: server
