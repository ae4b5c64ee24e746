//! `manyfold fetch NAME --from A,B,C --out FILE`: one group (spec §14) to
//! the servers, a manifest from each, then segments from all of them at
//! once (paper 00 §5.2), every one checked before it is written.
//!
//! 1. The group's parallel handshake opens a connection to every server;
//!    the unreachable ones are named and left out.
//! 2. Each server is asked for NAME's manifest, and the servers must agree
//!    ([`super::agree`]): a server that differs from the majority, or that
//!    cannot serve NAME, is dropped with a warning.
//! 3. [`super::schedule`] decides who is asked for what; answers are
//!    checked against the manifest's BLAKE3 of that segment and written at
//!    its offset into the data file of [`super::journal`]; a server that
//!    fails has its segments moved to the others.
//! 4. With every segment verified, the whole file's BLAKE3 is checked from
//!    disk and the file is renamed to FILE. If the fetch stops before, the
//!    data and a journal stay beside FILE, and the same command resumes.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use indicatif::{MultiProgress, ProgressBar};
use manyfold::{
    Destination, Endpoint, Group, GroupConfig, GroupEvent, Left, PeerId, PeerState, Protection, StreamId, StreamItem,
};

use super::agree::{agree, manifests};
use super::journal::{self, Download, Start};
use super::schedule::{Answer, Schedule, Tick};
use super::wire::{check_name, Manifest, Reply, Request};
use crate::keys;
use crate::net::{self, NetArgs, Role};
use crate::report;
use crate::size::{human_bytes, human_duration, human_rate};

/// How often timeouts are checked, figures refreshed and bars moved.
const TICK: Duration = Duration::from_millis(100);
/// How long the group may take to close once the outcome is known.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(1);

#[derive(Args, Debug)]
pub struct FetchArgs {
    /// The file's name on the servers (a plain base name).
    #[arg(value_name = "NAME")]
    pub name: String,

    /// Servers (`manyfold serve`), HOST:PORT, comma-separated. Each is
    /// asked for different segments; at least one must answer.
    #[arg(long, value_name = "ADDR[,ADDR...]", value_delimiter = ',', required = true)]
    pub from: Vec<String>,

    /// Where to store the file [default: NAME in the current directory].
    /// The download is kept beside it as .FILE.manyfold-fetch-part and
    /// .FILE.manyfold-fetch until it is complete.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,

    /// Replace FILE if it exists (refused by default, before any network
    /// work); -f, as in the ftp shell.
    #[arg(short = 'f', long)]
    pub overwrite: bool,

    #[command(flatten)]
    pub net: NetArgs,
}

pub async fn run(args: FetchArgs) -> Result<()> {
    check_name(&args.name).map_err(|why| anyhow!("{why}"))?;
    let out = args.out.clone().unwrap_or_else(|| PathBuf::from(&args.name));
    check_out(&out, args.overwrite)?;
    let mut addrs = Vec::with_capacity(args.from.len());
    for from in &args.from {
        let addr = net::resolve(from).await?;
        if addrs.contains(&addr) {
            bail!("{from} is named twice in --from");
        }
        addrs.push(addr);
    }
    let config = args.net.config()?;
    let security = keys::endpoint_protection(config.endpoint.security.as_ref());
    let endpoint = net::bind(net::unspecified_for(addrs[0]), config).await?;
    let result = fetch(&endpoint, &addrs, &args.name, &out, args.overwrite, security).await;
    let bound = Duration::from_millis(500);
    let _ = tokio::time::timeout(bound + Duration::from_secs(1), endpoint.shutdown_within(bound)).await;
    result
}

/// Refuses an `out` that exists (unless `overwrite`), is a directory, or
/// lies in a directory that does not exist.
fn check_out(out: &Path, overwrite: bool) -> Result<()> {
    if out.file_name().is_none() {
        bail!("--out {} does not name a file", out.display());
    }
    match std::fs::symlink_metadata(out) {
        Ok(m) if m.is_dir() => bail!("{} is a directory", out.display()),
        Ok(_) if !overwrite => bail!("{} exists (use --overwrite to replace it)", out.display()),
        _ => {}
    }
    let dir = match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    if !dir.is_dir() {
        bail!("cannot store {}: {} is not a directory", out.display(), dir.display());
    }
    Ok(())
}

/// One server as the report shows it.
#[derive(Debug, Clone)]
struct ServerLine {
    addr: SocketAddr,
    /// Why it was left out or failed; `None`: it took part to the end.
    failed: Option<String>,
    /// Whether it took part in the download (agreed on the manifest).
    used: bool,
    segments: u64,
    bytes: u64,
    duplicates: u64,
    timeouts: u64,
    srtt: Option<Duration>,
}

impl ServerLine {
    fn left_out(addr: SocketAddr, why: String) -> ServerLine {
        ServerLine {
            addr,
            failed: Some(why),
            used: false,
            segments: 0,
            bytes: 0,
            duplicates: 0,
            timeouts: 0,
            srtt: None,
        }
    }
}

/// What a fetch did, for the final report.
#[derive(Debug)]
struct FetchReport {
    name: String,
    out: PathBuf,
    manifest: Manifest,
    complete: bool,
    resumed: u32,
    elapsed: Duration,
    servers: Vec<ServerLine>,
    hash: Option<blake3::Hash>,
    security: Protection,
}

impl FetchReport {
    /// The report as JSON (`--json`): the file, whether it completed, and
    /// per server what it served, in plain units (bytes, seconds).
    fn to_json(&self) -> serde_json::Value {
        let servers: Vec<serde_json::Value> = self
            .servers
            .iter()
            .map(|s| {
                serde_json::json!({
                    "addr": s.addr.to_string(),
                    "used": s.used,
                    "failed": s.failed,
                    "segments": s.segments,
                    "bytes": s.bytes,
                    "duplicates": s.duplicates,
                    "timeouts": s.timeouts,
                    "srtt_seconds": s.srtt.map(|d| d.as_secs_f64()),
                })
            })
            .collect();
        let fetched: u64 = self.servers.iter().map(|s| s.bytes).sum();
        let secs = self.elapsed.as_secs_f64();
        serde_json::json!({
            "direction": "fetched",
            "name": self.name,
            "out": self.out,
            "complete": self.complete,
            "bytes": self.manifest.size,
            "segments": self.manifest.count(),
            "segment_size": self.manifest.segment_size,
            "resumed_segments": self.resumed,
            "fetched_bytes": fetched,
            "seconds": secs,
            "goodput_bytes_per_second": if secs > 0.0 { fetched as f64 / secs } else { 0.0 },
            "encrypted": matches!(self.security, Protection::Encrypted { .. }),
            "blake3": self.hash.map(|h| h.to_hex().to_string()),
            "servers": servers,
        })
    }
}

impl std::fmt::Display for FetchReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let m = &self.manifest;
        let fetched: u64 = self.servers.iter().map(|s| s.bytes).sum();
        // Those that served to the end; one that failed part-way is counted apart.
        let used = self.servers.iter().filter(|s| s.used && s.failed.is_none()).count();
        let failed = self.servers.iter().filter(|s| s.used && s.failed.is_some()).count();
        let failed = if failed > 0 { format!(" ({failed} more failed part-way)") } else { String::new() };
        writeln!(
            f,
            "{} {} ({}, {} segments of {}) from {used} of {} servers{failed} into {} in {}",
            if self.complete { "fetched" } else { "did not complete" },
            self.name,
            human_bytes(m.size),
            m.count(),
            human_bytes(m.segment_size.into()),
            self.servers.len(),
            self.out.display(),
            human_duration(self.elapsed)
        )?;
        write!(f, "  goodput {}", human_rate(fetched, self.elapsed))?;
        if self.resumed > 0 {
            write!(f, "; {} segments were kept from an earlier fetch", self.resumed)?;
        }
        writeln!(f)?;
        writeln!(f, "  security {}", self.security)?;
        for s in &self.servers {
            let mark = if s.failed.is_some() { "FAIL" } else { "ok  " };
            write!(f, "  {mark} {}", s.addr)?;
            if s.used {
                write!(f, "  {} segments, {}", s.segments, human_bytes(s.bytes))?;
                if s.duplicates > 0 {
                    write!(f, ", {} duplicates", s.duplicates)?;
                }
                if s.timeouts > 0 {
                    write!(f, ", {} timeouts", s.timeouts)?;
                }
                if let Some(srtt) = s.srtt {
                    write!(f, ", srtt {}", human_duration(srtt))?;
                }
            }
            match &s.failed {
                Some(why) if s.used => writeln!(f, "; failed: {why}")?,
                Some(why) => writeln!(f, "  not used: {why}")?,
                None => writeln!(f)?,
            }
        }
        match self.hash {
            Some(h) => write!(f, "  blake3 {}", h.to_hex()),
            None => write!(f, "  blake3 {} (manifest)", blake3::Hash::from(m.hash).to_hex()),
        }
    }
}

async fn fetch(
    endpoint: &Endpoint,
    addrs: &[SocketAddr],
    name: &str,
    out: &Path,
    overwrite: bool,
    security: Protection,
) -> Result<()> {
    let start = Instant::now();
    let multi = report::multi_progress();
    let config = GroupConfig { min_peers: 1, ..GroupConfig::default() };
    let (group, unreachable) = endpoint.group(addrs, config).await.context("no server could be reached")?;
    let mut lines: HashMap<SocketAddr, ServerLine> = HashMap::new();
    for (addr, why) in unreachable {
        eprintln!("warning: server {addr} is not reachable: {why}");
        lines.insert(addr, ServerLine::left_out(addr, format!("not reachable: {why}")));
    }
    let up: Vec<(PeerId, SocketAddr)> =
        group.peers().into_iter().filter(|(_, s)| s.state == PeerState::Up).map(|(p, s)| (p, s.addr)).collect();
    for &(peer, addr) in &up {
        let request = Request::Manifest { name: name.to_string() }.encode();
        if let Err(e) = group.send_to(Destination { peer, stream: StreamId::BYTES }, &request).await {
            eprintln!("warning: cannot ask server {addr} for the manifest: {e}");
        }
    }
    let answers = manifests(&group, &up, name).await;
    let (manifest, chosen) = match agree(name, &up, answers) {
        Ok(agreed) => agreed,
        Err(e) => {
            let _ = tokio::time::timeout(CLOSE_TIMEOUT, group.close()).await;
            return Err(e);
        }
    };
    for &(peer, addr, ref why) in &chosen.dropped {
        eprintln!("warning: server {addr} is not used: {why}");
        let _ = group.fully_remove_destination(peer);
        lines.insert(addr, ServerLine::left_out(addr, why.clone()));
    }
    let servers = chosen.agreeing;

    let (mut download, how) = {
        let (out, m) = (out.to_path_buf(), manifest.clone());
        tokio::task::spawn_blocking(move || Download::open(&out, &m))
            .await
            .map_err(|e| anyhow!("the resume check failed: {e}"))??
    };
    let resumed = download.done_count();
    match how {
        Start::Fresh => {}
        Start::Resumed { kept, listed } => {
            let redo = listed - kept;
            let redo =
                if redo > 0 { format!(" ({redo} failed their check and are fetched again)") } else { String::new() };
            report::say(&format_args!(
                "resuming {}: {kept} of {} segments already verified{redo}",
                out.display(),
                manifest.count()
            ));
        }
        Start::StartedOver(why) => eprintln!("warning: not resuming: {why}; starting over"),
    }
    report::say(&format_args!(
        "fetching {name} ({}, {} segments of {}) from {} server(s) into {}",
        human_bytes(manifest.size),
        manifest.count(),
        human_bytes(manifest.segment_size.into()),
        servers.len(),
        out.display()
    ));

    let mut run = Run::new(&group, &multi, &manifest, &servers, download.done());
    let outcome = run.download(&mut download).await;
    run.finish_bars();
    let (complete, hash, error) = match outcome {
        Ok(Outcome::Complete) => {
            for (s, why) in run.sched.settle(Instant::now()).into_iter().filter_map(failed_tick) {
                eprintln!("warning: server {} failed: {why}", servers[s].1);
            }
            let m = manifest.clone();
            let finished = tokio::task::spawn_blocking(move || download.finish(&m, overwrite))
                .await
                .map_err(|e| anyhow!("the final check failed: {e}"))
                .and_then(|r| r);
            match finished {
                Ok(hash) => (true, Some(hash), None),
                Err(e) => (true, None, Some(e)),
            }
        }
        Ok(end @ (Outcome::Interrupted | Outcome::AllFailed)) => {
            let (data_path, journal_path) = journal::paths(out)?;
            let kept = tokio::task::block_in_place(|| download.keep_for_resume());
            let kept = match kept {
                Ok(0) => "nothing was kept".to_string(),
                Ok(k) => format!(
                    "{k} of {} verified segments are kept in {} (journal {}); run the same command again to resume",
                    manifest.count(),
                    data_path.display(),
                    journal_path.display()
                ),
                Err(e) => format!("the journal could not be saved ({e:#}); a new fetch starts over"),
            };
            let interrupted = end == Outcome::Interrupted;
            let why = if interrupted {
                let by = net::lifecycle::signal().map_or("Ctrl-C", |s| s.name());
                format!("interrupted by {by}")
            } else {
                let failures: Vec<String> = run
                    .sched
                    .servers()
                    .iter()
                    .zip(&servers)
                    .map(|(s, (_, addr))| format!("{addr}: {}", s.failed.as_deref().unwrap_or("?")))
                    .collect();
                format!("every server failed ({})", failures.join("; "))
            };
            let text = format!("{name} was not completed: {why}; {kept}");
            (false, None, Some(if interrupted { net::lifecycle::account(text) } else { anyhow!(text) }))
        }
        Err(e) => {
            // A local failure (the disk): keep what is verified.
            let _ = tokio::task::block_in_place(|| download.keep_for_resume());
            (false, None, Some(e))
        }
    };
    let stats: HashMap<PeerId, Option<Duration>> =
        group.peers().into_iter().map(|(p, s)| (p, s.conn.map(|c| c.srtt))).collect();
    for (i, (peer, addr)) in servers.iter().enumerate() {
        let s = &run.sched.servers()[i];
        lines.insert(
            *addr,
            ServerLine {
                addr: *addr,
                failed: s.failed.clone(),
                used: true,
                segments: s.segments,
                bytes: s.bytes,
                duplicates: s.duplicates,
                timeouts: s.timeouts,
                srtt: stats.get(peer).copied().flatten(),
            },
        );
    }
    let report = FetchReport {
        name: name.to_string(),
        out: out.to_path_buf(),
        manifest,
        complete: complete && error.is_none(),
        resumed,
        elapsed: start.elapsed(),
        servers: addrs.iter().filter_map(|a| lines.remove(a)).collect(),
        hash,
        security,
    };
    report::emit(&report, || report.to_json());
    // The outcome is known: the servers get a bounded chance to see a
    // graceful close (a dead one would hold it to the bound).
    let _ = tokio::time::timeout(CLOSE_TIMEOUT, group.close()).await;
    match error {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

fn failed_tick(t: Tick) -> Option<(usize, String)> {
    match t {
        Tick::Failed { server, why } => Some((server, why)),
        Tick::Slow { .. } => None,
    }
}

/// How the download loop ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Complete,
    Interrupted,
    AllFailed,
}

/// The download phase: the schedule and what it needs to act.
struct Run<'a> {
    group: &'a Group,
    multi: &'a MultiProgress,
    manifest: &'a Manifest,
    servers: &'a [(PeerId, SocketAddr)],
    by_peer: HashMap<PeerId, usize>,
    sched: Schedule,
    /// Packets received from each server at the last tick: it is alive
    /// while the count grows (the schedule's silence rule).
    packets: Vec<u64>,
    total: ProgressBar,
    bars: Vec<ProgressBar>,
}

impl<'a> Run<'a> {
    fn new(
        group: &'a Group,
        multi: &'a MultiProgress,
        manifest: &'a Manifest,
        servers: &'a [(PeerId, SocketAddr)],
        done: &[bool],
    ) -> Run<'a> {
        let total = report::transfer_bar(multi, manifest.size, "total");
        let have: u64 = (0..manifest.count()).filter(|&i| done[i as usize]).map(|i| manifest.segment_len(i)).sum();
        total.set_position(have);
        let bars = servers.iter().map(|(_, a)| report::transfer_bar(multi, manifest.size, &a.to_string())).collect();
        Run {
            group,
            multi,
            manifest,
            servers,
            by_peer: servers.iter().enumerate().map(|(i, (p, _))| (*p, i)).collect(),
            sched: Schedule::new(done, servers.len()),
            packets: vec![0; servers.len()],
            total,
            bars,
        }
    }

    fn warn(&self, text: String) {
        self.multi.suspend(|| eprintln!("warning: {text}"));
    }

    /// Drops server `s` for good, with a warning naming it.
    fn drop_server(&mut self, s: usize, why: String, also: Option<u32>) {
        if self.sched.servers()[s].failed.is_some() {
            return;
        }
        let (peer, addr) = self.servers[s];
        let left = self.sched.servers()[s].outstanding();
        self.sched.fail(s, why.clone(), also);
        self.warn(format!("server {addr} failed: {why}; its {left} outstanding segment(s) go to the others"));
        let _ = self.group.fully_remove_destination(peer);
    }

    /// Runs until every segment is verified, every server failed, or the
    /// user interrupts. `Err` only for local failures (writing the file).
    async fn download(&mut self, download: &mut Download) -> Result<Outcome> {
        let ctrl_c = net::interrupted();
        tokio::pin!(ctrl_c);
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut events = true;
        loop {
            if self.sched.is_complete() {
                return Ok(Outcome::Complete);
            }
            if self.sched.live() == 0 {
                return Ok(all_failed());
            }
            for (s, index) in self.sched.requests(Instant::now()) {
                let request = Request::Segment { index }.encode();
                let dest = Destination { peer: self.servers[s].0, stream: StreamId::BYTES };
                if let Err(e) = self.group.send_to(dest, &request).await {
                    self.drop_server(s, format!("cannot send a request: {e}"), None);
                }
            }
            tokio::select! {
                _ = &mut ctrl_c => return Ok(Outcome::Interrupted),
                ev = self.group.next_event(), if events => match ev {
                    // Our own interruption reset every server: not their failure.
                    Some(GroupEvent::PeerLeft { .. }) if net::lifecycle::signal().is_some() => {
                        return Ok(Outcome::Interrupted);
                    }
                    Some(GroupEvent::PeerLeft { peer, why, .. }) if why != Left::Removed => {
                        if let Some(&s) = self.by_peer.get(&peer) {
                            self.drop_server(s, format!("connection lost: {}", net::left(why, Role::Server)), None);
                        }
                    }
                    Some(_) => {}
                    None => events = false,
                },
                msg = self.group.recv_message() => {
                    let Some((dest, item)) = msg else { return Ok(all_failed()) };
                    let Some(&s) = self.by_peer.get(&dest.peer) else { continue };
                    if self.sched.servers()[s].failed.is_none() {
                        self.sched.heard(s, Instant::now());
                        self.on_item(s, item, download)?;
                    }
                }
                _ = tick.tick() => self.on_tick(download)?,
            }
        }
    }

    /// One message from server `s`.
    fn on_item(&mut self, s: usize, item: StreamItem, download: &mut Download) -> Result<()> {
        let m = match item {
            StreamItem::Message(m) => m,
            StreamItem::Finished => {
                self.drop_server(s, "it ended its stream".into(), None);
                return Ok(());
            }
            StreamItem::Reset(code) => {
                self.drop_server(s, format!("it reset its stream (code {code})"), None);
                return Ok(());
            }
            StreamItem::Abandoned => {
                self.drop_server(s, "it abandoned a message".into(), None);
                return Ok(());
            }
        };
        let (index, data) = match Reply::parse(&m) {
            Ok(Reply::Segment { index, data }) => (index, data),
            Ok(Reply::Error(why)) => {
                self.drop_server(s, format!("it answered: {why}"), None);
                return Ok(());
            }
            Ok(Reply::Manifest(_)) => {
                self.drop_server(s, "it sent a second manifest".into(), None);
                return Ok(());
            }
            Err(e) => {
                self.drop_server(s, format!("malformed reply: {e}"), None);
                return Ok(());
            }
        };
        let m = self.manifest;
        if index >= m.count() || data.len() as u64 != m.segment_len(index) {
            let want = if index < m.count() { m.segment_len(index) } else { 0 };
            let why = format!("it sent segment {index} of {} bytes; the manifest has {want}", data.len());
            self.drop_server(s, why, None);
            return Ok(());
        }
        match self.sched.answer(s, index, Instant::now()) {
            Answer::Unasked => {
                self.drop_server(s, format!("it sent segment {index}, which it was not asked for"), None)
            }
            Answer::Duplicate => {}
            Answer::Fresh => {
                if blake3::hash(data).as_bytes() != &m.segments[index as usize] {
                    let why = format!("segment {index} does not match the manifest's BLAKE3");
                    self.drop_server(s, why, Some(index));
                    return Ok(());
                }
                tokio::task::block_in_place(|| download.write_segment(m, index, data))?;
                self.sched.verified(s, index, data.len() as u64);
                self.total.inc(data.len() as u64);
                self.bars[s].inc(data.len() as u64);
            }
        }
        Ok(())
    }

    /// Timeouts, round-trip times and the journal's timer.
    fn on_tick(&mut self, download: &mut Download) -> Result<()> {
        let now = Instant::now();
        for (peer, stats) in self.group.peers() {
            if let (Some(&s), Some(conn)) = (self.by_peer.get(&peer), stats.conn) {
                self.sched.set_srtt(s, conn.srtt);
                if conn.packets_received > self.packets[s] {
                    self.packets[s] = conn.packets_received;
                    self.sched.heard(s, now);
                }
            }
        }
        let mut slow: HashMap<usize, Vec<u32>> = HashMap::new();
        for t in self.sched.tick(now) {
            match t {
                Tick::Slow { server, index } => slow.entry(server).or_default().push(index),
                Tick::Failed { server, why } => {
                    let (peer, addr) = self.servers[server];
                    self.warn(format!("server {addr} failed: {why}; its segments go to the others"));
                    let _ = self.group.fully_remove_destination(peer);
                }
            }
        }
        for (s, indexes) in slow {
            let timeout = self.sched.servers()[s].timeout();
            self.warn(format!(
                "server {} is slow: segment(s) {indexes:?} unanswered after {}; asking the others",
                self.servers[s].1,
                human_duration(timeout)
            ));
        }
        tokio::task::block_in_place(|| download.save_if_due())
    }

    fn finish_bars(&self) {
        self.total.finish_and_clear();
        for b in &self.bars {
            b.finish_and_clear();
        }
    }
}

/// Every server failed — or our own interruption reset them all, which
/// is an interruption (the data and journal are kept for a resume).
fn all_failed() -> Outcome {
    if net::lifecycle::signal().is_some() {
        Outcome::Interrupted
    } else {
        Outcome::AllFailed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_must_be_new_unless_overwrite() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("f");
        assert!(check_out(&f, false).is_ok());
        std::fs::write(&f, b"x").unwrap();
        assert!(check_out(&f, false).unwrap_err().to_string().contains("exists (use --overwrite"));
        assert!(check_out(&f, true).is_ok());
        assert!(check_out(dir.path(), true).unwrap_err().to_string().contains("is a directory"));
        assert!(check_out(&dir.path().join("no/such"), false).unwrap_err().to_string().contains("not a directory"));
    }
}
