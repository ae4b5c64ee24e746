//! `manyfold send FILE --to A,B,C`: one file to several receivers over one
//! group (spec §14), each an ordinary `manyfold recv`. The file is read
//! once and every message is held once in memory whatever the number of
//! receivers; each receiver runs the same protocol as a one-to-one
//! transfer (see [`super`]) and confirms or refuses on its own.
//!
//! In `all` mode every receiver gets the whole file: the request, the
//! data and the hash trailer are group messages, and each receiver runs
//! the one-to-one protocol. The other modes spread the file instead
//! (version 2 of the protocol, [`super::shard`]): the request and the end
//! go to every receiver alone, and each block is a group message that the
//! mode delivers to one, P, or K of the receivers.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use bytes::Bytes;
use indicatif::{MultiProgress, ProgressBar};
use manyfold::{Destination, Endpoint, Group, GroupConfig, Mode, PeerId, PeerStats, Protection};

use super::send::Source;
use super::wire::{BlockMsg, Reply, Request};
use crate::net::{self, Role};
use crate::report::{self, loss_seen};
use crate::size::{human_bytes, human_duration, human_rate};

/// Bytes per group message (and block of a spread file): large enough
/// that per-message costs vanish, small enough that the 64 MiB shared
/// buffer holds many.
const MESSAGE: usize = 1 << 20;
/// How long a receiver may take to answer the request.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(30);

/// How one receiver's transfer ended.
#[derive(Debug, Clone)]
pub enum Outcome {
    Saved(String),
    Refused(String),
    Failed(String),
}

/// One receiver's line in the final report.
#[derive(Debug, Clone)]
pub struct PeerReport {
    pub addr: SocketAddr,
    pub outcome: Outcome,
    /// From the start to its final answer.
    pub elapsed: Duration,
    pub stats: Option<PeerStats>,
}

/// The whole fan-out's report.
#[derive(Debug, Clone)]
pub struct GroupReport {
    pub name: String,
    pub bytes: u64,
    pub mode: Mode,
    pub elapsed: Duration,
    pub hash: blake3::Hash,
    pub peers: Vec<PeerReport>,
    /// A spread file: its block count and how the group delivered them.
    pub spread: Option<(u64, manyfold::GroupStats)>,
    /// Whether the group's connections were encrypted (all or none are).
    pub security: Protection,
}

impl GroupReport {
    pub fn saved(&self) -> usize {
        self.peers.iter().filter(|p| matches!(p.outcome, Outcome::Saved(_))).count()
    }

    /// Whether the transfer did what was asked: every receiver saved the
    /// file (`all`), or every block reached the mode's number of receivers
    /// and no receiver that took part failed (the other modes).
    pub fn succeeded(&self) -> bool {
        match self.spread {
            None => self.saved() == self.peers.len(),
            Some((blocks, stats)) => {
                stats.messages_delivered == blocks
                    && stats.messages_undeliverable == 0
                    && !self.peers.iter().any(|p| matches!(p.outcome, Outcome::Refused(_)) || failed_in_transfer(p))
            }
        }
    }
}

/// A receiver that took part and then failed (not merely unreachable).
fn failed_in_transfer(p: &PeerReport) -> bool {
    matches!(&p.outcome, Outcome::Failed(t) if !t.starts_with("not reached"))
}

impl GroupReport {
    /// The report as JSON (`--json`): the file, and per receiver its
    /// outcome (`saved`, `refused`, `failed`), what it said and when.
    pub fn to_json(&self) -> serde_json::Value {
        let receivers: Vec<serde_json::Value> = self
            .peers
            .iter()
            .map(|p| {
                let (outcome, detail) = match &p.outcome {
                    Outcome::Saved(t) => ("saved", t),
                    Outcome::Refused(t) => ("refused", t),
                    Outcome::Failed(t) => ("failed", t),
                };
                serde_json::json!({
                    "addr": p.addr.to_string(),
                    "outcome": outcome,
                    "detail": detail,
                    "seconds": p.elapsed.as_secs_f64(),
                    "acked_bytes": p.stats.map(|s| s.acked_bytes),
                })
            })
            .collect();
        serde_json::json!({
            "direction": "sent",
            "name": self.name,
            "bytes": self.bytes,
            "mode": self.mode.to_string(),
            "seconds": self.elapsed.as_secs_f64(),
            "saved": self.saved(),
            "encrypted": matches!(self.security, Protection::Encrypted { .. }),
            "blake3": self.hash.to_hex().to_string(),
            "receivers": receivers,
        })
    }
}

impl std::fmt::Display for GroupReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let verb = if self.spread.is_some() { "spread" } else { "sent" };
        let done = if self.spread.is_some() { "answered" } else { "saved it" };
        writeln!(
            f,
            "{verb} {} ({}) to {} receivers, mode {}: {} {done}, in {}",
            self.name,
            human_bytes(self.bytes),
            self.peers.len(),
            self.mode,
            self.saved(),
            human_duration(self.elapsed)
        )?;
        writeln!(f, "  security {}", self.security)?;
        if let Some((blocks, stats)) = self.spread {
            writeln!(
                f,
                "  blocks: {blocks} of {}, {} delivered as the mode asks, {} lost with every copy",
                human_bytes(MESSAGE as u64),
                stats.messages_delivered,
                stats.messages_undeliverable
            )?;
        }
        for p in &self.peers {
            let (mark, text) = match &p.outcome {
                Outcome::Saved(t) => ("ok  ", t.as_str()),
                Outcome::Refused(t) => ("FAIL", t.as_str()),
                Outcome::Failed(t) => ("FAIL", t.as_str()),
            };
            writeln!(f, "  {mark} {}  {text}", p.addr)?;
            if let Some(key) = p.stats.and_then(|s| s.peer_key) {
                writeln!(f, "       peer key {}", manyfold_proto::secure::hex(&key))?;
            }
            if let Some(conn) = p.stats.and_then(|s| s.conn) {
                let acked = p.stats.map_or(0, |s| s.acked_bytes);
                writeln!(
                    f,
                    "       goodput {}, retransmissions {}, loss seen {}, srtt {}",
                    human_rate(acked, p.elapsed),
                    conn.retransmissions,
                    loss_seen(conn.lost_packets, conn.packets_sent),
                    human_duration(conn.srtt)
                )?;
            }
        }
        write!(f, "  blake3 {}", self.hash.to_hex())
    }
}

/// Sends `source` as `name` to every receiver of `addrs` in `mode`;
/// `security` is the endpoint's mode, for the report.
pub async fn send_to_group(
    endpoint: &Endpoint,
    addrs: &[SocketAddr],
    config: GroupConfig,
    mut source: Source,
    name: &str,
    multi: &MultiProgress,
    security: Protection,
) -> Result<GroupReport> {
    let start = Instant::now();
    let mode = config.mode;
    let spread = mode != Mode::All;
    let (group, unreachable) = endpoint.group(addrs, config).await.context("cannot open the group")?;
    let mut outcomes: BTreeMap<SocketAddr, (Outcome, Duration)> = BTreeMap::new();
    for (addr, why) in unreachable {
        multi.suspend(|| eprintln!("warning: {addr} is not in the group: {why}"));
        outcomes.insert(addr, (Outcome::Failed(format!("not reached: {why}")), start.elapsed()));
    }
    let peers: Vec<(PeerId, SocketAddr)> = group
        .peers()
        .into_iter()
        .filter(|(_, s)| s.state == manyfold::PeerState::Up)
        .map(|(p, s)| (p, s.addr))
        .collect();

    // Everyone gets the request; each answers for itself.
    let request = Request { name: name.to_string(), size: source.size(), block: spread.then_some(MESSAGE as u32) };
    let request_len = if spread { 0 } else { request.encode().len() as u64 };
    if spread {
        for &(peer, _) in &peers {
            group
                .send_to(Destination { peer, stream: 0 }, &request.encode())
                .await
                .context("cannot send the request")?;
        }
    } else {
        group.send(request.encode()).await.context("cannot send the request")?;
    }
    let first = answers(&group, &peers, ANSWER_TIMEOUT).await;
    let mut accepted = Vec::new();
    for ((peer, addr), (answer, _)) in peers.iter().copied().zip(first) {
        match answer {
            Ok(Reply::Ok(_)) => accepted.push((peer, addr)),
            Ok(Reply::Error(why)) => {
                outcomes.insert(addr, (Outcome::Refused(format!("refused: {why}")), start.elapsed()));
                let _ = group.fully_remove_destination(peer);
            }
            Err(e) => {
                outcomes.insert(addr, (Outcome::Failed(format!("{e:#}")), start.elapsed()));
                let _ = group.fully_remove_destination(peer);
            }
        }
    }
    if accepted.is_empty() {
        let _ = tokio::time::timeout(Duration::from_secs(5), group.close()).await;
        let why: Vec<String> = outcomes.iter().map(|(a, (o, _))| format!("{a}: {}", text(o))).collect();
        bail!("no receiver accepted the transfer ({})", why.join("; "));
    }

    let size = source.size();
    let bars: Vec<(PeerId, ProgressBar)> =
        accepted.iter().map(|&(p, addr)| (p, report::transfer_bar(multi, size, &addr.to_string()))).collect();
    // A bar follows what its receiver acknowledged (the request aside).
    let progress = |group: &Group| {
        let stats: BTreeMap<PeerId, PeerStats> = group.peers().into_iter().collect();
        for (p, bar) in &bars {
            let acked = stats.get(p).map_or(0, |s| s.acked_bytes.saturating_sub(request_len));
            bar.set_position(acked.min(size));
        }
    };

    let hash = {
        let mut hasher = blake3::Hasher::new();
        let mut offset = 0;
        let mut tick = Instant::now();
        while offset < size {
            let want = (size - offset).min(MESSAGE as u64) as usize;
            let mut buf = vec![0u8; want];
            source.read_exact_into(&mut buf).await?;
            hasher.update(&buf);
            let message = if spread {
                let hash = *blake3::hash(&buf).as_bytes();
                BlockMsg::Block { offset, hash, data: &buf }.encode()
            } else {
                buf
            };
            group.send(Bytes::from(message)).await.context("the group failed while sending data")?;
            offset += want as u64;
            if tick.elapsed() >= Duration::from_millis(100) {
                progress(&group);
                tick = Instant::now();
            }
        }
        let hash = hasher.finalize();
        if !spread {
            group.send(hash.as_bytes().to_vec()).await.context("the group failed while sending the hash")?;
        }
        hash
    };

    // The bars follow the acknowledgements until the mode is satisfied;
    // then each receiver's verdict (it verifies the hash first).
    {
        let delivered = group.wait_for_send();
        tokio::pin!(delivered);
        let mut tick = tokio::time::interval(Duration::from_millis(100));
        loop {
            tokio::select! {
                r = &mut delivered => break r.context("the group failed before the file was delivered")?,
                _ = tick.tick() => progress(&group),
            }
        }
    }
    if spread {
        // Every block is where the mode wants it: now the end, to each.
        let end = BlockMsg::End { hash: *hash.as_bytes() }.encode();
        for &(peer, addr) in &accepted {
            if let Err(e) = group.send_to(Destination { peer, stream: 0 }, &end).await {
                multi.suspend(|| eprintln!("warning: cannot send the end to {addr}: {e}"));
            }
        }
    }
    let verdicts = answers(&group, &accepted, ANSWER_TIMEOUT).await;
    progress(&group);
    for (_, bar) in &bars {
        bar.finish_and_clear();
    }
    // Why peers left the group says more than their broken connection.
    let mut left = BTreeMap::new();
    while let Some(ev) = group.try_event() {
        if let manyfold::GroupEvent::PeerLeft { addr, why, .. } = ev {
            left.insert(addr, why);
        }
    }
    for ((_, addr), (verdict, at)) in accepted.iter().copied().zip(verdicts) {
        let outcome = match (verdict, left.get(&addr)) {
            (Ok(Reply::Ok(text)), _) => Outcome::Saved(text),
            (Ok(Reply::Error(why)), _) => Outcome::Failed(format!("receiver did not save the file: {why}")),
            (Err(_), Some(why)) => Outcome::Failed(format!("left the group: {}", net::left(*why, Role::Receiver))),
            (Err(e), None) => Outcome::Failed(format!("{e:#}")),
        };
        outcomes.insert(addr, (outcome, at.duration_since(start)));
    }
    // Everyone answered; a slow close no longer changes any outcome.
    let _ = tokio::time::timeout(Duration::from_secs(5), group.close()).await;
    let stats: BTreeMap<SocketAddr, PeerStats> = group.peers().into_iter().map(|(_, s)| (s.addr, s)).collect();
    let peers = addrs
        .iter()
        .map(|a| {
            let (outcome, elapsed) =
                outcomes.get(a).cloned().unwrap_or((Outcome::Failed("no outcome recorded".into()), start.elapsed()));
            PeerReport { addr: *a, outcome, elapsed, stats: stats.get(a).copied() }
        })
        .collect();
    let blocks = size.div_ceil(MESSAGE as u64);
    let spread = spread.then(|| (blocks, group.stats()));
    Ok(GroupReport {
        name: name.to_string(),
        bytes: size,
        mode,
        elapsed: start.elapsed(),
        hash,
        peers,
        spread,
        security,
    })
}

fn text(o: &Outcome) -> &str {
    match o {
        Outcome::Saved(t) | Outcome::Refused(t) | Outcome::Failed(t) => t,
    }
}

/// Reads one reply from each of `peers` at once, each within `limit`;
/// returns them in order, with the time each came.
async fn answers(group: &Group, peers: &[(PeerId, SocketAddr)], limit: Duration) -> Vec<(Result<Reply>, Instant)> {
    let mut tasks = tokio::task::JoinSet::new();
    for (i, &(peer, addr)) in peers.iter().enumerate() {
        let mut reader = group.reader(peer, 0);
        tasks.spawn(async move {
            let r = match tokio::time::timeout(limit, Reply::read(&mut reader)).await {
                Err(_) => Err(anyhow::anyhow!("no answer from {addr} within {}", human_duration(limit))),
                Ok(r) => r.with_context(|| format!("connection to {addr} lost before it answered")),
            };
            (i, r, Instant::now())
        });
    }
    let mut out: Vec<Option<(Result<Reply>, Instant)>> = (0..peers.len()).map(|_| None).collect();
    while let Some(done) = tasks.join_next().await {
        if let Ok((i, r, at)) = done {
            out[i] = Some((r, at));
        }
    }
    out.into_iter()
        .map(|o| o.unwrap_or_else(|| (Err(anyhow::anyhow!("the answer reader failed")), Instant::now())))
        .collect()
}
