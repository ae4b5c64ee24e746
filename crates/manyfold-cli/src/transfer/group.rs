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
use manyfold::{Destination, Endpoint, Group, GroupConfig, Mode, PeerId, PeerState, PeerStats, Protection, StreamId};

use super::send::Source;
use super::tree::{self, Planned, TreeSummary};
use super::wire::{BlockMsg, Reply, Request};
use crate::net::{self, Role};
use crate::pace::Pacer;
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
    /// The file's BLAKE3; none for a tree (each file has its own).
    pub hash: Option<blake3::Hash>,
    /// Several entries: what they were.
    pub tree: Option<TreeSummary>,
    pub peers: Vec<PeerReport>,
    /// `all`: how many receivers must save the file (--min-receivers).
    pub min_receivers: usize,
    /// A spread file: its block count and how the group delivered them.
    pub spread: Option<(u64, manyfold::GroupStats)>,
    /// Whether the group's connections were encrypted (all or none are).
    pub security: Protection,
}

impl GroupReport {
    pub fn saved(&self) -> usize {
        self.peers.iter().filter(|p| matches!(p.outcome, Outcome::Saved(_))).count()
    }

    /// Whether the transfer did what was asked: at least --min-receivers
    /// (by default every receiver) saved the file (`all`), or every block
    /// reached the mode's number of receivers and no receiver that took
    /// part failed (the other modes).
    pub fn succeeded(&self) -> bool {
        match self.spread {
            None => self.saved() >= self.min_receivers,
            Some((blocks, stats)) => {
                stats.messages_delivered == blocks
                    && stats.messages_undeliverable == 0
                    && !self.peers.iter().any(|p| matches!(p.outcome, Outcome::Refused(_)) || failed_in_transfer(p))
            }
        }
    }

    /// `all` mode, succeeded without every receiver (--min-receivers):
    /// a warning naming each receiver that did not save the file and why.
    pub fn shortfall(&self) -> Option<String> {
        if self.spread.is_some() || !self.succeeded() || self.saved() == self.peers.len() {
            return None;
        }
        let missing: Vec<String> = self
            .peers
            .iter()
            .filter(|p| !matches!(p.outcome, Outcome::Saved(_)))
            .map(|p| format!("{} ({})", p.addr, text(&p.outcome)))
            .collect();
        Some(format!(
            "warning: {} was saved by {} of {} receivers, enough for --min-receivers {}; not by {}",
            self.name,
            self.saved(),
            self.peers.len(),
            self.min_receivers,
            missing.join(", ")
        ))
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
        let mut v = serde_json::json!({
            "direction": "sent",
            "name": self.name,
            "bytes": self.bytes,
            "mode": self.mode.to_string(),
            "seconds": self.elapsed.as_secs_f64(),
            "saved": self.saved(),
            "encrypted": matches!(self.security, Protection::Encrypted { .. }),
            "blake3": self.hash.map(|h| h.to_hex().to_string()),
            "receivers": receivers,
        });
        if let Some(tree) = &self.tree {
            tree.add_to_json(&mut v);
        }
        v
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
                // Before its first RTT sample min_rtt is zero and srtt only
                // the initial guess: a receiver never reached has no RTT.
                let srtt = if conn.min_rtt.is_zero() {
                    String::new()
                } else {
                    format!(", srtt {}", human_duration(conn.srtt))
                };
                writeln!(
                    f,
                    "       goodput {}, retransmissions {}, loss seen {}{srtt}",
                    human_rate(acked, p.elapsed),
                    conn.retransmissions,
                    loss_seen(conn.lost_packets, conn.packets_sent),
                )?;
            }
        }
        match (&self.hash, &self.tree) {
            (Some(hash), _) => write!(f, "  blake3 {}", hash.to_hex()),
            (None, Some(tree)) => write!(f, "  {}", tree.counts()).and_then(|()| tree.write_files(f)),
            (None, None) => Ok(()),
        }
    }
}

/// What a group send sends: one file (protocol version 1, or 2 when
/// spread), or a list of entries (version 3, mode `all` only).
#[derive(Debug)]
pub enum Payload {
    File { source: Source, name: String },
    Tree { items: Vec<Planned>, pacer: Pacer },
}

/// Sends `payload` to every receiver of `addrs` in `mode`; `security` is
/// the endpoint's mode, for the report.
pub async fn send_to_group(
    endpoint: &Endpoint,
    addrs: &[SocketAddr],
    config: GroupConfig,
    payload: Payload,
    multi: &MultiProgress,
    security: Protection,
) -> Result<GroupReport> {
    let start = Instant::now();
    let (mode, min_receivers) = (config.mode, config.min_peers);
    let spread = mode != Mode::All;
    let (name, size) = match &payload {
        Payload::File { source, name } => (name.clone(), source.size()),
        Payload::Tree { .. } if spread => bail!("mode {mode} spreads one regular file; send a list in mode all"),
        Payload::Tree { items, .. } => {
            (tree::top_names(items.iter().map(|i| &i.entry)), items.iter().filter_map(|i| i.entry.known_size()).sum())
        }
    };
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
    let (request, list_len) = match &payload {
        Payload::File { .. } => {
            (Request { name: name.clone(), size, block: spread.then_some(MESSAGE as u32) }.encode(), None)
        }
        Payload::Tree { items, .. } => {
            let entries: Vec<_> = items.iter().map(|i| i.entry.clone()).collect();
            (tree::wire::encode_request(&entries), Some(entries.len()))
        }
    };
    let request_len = if spread { 0 } else { request.len() as u64 };
    if spread {
        for &(peer, _) in &peers {
            group
                .send_to(Destination { peer, stream: StreamId::BYTES }, &request)
                .await
                .context("cannot send the request")?;
        }
    } else {
        group.send(request).await.context("cannot send the request")?;
    }
    let first = answers(&group, &peers, ANSWER_TIMEOUT, list_len).await;
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

    let bars: Vec<(PeerId, ProgressBar)> =
        accepted.iter().map(|&(p, addr)| (p, report::transfer_bar(multi, size, &addr.to_string()))).collect();
    // A bar follows what its receiver acknowledged (the request aside).
    let progress = |group: &Group| {
        let stats: BTreeMap<PeerId, PeerStats> = group.peers().into_iter().collect();
        for (p, bar) in &bars {
            match stats.get(p) {
                // Its connection ended: its bar ends there, failed (the
                // report says why), not "in progress" with a growing ETA.
                None | Some(PeerStats { state: PeerState::Gone, .. }) => {
                    report::end_failed(bar, "its connection ended (the report says why)")
                }
                Some(s) => bar.set_position(s.acked_bytes.saturating_sub(request_len).min(size)),
            }
        }
    };

    let (hash, files) = match payload {
        Payload::File { mut source, .. } => {
            let mut hasher = blake3::Hasher::new();
            let mut offset = 0;
            let mut tick = Instant::now();
            // Each message in a buffer used again once every receiver
            // acknowledged it: no fresh megabyte per message (RESULTS §41).
            let mut pool = manyfold::BufferPool::new(MESSAGE, tree::POOL_BUFFERS);
            while offset < size {
                let want = (size - offset).min(MESSAGE as u64) as usize;
                let buf = source.read_exact_into(pool.take(want)).await?;
                hasher.update(&buf);
                // Kept in either case: a spread block's encoding is a copy,
                // so its buffer comes back at once for the next block.
                let data = pool.keep(buf);
                let message = if spread {
                    let hash = *blake3::hash(&data).as_bytes();
                    Bytes::from(BlockMsg::Block { offset, hash, data: &data }.encode())
                } else {
                    data
                };
                group
                    .send(message)
                    .await
                    .context("the group failed while sending data")
                    .map_err(|e| gone(&group, e, &accepted, &outcomes))?;
                offset += want as u64;
                if tick.elapsed() >= Duration::from_millis(100) {
                    progress(&group);
                    tick = Instant::now();
                }
            }
            let hash = hasher.finalize();
            if !spread {
                group
                    .send(hash.as_bytes().to_vec())
                    .await
                    .context("the group failed while sending the hash")
                    .map_err(|e| gone(&group, e, &accepted, &outcomes))?;
            }
            (Some(hash), None)
        }
        Payload::Tree { items, mut pacer } => {
            let mut sent = tree::Sent::default();
            let mut sink = GroupSink { group: &group, progress: &progress, tick: Instant::now() };
            // In a group every receiver gets the same bytes: no resume.
            if let Err(e) = tree::stream_files(&items, Default::default(), &mut sink, &mut pacer, &mut sent).await {
                // Each receiver learns it at once and keeps nothing of this file.
                let _ = group.send(tree::wire::abandon(&format!("{e:#}"))).await;
                let e = gone(&group, e, &accepted, &outcomes);
                let _ = tokio::time::timeout(Duration::from_secs(5), group.close()).await;
                return Err(e);
            }
            (None, Some(tree::summary(items.iter().map(|i| &i.entry), sent.files)))
        }
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
        let end = BlockMsg::End { hash: *hash.context("a spread file has a hash")?.as_bytes() }.encode();
        for &(peer, addr) in &accepted {
            if let Err(e) = group.send_to(Destination { peer, stream: StreamId::BYTES }, &end).await {
                multi.suspend(|| eprintln!("warning: cannot send the end to {addr}: {e}"));
            }
        }
    }
    let verdicts = answers(&group, &accepted, ANSWER_TIMEOUT, None).await;
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
    let report = GroupReport {
        bytes: files.as_ref().map_or(size, |t: &TreeSummary| t.files.iter().map(|f| f.bytes).sum()),
        name,
        mode,
        elapsed: start.elapsed(),
        hash,
        tree: files,
        peers,
        min_receivers,
        spread,
        security,
    };
    if let Some(warning) = report.shortfall() {
        multi.suspend(|| eprintln!("{warning}"));
    }
    Ok(report)
}

/// `e` said again when it is the library's "no peer can take the
/// message" (every receiver it was sending to is gone): which receivers
/// those were and why each went ("127.0.0.1:7008: left the group: the
/// receiver was interrupted"), from the group's events, as when no
/// receiver accepted; the library's words name neither. Any other error
/// is returned as it is.
fn gone(
    group: &Group,
    e: anyhow::Error,
    accepted: &[(PeerId, SocketAddr)],
    outcomes: &BTreeMap<SocketAddr, (Outcome, Duration)>,
) -> anyhow::Error {
    let no_peers = |c: &(dyn std::error::Error + 'static)| {
        matches!(c.downcast_ref::<manyfold::SendError>(), Some(manyfold::SendError::NoPeers))
    };
    if !e.chain().any(no_peers) {
        return e;
    }
    let mut left = BTreeMap::new();
    while let Some(ev) = group.try_event() {
        if let manyfold::GroupEvent::PeerLeft { addr, why, .. } = ev {
            left.insert(addr, why);
        }
    }
    let mut why: BTreeMap<SocketAddr, String> = outcomes.iter().map(|(a, (o, _))| (*a, text(o).to_string())).collect();
    for &(_, addr) in accepted {
        let went = match left.get(&addr) {
            Some(w) => format!("left the group: {}", net::left(*w, Role::Receiver)),
            None => "left the group".to_string(),
        };
        why.insert(addr, went);
    }
    let why: Vec<String> = why.iter().map(|(a, t)| format!("{a}: {t}")).collect();
    // What the CLI said about the failure, without the library's words.
    let mut said: Vec<String> = e.chain().take_while(|c| !no_peers(*c)).map(|c| c.to_string()).collect();
    said.push(format!("no receiver is left ({})", why.join("; ")));
    anyhow::anyhow!(said.join(": "))
}

fn text(o: &Outcome) -> &str {
    match o {
        Outcome::Saved(t) | Outcome::Refused(t) | Outcome::Failed(t) => t,
    }
}

/// Reads one reply from each of `peers` at once, each within `limit`;
/// returns them in order, with the time each came. The answer to a list
/// of `list_len` entries carries resume offers after an ok: read and
/// left unused (every receiver of a group gets the same bytes).
async fn answers(
    group: &Group,
    peers: &[(PeerId, SocketAddr)],
    limit: Duration,
    list_len: Option<usize>,
) -> Vec<(Result<Reply>, Instant)> {
    let mut tasks = tokio::task::JoinSet::new();
    for (i, &(peer, addr)) in peers.iter().enumerate() {
        let mut reader = group.reader(peer, 0);
        tasks.spawn(async move {
            let read = async {
                let reply = Reply::read(&mut reader).await?;
                if let (Reply::Ok(_), Some(n)) = (&reply, list_len) {
                    tree::wire::read_offers(&mut reader, n).await?;
                }
                std::io::Result::Ok(reply)
            };
            let r = match tokio::time::timeout(limit, read).await {
                Err(_) => Err(anyhow::anyhow!("no answer from {addr} within {}", human_duration(limit))),
                // Said by its role, as after the answers ("the receiver
                // was interrupted"), not in the library's words alone.
                Ok(r) => r
                    .with_context(|| format!("connection to {addr} lost before it answered"))
                    .map_err(|e| net::explain(e, Role::Receiver)),
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

/// The group as the sink of a tree's stream: each piece one group
/// message, held once for every receiver.
struct GroupSink<'a> {
    group: &'a Group,
    progress: &'a dyn Fn(&Group),
    tick: Instant,
}

impl tree::Sink for GroupSink<'_> {
    async fn put(&mut self, bytes: Bytes, _done: u64) -> Result<()> {
        self.group.send(bytes).await.context("the group failed while sending data")?;
        if self.tick.elapsed() >= Duration::from_millis(100) {
            (self.progress)(self.group);
            self.tick = Instant::now();
        }
        Ok(())
    }

    fn chunk(&self) -> usize {
        MESSAGE - 4
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use manyfold_proto::ConnStats;

    /// `send --to A,B --min-receivers 1` where A saved the file and B was
    /// never reached (its connection saw no answer, so no RTT sample).
    fn one_of_two() -> GroupReport {
        let peer = |addr: &str, outcome, conn| PeerReport {
            addr: addr.parse().unwrap(),
            outcome,
            elapsed: Duration::from_millis(7),
            stats: Some(PeerStats {
                addr: addr.parse().unwrap(),
                state: PeerState::Gone,
                first_msg: 0,
                acked_messages: 0,
                acked_bytes: 0,
                pending_bytes: 0,
                conn: Some(conn),
                peer_key: None,
            }),
        };
        let reached = ConnStats {
            packets_sent: 77,
            srtt: Duration::from_micros(572),
            min_rtt: Duration::from_micros(400),
            ..ConnStats::default()
        };
        let never = ConnStats { packets_sent: 1, srtt: Duration::from_micros(333_330), ..ConnStats::default() };
        GroupReport {
            name: "m.bin".into(),
            bytes: 100_000,
            mode: Mode::All,
            elapsed: Duration::from_millis(7),
            hash: None,
            tree: None,
            peers: vec![
                peer("127.0.0.1:7411", Outcome::Saved("saved m.bin".into()), reached),
                peer("127.0.0.1:7412", Outcome::Failed("not reached: refused".into()), never),
            ],
            min_receivers: 1,
            spread: None,
            security: Protection::Plain,
        }
    }

    #[test]
    fn min_receivers_met_succeeds_with_a_warning_naming_the_missing() {
        let report = one_of_two();
        assert!(report.succeeded());
        let warning = report.shortfall().expect("a warning");
        assert!(warning.contains("saved by 1 of 2 receivers"), "{warning}");
        assert!(warning.contains("127.0.0.1:7412 (not reached: refused)"), "{warning}");
        assert!(!warning.contains("7411"), "{warning}");

        let all = GroupReport { min_receivers: 2, ..one_of_two() };
        assert!(!all.succeeded());
        assert_eq!(all.shortfall(), None, "a failure is an error, not a warning");
    }

    #[test]
    fn a_receiver_never_reached_shows_no_rtt() {
        let text = one_of_two().to_string();
        assert!(text.contains("srtt 572 µs"), "{text}");
        assert!(!text.contains("333"), "{text}");
    }
}
