//! Multicast file replication (spec §16): one sender pushes a file over IP
//! multicast to every receiver that joined the group, once, keeping pace
//! with the slowest and repairing what each lost; every receiver checks
//! the file's BLAKE3 hash.
//!
//! ```sh
//! cargo run -p manyfold --example mcast -- recv 239.1.2.3:7020 inbox [IFACE]   # on each receiver
//! cargo run -p manyfold --example mcast -- send 239.1.2.3:7020 disk.img [IFACE]
//! ```
//!
//! IFACE is the interface to join and send on (`lo` for one host);
//! without it the routing table picks one.

use std::fs::File;
use std::net::SocketAddrV4;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use manyfold::mcast::{
    Announcement, McastNet, McastSink, ReceiveOutcome, ReceiverConfig, ReceiverOutcome, SenderConfig,
};

type Error = Box<dyn std::error::Error + Send + Sync>;

#[tokio::main]
async fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let iface = args.get(3).cloned();
    match (args.first().map(String::as_str), args.get(1), args.get(2)) {
        (Some("recv"), Some(group), Some(dir)) => {
            let path = receive(group.parse()?, iface, Path::new(dir)).await?;
            println!("stored {}, hash verified", path.display());
            Ok(())
        }
        (Some("send"), Some(group), Some(path)) => {
            let receivers = send(group.parse()?, iface, Path::new(path), 1).await?;
            println!("{receivers} receiver(s) have the file");
            Ok(())
        }
        _ => Err("usage: mcast recv GROUP DIR [IFACE] | mcast send GROUP FILE [IFACE]".into()),
    }
}

// ANCHOR: send
/// Sends the file at `path` to `group`, starting once `receivers` have
/// joined (or after the announce wait); returns how many completed.
pub async fn send(group: SocketAddrV4, iface: Option<String>, path: &Path, receivers: usize) -> Result<usize, Error> {
    let net = McastNet { iface, ..McastNet::new(group) };
    let data = std::fs::read(path)?;
    let info = Announcement {
        size: Some(data.len() as u64),
        hash: Some(*blake3::hash(&data).as_bytes()),
        name: path.file_name().and_then(|n| n.to_str()).ok_or("the path names no file")?.to_string(),
        block: 0, // 0: the sender's choices for the tuning fields
        artp_max_us: 0,
        repair_interval_ms: 0,
        fec_k: 0,
    };
    let config = SenderConfig { seed: seed(), min_receivers: receivers, ..SenderConfig::default() };
    let view = manyfold::mcast::send(&net, config, info, File::open(path)?, None, |_| {}, |_| {}).await?;
    if let Some(e) = view.failed {
        return Err(e.into());
    }
    Ok(view.receivers.iter().filter(|r| r.outcome == ReceiverOutcome::Completed).count())
}
// ANCHOR_END: send

// ANCHOR: receive
/// Joins `group`, stores the first file announced there in `dir` and
/// checks its hash; returns where it went.
pub async fn receive(group: SocketAddrV4, iface: Option<String>, dir: &Path) -> Result<PathBuf, Error> {
    let net = McastNet { iface, ..McastNet::new(group) };
    let config = ReceiverConfig { seed: seed(), ..ReceiverConfig::default() };
    let mut sink = FileSink { dir: dir.to_path_buf(), file: None };
    let wait = Some(std::time::Duration::from_secs(30)); // for a session to join
    let (outcome, view) = manyfold::mcast::receive(&net, config, &mut sink, wait, |_| {}).await?;
    match outcome {
        ReceiveOutcome::Completed => Ok(dir.join(view.info.map(|i| i.name).unwrap_or_default())),
        other => Err(format!("not received: {other:?}").into()),
    }
}

/// Where a receiver stores the file: in `dir`, under the announced name.
struct FileSink {
    dir: PathBuf,
    file: Option<File>,
}

impl FileSink {
    fn file(&self) -> std::io::Result<&File> {
        self.file.as_ref().ok_or_else(|| std::io::Error::other("no file announced yet"))
    }
}

impl McastSink for FileSink {
    fn announced(&mut self, info: &Announcement) -> std::io::Result<()> {
        // Only the last component: a sender cannot write outside `dir`.
        let name = Path::new(&info.name).file_name().ok_or_else(|| std::io::Error::other("no file name"))?;
        self.file = Some(File::options().create(true).truncate(true).read(true).write(true).open(self.dir.join(name))?);
        Ok(())
    }

    fn write_at(&mut self, offset: u64, data: &[u8]) -> std::io::Result<()> {
        self.file()?.write_all_at(data, offset)
    }

    fn read_at(&mut self, offset: u64, out: &mut [u8]) -> std::io::Result<usize> {
        self.file()?.read_at(out, offset)
    }

    fn verify(&mut self, info: &Announcement) -> std::io::Result<bool> {
        let (Some(size), Some(want)) = (info.size, info.hash) else { return Ok(false) };
        let file = self.file()?;
        file.set_len(size)?;
        let mut data = vec![0u8; usize::try_from(size).map_err(std::io::Error::other)?];
        file.read_exact_at(&mut data, 0)?;
        Ok(*blake3::hash(&data).as_bytes() == want)
    }
}
// ANCHOR_END: receive

/// A fresh seed for the session id and the feedback timers.
fn seed() -> u64 {
    let mut b = [0u8; 8];
    getrandom::getrandom(&mut b).expect("the OS random source");
    u64::from_le_bytes(b)
}
