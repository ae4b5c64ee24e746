//! Sending a file: the sender connects and writes the file's name and
//! contents on the connection's byte stream (stream 0); the receiver
//! stores each file it is sent in a directory.
//!
//! The framing is this example's own: a 2-byte big-endian name length,
//! the name (UTF-8, no directory), then the contents up to the sender's
//! FIN. `manyfold send` / `manyfold recv` do the same with a verified
//! header, resumption and progress.
//!
//! ```sh
//! cargo run -p manyfold --example file -- recv 127.0.0.1:7008 inbox
//! cargo run -p manyfold --example file -- send 127.0.0.1:7008 big.bin
//! ```

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use manyfold::{Config, Endpoint};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

type Error = Box<dyn std::error::Error + Send + Sync>;

#[tokio::main]
async fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["recv", addr, dir] => {
            let endpoint = Endpoint::bind(addr.parse()?, Config::default()).await?;
            println!("receiving on {}", endpoint.local_addr()?);
            loop {
                let (path, size) = receive(&endpoint, Path::new(dir)).await?;
                println!("stored {} ({size} bytes)", path.display());
            }
        }
        ["send", addr, path] => {
            let size = send(addr.parse()?, Path::new(path)).await?;
            println!("sent {size} bytes");
            Ok(())
        }
        _ => Err("usage: file recv ADDR DIR | file send ADDR FILE".into()),
    }
}

// ANCHOR: send
/// Sends the file at `path` to the receiver at `to`; returns its size once
/// the receiver has acknowledged every byte.
pub async fn send(to: SocketAddr, path: &Path) -> Result<u64, Error> {
    let name = path.file_name().and_then(|n| n.to_str()).ok_or("the path names no file")?;
    let mut file = tokio::fs::File::open(path).await?;
    let endpoint = Endpoint::bind("0.0.0.0:0".parse()?, Config::default()).await?;
    let mut conn = endpoint.connect(to).await?;
    conn.write_all(&u16::try_from(name.len())?.to_be_bytes()).await?;
    conn.write_all(name.as_bytes()).await?;
    let size = tokio::io::copy(&mut file, &mut conn).await?;
    conn.close().await?; // FIN after the data; returns once all of it is acknowledged
    endpoint.wait_idle().await;
    Ok(size)
}
// ANCHOR_END: send

// ANCHOR: receive
/// Accepts one connection on `endpoint` and stores the file it carries in
/// `dir`; returns where it went and its size.
pub async fn receive(endpoint: &Endpoint, dir: &Path) -> Result<(PathBuf, u64), Error> {
    endpoint.listen();
    let mut conn = endpoint.accept().await.ok_or("the endpoint is closed")?;
    let mut len = [0u8; 2];
    conn.read_exact(&mut len).await?;
    let mut name = vec![0u8; u16::from_be_bytes(len).into()];
    conn.read_exact(&mut name).await?;
    // Only the last component: a sender cannot write outside `dir`.
    let name = String::from_utf8(name)?;
    let name = Path::new(&name).file_name().ok_or("the sender named no file")?;
    let path = dir.join(name);
    let mut file = tokio::fs::File::create(&path).await?;
    let size = tokio::io::copy(&mut conn, &mut file).await?; // to the sender's FIN
    file.sync_all().await?;
    conn.close().await?; // our FIN: the connection is over
    Ok((path, size))
}
// ANCHOR_END: receive
