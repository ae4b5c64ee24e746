//! A group fan-out: one sender, many receivers over unicast, and a
//! receiver that joins while the group runs. Every message is held once
//! in memory however many receivers there are; the late joiner receives
//! every message from its join point on.
//!
//! ```sh
//! cargo run -p manyfold --example group -- recv 127.0.0.1:7011     # in three terminals,
//! cargo run -p manyfold --example group -- recv 127.0.0.1:7012     # one per receiver
//! cargo run -p manyfold --example group -- recv 127.0.0.1:7013
//! cargo run -p manyfold --example group -- send 127.0.0.1:7011,127.0.0.1:7012 127.0.0.1:7013
//! ```

use std::net::SocketAddr;

use manyfold::{Bytes, Config, Endpoint, GroupConfig, GroupEvent, Mode, StreamItem};

type Error = Box<dyn std::error::Error + Send + Sync>;

/// Messages sent before the late receiver joins, and as many after.
pub const MESSAGES: u64 = 20;

#[tokio::main]
async fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["recv", addr] => {
            let endpoint = Endpoint::bind(addr.parse()?, Config::default()).await?;
            println!("receiving on {}", endpoint.local_addr()?);
            for m in receive(&endpoint).await? {
                println!("{}", String::from_utf8_lossy(&m));
            }
            Ok(())
        }
        ["send", first, late] => {
            let first: Vec<SocketAddr> = first.split(',').map(str::parse).collect::<Result<_, _>>()?;
            let joined_at = fan_out(&first, late.parse()?).await?;
            println!("{late} joined at message {joined_at}");
            Ok(())
        }
        _ => Err("usage: group recv ADDR | group send ADDR[,ADDR...] LATE_ADDR".into()),
    }
}

// ANCHOR: send
/// Opens a group to `receivers`, sends [`MESSAGES`] messages, adds `late`
/// and sends as many again, then closes once every receiver has all it
/// was sent. Returns the first message the late receiver got.
pub async fn fan_out(receivers: &[SocketAddr], late: SocketAddr) -> Result<u64, Error> {
    let endpoint = Endpoint::bind("0.0.0.0:0".parse()?, Config::default()).await?;
    let config = GroupConfig { mode: Mode::All, ..Default::default() }; // or Any, AtLeast(p), Subset { k, p }
    let (group, unreachable) = endpoint.group(receivers, config).await?; // all handshakes at once
    for (addr, why) in unreachable {
        eprintln!("warning: {addr} is not in the group: {why}");
    }
    for i in 0..MESSAGES {
        group.send(Bytes::from(format!("message {i}"))).await?; // held once, sent to each
    }
    // Waits for its handshake; it receives every message sent from now on.
    let joined = group.join(late).await?;
    for i in MESSAGES..2 * MESSAGES {
        group.send(Bytes::from(format!("message {i}"))).await?;
    }
    while let Some(event) = group.try_event() {
        if let GroupEvent::PeerJoined { addr, first_msg, .. } = event {
            eprintln!("{addr} joined at message {first_msg}");
        }
    }
    group.close().await?; // every receiver has everything, or is gone
    endpoint.wait_idle().await;
    Ok(joined.first_msg)
}
// ANCHOR_END: send

// ANCHOR: receive
/// A receiver is an ordinary endpoint: accepts the group's connection and
/// returns its messages, to the end of the stream.
pub async fn receive(endpoint: &Endpoint) -> Result<Vec<Bytes>, Error> {
    endpoint.listen();
    let mut conn = endpoint.accept().await.ok_or("the endpoint is closed")?;
    let mut messages = Vec::new();
    while let Some((_stream, item)) = conn.recv_message().await? {
        match item {
            StreamItem::Message(m) => messages.push(m),
            StreamItem::Finished => break,
            other => return Err(format!("unexpected {other:?}").into()),
        }
    }
    conn.close().await?; // our FIN: the sender's connection to us can finish
    endpoint.wait_idle().await;
    Ok(messages)
}
// ANCHOR_END: receive
