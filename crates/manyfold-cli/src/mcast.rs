//! `manyfold mcast send` and `manyfold mcast recv`: one file (or disk image,
//! or standard input) to many receivers over IP multicast (spec §16,
//! paper 03's SOMA).

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::net::{SocketAddr, SocketAddrV4};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use indicatif::ProgressBar;
use manyfold::mcast::{
    codes, network_of, McastNet, McastSink, ReceiveOutcome, ReceiverOutcome, ReceiverView, SenderView, SourceGrowth,
};
use manyfold_proto::mcast::{Announcement, ReceiverConfig, SenderConfig, SenderEvent};
use manyfold_proto::SecurityConfig;
use tokio::sync::watch;

use crate::fsutil::PartFile;
use crate::report::{multi_progress, transfer_bar};
use crate::size::{human_bytes, human_duration, human_rate};

#[derive(Debug, Subcommand)]
pub enum McastCommand {
    /// Send a file, a block device or standard input (`-`) to every
    /// receiver listening on the group.
    ///
    /// Announces the session (name, size, BLAKE3) and waits for receivers
    /// (--receivers, at most --wait); sends in windows whose size follows
    /// the slowest network (paper 03's flow control); then repairs what each
    /// receiver lost, by multicast when several lost the same packet.
    /// Receivers may join late. Prints each receiver's progress and a final
    /// report; exits non-zero unless every receiver confirmed the whole file.
    Send(SendArgs),

    /// Receive one file from the group into a directory (or a device, or
    /// standard output).
    ///
    /// The file is written under a hidden temporary name, checked against
    /// the sender's BLAKE3 once whole, and only then renamed. Exits non-zero
    /// if the hash does not match, the sender drops this receiver, or the
    /// sender goes silent.
    Recv(RecvArgs),
}

#[derive(Debug, Args)]
pub struct NetArgs {
    /// IPv4 multicast group and port, e.g. 239.1.2.3:7020.
    #[arg(long, value_name = "GROUP:PORT")]
    group: SocketAddrV4,
    /// Network interface to send and join on [default: the route's].
    #[arg(long, value_name = "IF")]
    iface: Option<String>,
    /// Multicast TTL: routers the data may cross.
    #[arg(long, default_value_t = 1)]
    ttl: u32,
    /// Encrypt the session (spec §19.7): the sender hands a fresh group key
    /// to each receiver inside a Noise handshake, then seals every packet
    /// with it. A `psk` line lets in whoever holds it; a private key (with
    /// --peers-file) proves who we are. Both sides must give one; a
    /// receiver with keys joins only encrypted sessions, one without only
    /// plain ones.
    #[arg(long, value_name = "FILE")]
    key_file: Option<PathBuf>,
    /// Public keys accepted: on the sender, the receivers let in; on a
    /// receiver, the senders it trusts. Needs --key-file with a private key.
    #[arg(long, value_name = "FILE")]
    peers_file: Option<PathBuf>,
}

impl NetArgs {
    /// The keys --key-file and --peers-file give; `None`: a plain session.
    fn security(&self) -> Result<Option<SecurityConfig>> {
        crate::keys::security_config(self.key_file.as_deref(), self.peers_file.as_deref())
    }

    fn net(&self) -> McastNet {
        let mut n = McastNet::new(self.group);
        n.iface = self.iface.clone();
        n.ttl = self.ttl;
        n
    }
}

#[derive(Debug, Args)]
pub struct SendArgs {
    /// The file or block device to send; `-` reads standard input to its end.
    #[arg(value_name = "FILE")]
    file: PathBuf,
    #[command(flatten)]
    net: NetArgs,
    /// Name the receivers store the file under [default: FILE's name; "stdin" for -].
    #[arg(long)]
    name: Option<String>,
    /// Receivers to wait for before sending (more may join later).
    #[arg(long, default_value_t = 1)]
    receivers: usize,
    /// Longest wait for --receivers, in seconds; then start with whoever
    /// registered, and exit non-zero at the end if fewer than --receivers
    /// ever joined.
    #[arg(long, default_value_t = 5.0)]
    wait: f64,
    /// Largest window in packets (paper 03 uses 100; more keeps fast LANs busy during each window's ACK wait).
    #[arg(long, default_value_t = 256)]
    max_window: u32,
    /// Floor of the window timer in ms (paper 03's dflt_Tout).
    #[arg(long, default_value_t = 100)]
    timeout_floor: u64,
    /// Bound of the receivers' random ACK delay in µs (ARTP_max); adapted upwards when many receivers share a network.
    #[arg(long, default_value_t = 600)]
    artp_max: u64,
    /// Drop a receiver whose reported loss exceeds this percentage.
    #[arg(long, value_name = "PCT")]
    max_loss: Option<f64>,
    /// Seconds after the last window before receivers still missing data are dropped.
    #[arg(long, default_value_t = 60.0)]
    completion_timeout: f64,
    /// Seconds of silence after which a receiver is dropped.
    #[arg(long, default_value_t = 5.0)]
    receiver_timeout: f64,
    /// Most repair requests a receiver may make.
    #[arg(long, default_value_t = 100)]
    max_passes: u32,
    /// Largest datagram in bytes (header included).
    #[arg(long, default_value_t = 1452)]
    max_datagram: usize,
    /// Pace each window's packets at the rate of recent windows instead of sending them back to back.
    #[arg(long)]
    pace: bool,
    /// Cap the sending rate, whatever the flow control allows: bytes per
    /// second (10MB, 1.5MiB/s) or bits per second (80Mbit, 1Gbit/s), of
    /// the datagrams sent to the group, headers and repairs included
    /// (spec §16.3). Without it, as fast as the receivers confirm.
    #[arg(long, value_name = "RATE", value_parser = crate::size::rate_arg)]
    rate: Option<u64>,
    /// Window timer growth on expiry (paper 03's α > 1).
    #[arg(long, default_value_t = 1.5)]
    alpha: f64,
    /// Window timer shrink on a confirmed window (paper 03's β > α).
    #[arg(long, default_value_t = 2.0)]
    beta: f64,
    /// Shrink the window only when one receiver reports more than this
    /// percentage of a window lost; 0 is paper 03's rule (every newly
    /// reported loss shrinks it), which lets random loss on one link
    /// throttle everyone.
    #[arg(long, default_value_t = 5.0, value_name = "PCT")]
    loss_tolerance: f64,
    /// Packets per Reed-Solomon FEC block (at most 64); 0 turns parity off
    /// and repairs every lost packet by itself.
    #[arg(long, default_value_t = 32, value_name = "K")]
    fec: u16,
    /// Parity packets sent after every FEC block during the first sending
    /// (proactive FEC); repairs still send parity on demand.
    #[arg(long, default_value_t = 0, value_name = "P")]
    fec_proactive: u16,
    /// Write the figures (per receiver and per window) as JSON to this file.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct RecvArgs {
    #[command(flatten)]
    net: NetArgs,
    /// Directory to store the file in, under the name the sender announces.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["output", "stdout"])]
    dir: Option<PathBuf>,
    /// Store into this path instead (a file, renamed into place once
    /// verified, or a block device, written in place and then verified).
    #[arg(long, value_name = "PATH", conflicts_with = "stdout")]
    output: Option<PathBuf>,
    /// Write the file to standard output once whole and verified.
    #[arg(long)]
    stdout: bool,
    /// Replace an existing file of the same name (-f, as in the ftp shell).
    #[arg(short = 'f', long)]
    overwrite: bool,
    /// Name of this receiver's network: receivers with the same name
    /// suppress each other's acknowledgements [default: the /24 of the
    /// address the sender sees].
    #[arg(long)]
    network: Option<String>,
    /// Give up if no session is heard within this many seconds [default: wait forever].
    #[arg(long)]
    wait: Option<f64>,
    /// Give up when nothing comes from the sender for this many seconds.
    #[arg(long, default_value_t = 30.0)]
    sender_timeout: f64,
    /// Print one JSON object on stdout for the session instead of the
    /// report on stderr: `ok`, `error` (null or why), `name`, `sender`,
    /// `stored` (the path written; null unless ok), `bytes`, `seconds`, `goodput_bytes_per_second`, `blake3`,
    /// `encrypted`, and the packet counts `data_packets`,
    /// `repairs_received`, `fec_recovered`, `parity_received`,
    /// `duplicates`, `acks_sent`, `acks_suppressed`, `nacks_sent`,
    /// `nacks_suppressed`, `repair_requests`.
    #[arg(long, conflicts_with = "stdout")]
    pub json: bool,
}

pub fn run(cmd: McastCommand) -> Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    rt.block_on(async {
        crate::net::lifecycle::install();
        match cmd {
            McastCommand::Send(a) => send(a).await,
            McastCommand::Recv(a) => recv(a).await,
        }
    })
}

/// Resolves with INTERRUPTED on the first SIGINT or SIGTERM: the session
/// then ends with that code, told to the other side at once (spec §16.7).
async fn on_signal() -> manyfold::ErrorCode {
    crate::net::lifecycle::interrupted().await;
    manyfold::ErrorCode::INTERRUPTED
}

/// The account of an interrupted session, once the other side was told.
fn interrupted(what: &str) -> Result<()> {
    let by = crate::net::lifecycle::signal().map_or("a signal", |s| s.name());
    Err(crate::net::lifecycle::account(format!("interrupted by {by}; {what}")))
}

fn secs(s: f64, what: &str) -> Result<Duration> {
    if !s.is_finite() || s < 0.0 {
        bail!("{what} must be a non-negative number of seconds, not {s}");
    }
    Ok(Duration::from_secs_f64(s))
}

/// Opens the source: a regular file or block device (size and hash known
/// now), or standard input spooled to a temporary file as it arrives.
struct Source {
    file: File,
    size: Option<u64>,
    hash: Option<[u8; 32]>,
    growth: Option<watch::Receiver<SourceGrowth>>,
    _spool: Option<tempfile::TempPath>,
}

fn open_source(path: &Path) -> Result<Source> {
    if path == Path::new("-") {
        let spool = tempfile::NamedTempFile::new().context("cannot create a spool file for standard input")?;
        let (file, tmp) = spool.into_parts();
        let mut writer = file.try_clone()?;
        let (tx, rx) = watch::channel(SourceGrowth::Available(0));
        std::thread::spawn(move || {
            let mut stdin = std::io::stdin().lock();
            let mut hasher = blake3::Hasher::new();
            let mut buf = vec![0u8; 1 << 20];
            let mut total = 0u64;
            loop {
                match stdin.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => {
                        if writer.write_all(&buf[..n]).is_err() {
                            eprintln!("manyfold: cannot write the spool file; stopping");
                            std::process::exit(1);
                        }
                        hasher.update(&buf[..n]);
                        total += n as u64;
                        let _ = tx.send(SourceGrowth::Available(total));
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(e) => {
                        eprintln!("manyfold: cannot read standard input: {e}");
                        std::process::exit(1);
                    }
                }
            }
            let _ = tx.send(SourceGrowth::Finished { size: total, hash: *hasher.finalize().as_bytes() });
        });
        return Ok(Source { file, size: None, hash: None, growth: Some(rx), _spool: Some(tmp) });
    }
    let mut file = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let meta = file.metadata()?;
    if meta.is_dir() {
        bail!("{} is a directory; send one file (or a tar of the directory through -)", path.display());
    }
    // A block device's length is where its end is.
    let size = file.seek(SeekFrom::End(0)).with_context(|| format!("cannot size {}", path.display()))?;
    file.seek(SeekFrom::Start(0))?;
    let bar = multi_progress().add(ProgressBar::new(size));
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "   hashing [{bar:32.cyan/blue}] {decimal_bytes}/{decimal_total_bytes}",
        )
        .expect("static template"),
    );
    let mut hasher = blake3::Hasher::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut at = 0u64;
    while at < size {
        let n = file.read_at(&mut buf, at).with_context(|| format!("cannot read {}", path.display()))?;
        if n == 0 {
            bail!("{} ended at {at} bytes, before its size of {size}", path.display());
        }
        hasher.update(&buf[..n]);
        at += n as u64;
        bar.set_position(at);
    }
    bar.finish_and_clear();
    Ok(Source { file, size: Some(size), hash: Some(*hasher.finalize().as_bytes()), growth: None, _spool: None })
}

async fn send(a: SendArgs) -> Result<()> {
    let name = match &a.name {
        Some(n) => n.clone(),
        None if a.file == Path::new("-") => "stdin".into(),
        None => a.file.file_name().map(|n| n.to_string_lossy().into_owned()).context("FILE has no file name")?,
    };
    if name.is_empty() || name.contains('/') || name == "." || name == ".." || name.len() > 255 {
        bail!("--name must be a plain file name of at most 255 bytes, not {name:?}");
    }
    if let Some(p) = a.max_loss {
        if !(0.0..=100.0).contains(&p) {
            bail!("--max-loss is a percentage between 0 and 100, not {p}");
        }
    }
    if a.max_window == 0 || a.receivers == 0 {
        bail!("--max-window and --receivers must be at least 1");
    }
    if !(a.alpha > 1.0 && a.beta > a.alpha) {
        bail!("paper 03's flow control needs β > α > 1 (got --alpha {} --beta {})", a.alpha, a.beta);
    }
    if !(0.0..100.0).contains(&a.loss_tolerance) {
        bail!("--loss-tolerance is a percentage from 0 up to 100, not {}", a.loss_tolerance);
    }
    if a.fec > 64 || (a.fec == 0 && a.fec_proactive > 0) || a.fec_proactive > 64 {
        bail!("--fec takes 0..=64 packets per block, and --fec-proactive (at most 64) needs --fec above 0");
    }
    if !(576..=65_507).contains(&a.max_datagram) {
        bail!("--max-datagram must be between 576 and 65507 bytes");
    }
    let security = a.net.security()?;
    let mode = crate::keys::describe(security.as_ref());
    let src = open_source(&a.file)?;
    let cfg = SenderConfig {
        seed: crate::net::random_u64(),
        max_datagram: a.max_datagram,
        announce_wait: secs(a.wait, "--wait")?,
        min_receivers: a.receivers,
        artp_max: Duration::from_micros(a.artp_max),
        default_timeout: Duration::from_millis(a.timeout_floor.max(1)),
        max_window: a.max_window,
        completion_timeout: secs(a.completion_timeout, "--completion-timeout")?,
        receiver_timeout: secs(a.receiver_timeout, "--receiver-timeout")?,
        max_repair_passes: a.max_passes,
        max_loss: a.max_loss.map(|p| p / 100.0),
        pace: a.pace,
        max_rate: a.rate,
        alpha: a.alpha,
        beta: a.beta,
        loss_tolerance: a.loss_tolerance / 100.0,
        fec_k: a.fec,
        fec_proactive: a.fec_proactive,
        security,
        ..SenderConfig::default()
    };
    let info = Announcement {
        size: src.size,
        block: 0,
        artp_max_us: 0,
        repair_interval_ms: 0,
        fec_k: 0,
        hash: src.hash,
        name: name.clone(),
    };
    let multi = multi_progress();
    let main = transfer_bar(&multi, src.size.unwrap_or(0), "sent");
    let bars: std::cell::RefCell<Vec<(SocketAddr, ProgressBar)>> = std::cell::RefCell::new(Vec::new());
    eprintln!(
        "manyfold mcast: sending {name} ({}) to {} via {} ({mode}); waiting up to {:.0}s for {} receiver(s)",
        src.size.map_or("length unknown".into(), human_bytes),
        a.net.group,
        a.net.iface.as_deref().unwrap_or("the default route"),
        a.wait,
        a.receivers
    );
    let size_known = src.size;
    // The data phase, first DATA to all data sent once: what --rate holds.
    let (data_start, data_end) = (std::cell::Cell::new(None), std::cell::Cell::new(None));
    let on_event = |e: &SenderEvent| match e {
        SenderEvent::DataStarted => data_start.set(Some(std::time::Instant::now())),
        SenderEvent::ReceiverJoined { addr, from_sn, .. } => {
            let bar = transfer_bar(&multi, size_known.unwrap_or(0), &addr.ip().to_string());
            if *from_sn > 0 {
                multi.println(format!("{addr} joined late, from packet {from_sn}")).ok();
            }
            bars.borrow_mut().push((*addr, bar));
        }
        SenderEvent::ReceiverDone { client, outcome } if *outcome != ReceiverOutcome::Completed => {
            multi.println(format!("receiver {client:08x}: {}", outcome_text(*outcome))).ok();
        }
        SenderEvent::RepairStarted => {
            data_end.set(Some(std::time::Instant::now()));
            multi.println("all data sent once; repairing").ok();
        }
        _ => {}
    };
    let on_tick = |v: &SenderView| {
        let block = u64::from(v.block);
        if let Some(t) = v.progress.1 {
            main.set_length((u64::from(t) * block).min(size_known.unwrap_or(u64::MAX)));
        }
        main.set_position(u64::from(v.progress.0) * block);
        for r in &v.receivers {
            if let Some((_, bar)) = bars.borrow().iter().find(|(a, _)| *a == r.addr) {
                bar.set_length(main.length().unwrap_or(0));
                bar.set_position((u64::from(r.held) * block).min(main.length().unwrap_or(0)));
                // Dropped or failed: its bar ends there, saying so.
                if !matches!(r.outcome, ReceiverOutcome::Active | ReceiverOutcome::Completed) {
                    crate::report::end_failed(bar, outcome_text(r.outcome).trim_start_matches("FAILED: "));
                }
            }
        }
    };
    let view =
        manyfold::mcast::send_until(&a.net.net(), cfg, info, src.file, src.growth, on_signal(), on_event, on_tick)
            .await
            .with_context(|| format!("multicast to {}", a.net.group))?;
    main.finish_and_clear();
    multi.clear().ok();
    let data_phase = data_start.get().zip(data_end.get()).map(|(a, b)| b.saturating_duration_since(a));
    let ok = print_send_report(&view, &name, &mode, data_phase);
    if let Some(path) = &a.json {
        std::fs::write(path, send_json(&view, &name, &mode, data_phase))
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    if crate::net::lifecycle::signal().is_some() {
        return interrupted("every receiver was told (END with code 10, interrupted)");
    }
    if let Some(e) = view.failed {
        bail!("{e}");
    }
    // Started after --wait with fewer than asked for: those got the file,
    // but not what the command was told to do.
    if view.receivers.len() < a.receivers {
        bail!(
            "only {} of the {} receivers asked for (--receivers {}) joined, the wait for them ended after {} s{}",
            view.receivers.len(),
            a.receivers,
            a.receivers,
            a.wait,
            if ok { "; those that joined have the file" } else { "" }
        );
    }
    if !ok {
        bail!("not every receiver has the file");
    }
    Ok(())
}

fn outcome_text(o: ReceiverOutcome) -> &'static str {
    match o {
        ReceiverOutcome::Active => "still receiving",
        ReceiverOutcome::Completed => "completed, hash verified",
        ReceiverOutcome::HashMismatch => "FAILED: the whole-file hash did not match",
        ReceiverOutcome::Incomplete => "DROPPED: still missing data at the completion timeout",
        ReceiverOutcome::Unresponsive => "DROPPED: unresponsive",
        ReceiverOutcome::TooManyPasses => "DROPPED: too many repair passes",
        ReceiverOutcome::TooLossy => "DROPPED: reported loss above --max-loss",
    }
}

/// Prints the final report; returns whether every receiver completed.
fn print_send_report(v: &SenderView, name: &str, mode: &str, data_phase: Option<Duration>) -> bool {
    let st = &v.stats;
    let total = v.progress.1.unwrap_or(v.progress.0);
    let bytes = (u64::from(total) * u64::from(v.block)).max(1);
    let sent = st.data_packets + st.parity_packets + st.repair_multicast + st.repair_unicast;
    let windows = (st.windows_confirmed + st.windows_expired).max(1);
    let networks: std::collections::BTreeSet<u32> = v.receivers.iter().map(|r| r.network).collect();
    println!(
        "{name}: {} in {} ({} per receiver) to {} receiver(s) on {} network(s), after {} announcing; {mode}",
        human_bytes(bytes),
        human_duration(v.transfer),
        human_rate(bytes, v.transfer),
        v.receivers.len(),
        networks.len(),
        human_duration(v.elapsed.saturating_sub(v.transfer))
    );
    if let Some(d) = data_phase {
        println!(
            "  data      every packet sent once in {} ({} on the wire)",
            human_duration(d),
            human_rate(sent_bytes(v), d)
        );
    }
    println!(
        "  packets   {} data, {} parity, {} repairs by multicast, {} by unicast: {:.3} packets sent per packet of the file",
        st.data_packets,
        st.parity_packets,
        st.repair_multicast,
        st.repair_unicast,
        sent as f64 / f64::from(total.max(1))
    );
    println!(
        "  windows   {} confirmed, {} expired; last window {} packets, timer {:.0?}; feedback {:.2} per window ({} ACK, {} NACK), ARTP_max {:.1?}",
        st.windows_confirmed,
        st.windows_expired,
        v.window,
        v.timeout,
        (st.acks + st.nacks) as f64 / windows as f64,
        st.acks,
        st.nacks,
        v.artp_max
    );
    let mut all = !v.receivers.is_empty();
    for r in &v.receivers {
        all &= r.outcome == ReceiverOutcome::Completed;
        let key = r.peer_key.map_or(String::new(), |k| format!("; key {}…", &manyfold_proto::secure::hex(&k)[..16]));
        println!(
            "  {:<21} {}; joined at packet {}, reported {} lost, {} repair request(s){key}",
            r.addr.to_string(),
            outcome_text(r.outcome),
            r.joined_at,
            r.reported_lost,
            r.repair_passes
        );
    }
    all
}

/// The bytes of data, parity and repair datagrams sent (header included;
/// every DATA datagram carries a full block but maybe the last).
fn sent_bytes(v: &SenderView) -> u64 {
    let st = &v.stats;
    let packets = st.data_packets + st.parity_packets + st.repair_multicast + st.repair_unicast;
    packets * (u64::from(v.block) + manyfold_proto::wire::HEADER_LEN as u64)
}

fn send_json(v: &SenderView, name: &str, mode: &str, data_phase: Option<Duration>) -> String {
    use std::fmt::Write as _;
    let st = &v.stats;
    let mut s = String::new();
    let _ = write!(
        s,
        "{{\"name\":{name:?},\"mode\":{mode:?},\"data_s\":{},\"elapsed_s\":{},\"transfer_s\":{},\"packets\":{},\"block\":{},\"data_packets\":{},\"repair_multicast\":{},\"repair_unicast\":{},\"parity_packets\":{},\"acks\":{},\"nacks\":{},\"late_acks\":{},\"repair_requests\":{},\"status_reports\":{},\"windows_confirmed\":{},\"windows_expired\":{},\"artp_max_us\":{},\"receivers\":[",
        data_phase.map_or("null".to_string(), |d| d.as_secs_f64().to_string()),
        v.elapsed.as_secs_f64(),
        v.transfer.as_secs_f64(),
        v.progress.1.unwrap_or(v.progress.0),
        v.block,
        st.data_packets,
        st.repair_multicast,
        st.repair_unicast,
        st.parity_packets,
        st.acks,
        st.nacks,
        st.late_acks,
        st.repair_requests,
        st.status_reports,
        st.windows_confirmed,
        st.windows_expired,
        v.artp_max.as_micros()
    );
    for (i, r) in v.receivers.iter().enumerate() {
        let _ = write!(
            s,
            "{}{{\"addr\":\"{}\",\"network\":{},\"outcome\":\"{:?}\",\"joined_at\":{},\"reported_lost\":{},\"repair_passes\":{}}}",
            if i > 0 { "," } else { "" },
            r.addr,
            r.network,
            r.outcome,
            r.joined_at,
            r.reported_lost,
            r.repair_passes
        );
    }
    s.push_str("],\"windows\":[");
    for (i, w) in v.windows.iter().enumerate() {
        let _ = write!(
            s,
            "{}[{},{},{},{}]",
            if i > 0 { "," } else { "" },
            w.size,
            u8::from(w.confirmed),
            w.feedback,
            w.timeout.as_micros()
        );
    }
    s.push_str("]}\n");
    s
}

/// The receiver's store: a temporary file renamed once verified, or a
/// device written in place.
struct Sink {
    target: Target,
    overwrite: bool,
    part: Option<PartFile>,
    device: Option<File>,
    size: Option<u64>,
    written: u64,
}

enum Target {
    Dir(PathBuf),
    Path(PathBuf),
    Stdout,
}

impl Sink {
    fn file(&self) -> Option<&File> {
        self.device.as_ref().or(self.part.as_ref().map(|p| p.file()))
    }
}

fn is_block_device(path: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    std::fs::metadata(path).is_ok_and(|m| m.file_type().is_block_device())
}

impl McastSink for Sink {
    fn announced(&mut self, info: &Announcement) -> std::io::Result<()> {
        let io_err = |e: anyhow::Error| std::io::Error::other(format!("{e:#}"));
        if self.file().is_none() {
            match &self.target {
                Target::Path(p) if is_block_device(p) => {
                    self.device = Some(OpenOptions::new().write(true).read(true).open(p)?);
                }
                Target::Path(p) => self.part = Some(PartFile::create(p).map_err(io_err)?),
                Target::Dir(d) => {
                    let name = &info.name;
                    if name.is_empty() || name == "." || name == ".." || name.starts_with('.') {
                        return Err(std::io::Error::new(
                            std::io::ErrorKind::InvalidData,
                            format!("the sender announced an unacceptable file name {name:?}"),
                        ));
                    }
                    let path = d.join(name);
                    if path.exists() && !self.overwrite {
                        return Err(std::io::Error::new(
                            std::io::ErrorKind::AlreadyExists,
                            format!("file exists: {} (use --overwrite)", path.display()),
                        ));
                    }
                    self.part = Some(PartFile::create(&path).map_err(io_err)?);
                }
                Target::Stdout => {
                    let tmp = std::env::temp_dir().join(format!("manyfold-mcast-{:016x}", crate::net::random_u64()));
                    self.part = Some(PartFile::create(&tmp).map_err(io_err)?);
                }
            }
        }
        if let (Some(size), None) = (info.size, self.size) {
            self.size = Some(size);
            if let Some(p) = &self.part {
                p.file().set_len(size)?;
            }
        }
        Ok(())
    }

    fn write_at(&mut self, offset: u64, data: &[u8]) -> std::io::Result<()> {
        let f = self.file().ok_or_else(|| std::io::Error::other("data before the session was described"))?;
        f.write_all_at(data, offset)?;
        self.written += data.len() as u64;
        Ok(())
    }

    fn read_at(&mut self, offset: u64, out: &mut [u8]) -> std::io::Result<usize> {
        let f = self.file().ok_or_else(|| std::io::Error::other("no data stored yet"))?;
        let mut got = 0;
        while got < out.len() {
            match f.read_at(&mut out[got..], offset + got as u64)? {
                0 => break,
                n => got += n,
            }
        }
        Ok(got)
    }

    fn verify(&mut self, info: &Announcement) -> std::io::Result<bool> {
        let (Some(f), Some(size), Some(want)) = (self.file(), info.size, info.hash) else {
            return Ok(false);
        };
        if self.part.is_some() {
            f.set_len(size)?;
        }
        let mut hasher = blake3::Hasher::new();
        let mut buf = vec![0u8; 1 << 20];
        let mut at = 0u64;
        while at < size {
            let want_n = ((size - at) as usize).min(buf.len());
            let n = f.read_at(&mut buf[..want_n], at)?;
            if n == 0 {
                return Ok(false);
            }
            hasher.update(&buf[..n]);
            at += n as u64;
        }
        Ok(*hasher.finalize().as_bytes() == want)
    }
}

async fn recv(a: RecvArgs) -> Result<()> {
    let target = match (&a.dir, &a.output, a.stdout) {
        (Some(d), None, false) => {
            if !d.is_dir() {
                bail!("--dir {}: not a directory", d.display());
            }
            Target::Dir(d.clone())
        }
        (None, Some(p), false) => Target::Path(p.clone()),
        (None, None, true) => Target::Stdout,
        _ => bail!("say where the file goes: --dir DIR, --output PATH or --stdout"),
    };
    let network = match &a.network {
        Some(n) => {
            let h = blake3::hash(n.as_bytes());
            u32::from_be_bytes(h.as_bytes()[..4].try_into().expect("4 bytes"))
        }
        None => default_network(&a.net)?,
    };
    let security = a.net.security()?;
    let mode = crate::keys::describe(security.as_ref());
    let cfg = ReceiverConfig {
        seed: crate::net::random_u64(),
        network,
        sender_timeout: secs(a.sender_timeout, "--sender-timeout")?,
        security,
        ..ReceiverConfig::default()
    };
    let wait = a.wait.map(|w| secs(w, "--wait")).transpose()?;
    let mut sink = Sink { target, overwrite: a.overwrite, part: None, device: None, size: None, written: 0 };
    let multi = multi_progress();
    let bar = crate::report::waiting_bar(&multi, "received", "waiting for a sender's session");
    eprintln!("manyfold mcast: listening on {} for a session ({mode})", a.net.group);
    let mut announced = false;
    let mut told_ignored = None;
    let on_tick = |v: &ReceiverView| {
        if let Some((session, why)) = v.ignored.filter(|_| v.info.is_none()) {
            if told_ignored != Some(session) {
                told_ignored = Some(session);
                // The library says what is wrong; the CLI names its flag.
                let hint = match why {
                    manyfold_proto::mcast::Ignored::ProtectedSession => " (give --key-file)",
                    manyfold_proto::mcast::Ignored::PlainSession => " (the sender gave no --key-file)",
                    _ => "",
                };
                multi.println(format!("heard session {session:08x} but not joining it: {why}{hint}")).ok();
            }
        }
        if let Some(info) = &v.info {
            if !announced {
                announced = true;
                multi
                    .println(format!(
                        "session from {}: {} ({})",
                        v.sender.map_or("?".into(), |s| s.to_string()),
                        info.name,
                        info.size.map_or("length unknown".into(), human_bytes)
                    ))
                    .ok();
            }
            let block = u64::from(info.block);
            if let Some(t) = v.total {
                crate::report::show_known(&bar, (u64::from(t) * block).min(info.size.unwrap_or(u64::MAX)));
            }
            bar.set_position(v.held * block);
        }
    };
    let received = manyfold::mcast::receive_until(&a.net.net(), cfg, &mut sink, wait, on_signal(), on_tick).await;
    if crate::net::lifecycle::signal().is_some() {
        // The sink (and its partial file) goes with this function.
        bar.finish_and_clear();
        return interrupted("the sender was told, and the partial file was deleted");
    }
    let (outcome, view) = received.with_context(|| format!("receiving from {}", a.net.group))?;
    bar.finish_and_clear();
    let info = view.info.clone();
    let name = info.as_ref().map_or("?".to_string(), |i| i.name.clone());
    let st = view.stats;
    let summary = format!(
        "{} packets first-hand, {} repaired, {} rebuilt from {} parity, {} duplicates; sent {} ACK ({} suppressed), {} NACK ({} suppressed), {} repair request(s)",
        st.data_packets,
        st.repairs_received,
        st.fec_recovered,
        st.parity_received,
        st.duplicates,
        st.acks_sent,
        st.acks_suppressed,
        st.nacks_sent,
        st.nacks_suppressed,
        st.repair_requests
    );
    let encrypted = a.net.key_file.is_some();
    let failed = |why: String| -> Result<()> {
        crate::report::emit_json(|| recv_json(&view, None, Some(&why), encrypted));
        Err(anyhow::anyhow!(why))
    };
    match outcome {
        ReceiveOutcome::Completed => {
            let size = info.as_ref().and_then(|i| i.size).unwrap_or(0);
            let stored = match &sink.target {
                Target::Stdout => {
                    let part = sink.part.take().context("no data")?;
                    let mut f = File::open(part.path())?;
                    let mut out = std::io::stdout().lock();
                    std::io::copy(&mut f, &mut out).context("cannot write standard output")?;
                    out.flush()?;
                    None
                }
                Target::Dir(dir) => Some(dir.join(&name)),
                Target::Path(path) => Some(path.clone()),
            };
            if let Some(part) = sink.part.take() {
                part.commit(a.overwrite)?;
            } else if let Some(dev) = &sink.device {
                dev.sync_all()?;
            }
            let text = format!(
                "{name}: {} received and verified (BLAKE3) in {} ({}); {mode}\n  {summary}",
                human_bytes(size),
                human_duration(view.elapsed),
                human_rate(size, view.elapsed)
            );
            // On stderr: stdout may be the file (--stdout).
            match crate::report::output() {
                crate::report::Output::Text => eprintln!("{text}"),
                crate::report::Output::Json => println!("{}", recv_json(&view, stored.as_deref(), None, encrypted)),
                crate::report::Output::Quiet => {}
            }
            Ok(())
        }
        ReceiveOutcome::HashMismatch => {
            failed(format!("{name}: every packet arrived but the BLAKE3 hash did not match; nothing kept"))
        }
        ReceiveOutcome::Ended { code } => failed(format!("{name}: {}", ended_text(code))),
        ReceiveOutcome::SenderLost => {
            failed(format!("{name}: nothing from the sender for {:.0}s; gave up ({summary})", a.sender_timeout))
        }
    }
}

/// `mcast recv --json`: the session's object (fields in RecvArgs::json).
fn recv_json(view: &ReceiverView, stored: Option<&Path>, error: Option<&str>, encrypted: bool) -> serde_json::Value {
    let info = view.info.as_ref();
    let st = &view.stats;
    let bytes = info.and_then(|i| i.size);
    let secs = view.elapsed.as_secs_f64();
    serde_json::json!({
        "ok": error.is_none(),
        "error": error,
        "name": info.map(|i| &i.name),
        "sender": view.sender.map(|s| s.to_string()),
        "stored": stored,
        "bytes": bytes,
        "seconds": secs,
        "goodput_bytes_per_second": bytes.map(|b| if secs > 0.0 { b as f64 / secs } else { 0.0 }),
        "blake3": info.and_then(|i| i.hash).map(|h| manyfold_proto::secure::hex(&h)),
        "encrypted": encrypted,
        "data_packets": st.data_packets,
        "repairs_received": st.repairs_received,
        "fec_recovered": st.fec_recovered,
        "parity_received": st.parity_received,
        "duplicates": st.duplicates,
        "acks_sent": st.acks_sent,
        "acks_suppressed": st.acks_suppressed,
        "nacks_sent": st.nacks_sent,
        "nacks_suppressed": st.nacks_suppressed,
        "repair_requests": st.repair_requests,
    })
}

/// How the sender ended a session this receiver had not completed, said
/// once ("the sender was interrupted", not "the sender ended the session:
/// the sender was interrupted").
fn ended_text(code: Option<u16>) -> String {
    match code {
        None => "the sender ended the session before this receiver had the file".into(),
        Some(codes::INTERRUPTED) => "the sender was interrupted (Ctrl-C or SIGTERM on its side)".into(),
        Some(codes::REFUSED) => "the sender refused this receiver (its receiver table is full)".into(),
        Some(codes::PROTECTION_MISMATCH) => {
            "the sender refused this receiver: the session is encrypted and this receiver gave no --key-file".into()
        }
        Some(codes::AUTHENTICATION_FAILED) => {
            "the sender refused this receiver: our key is not one it accepts (another PSK, or not in its --peers-file)"
                .into()
        }
        Some(codes::INCOMPLETE) => {
            "the sender dropped this receiver: still missing data at its completion timeout".into()
        }
        Some(codes::UNRESPONSIVE) => "the sender dropped this receiver: it heard nothing from it".into(),
        Some(codes::TOO_MANY_PASSES) => "the sender dropped this receiver: too many repair requests".into(),
        Some(codes::TOO_LOSSY) => "the sender dropped this receiver: its loss is above the sender's --max-loss".into(),
        Some(c) => format!("the sender ended the session with error code {c}"),
    }
}

/// The default network id: the /24 of the address this host would use
/// towards the group (spec §16.4).
fn default_network(net: &NetArgs) -> Result<u32> {
    let probe = std::net::UdpSocket::bind("0.0.0.0:0")?;
    let local = match probe.connect(SocketAddr::V4(net.group)).and_then(|_| probe.local_addr()) {
        Ok(a) => a,
        Err(_) => return Ok(0),
    };
    Ok(network_of(local))
}
