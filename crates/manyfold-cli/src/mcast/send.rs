//! `manyfold mcast send`: the source (a file, a block device, standard
//! input, or a directory bundle), the session's bars, the final report
//! and its JSON (spec §16).

use std::cell::{Cell, RefCell};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::net::SocketAddr;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use indicatif::ProgressBar;
use manyfold::mcast::{McastSource, ReceiverOutcome, ReceiverReport, SenderView, SourceGrowth};
use manyfold_proto::mcast::{Announcement, SenderConfig, SenderEvent};
use tokio::sync::watch;

use super::bundle::Bundle;
use super::hosts::Hosts;
use super::{interrupted, on_signal, secs, SendArgs};
use crate::report::{multi_progress, outln, transfer_bar};
use crate::size::{human_bytes, human_duration, human_rate};

/// What a session reads: one file (or device, or spooled standard input),
/// or a bundle of several (spec §16.10).
enum Object {
    File(File),
    Bundle(Box<Bundle>),
}

impl McastSource for Object {
    fn copy_at(&self, offset: u64, out: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Object::File(f) => f.copy_at(offset, out),
            Object::Bundle(b) => b.copy_at(offset, out),
        }
    }
}

fn hashing_bar(size: u64) -> ProgressBar {
    let bar = multi_progress().add(ProgressBar::new(size));
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "   hashing [{bar:32.cyan/blue}] {decimal_bytes}/{decimal_total_bytes}",
        )
        .expect("static template"),
    );
    bar
}

/// A bundle of `paths`: its object, size and hash.
fn open_bundle(paths: &[PathBuf]) -> Result<Source> {
    for p in paths {
        if p == Path::new("-") {
            bail!("standard input (-) goes alone, not with other files");
        }
    }
    let bar = hashing_bar(0);
    let b = Bundle::build(paths, &mut |n| bar.set_position(n))?;
    bar.finish_and_clear();
    Ok(Source {
        size: Some(b.size()),
        hash: Some(b.hash()),
        object: Object::Bundle(Box::new(b)),
        growth: None,
        _spool: None,
    })
}

/// Opens the source: a regular file or block device (size and hash known
/// now), or standard input spooled to a temporary file as it arrives.
struct Source {
    object: Object,
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
        return Ok(Source { object: Object::File(file), size: None, hash: None, growth: Some(rx), _spool: Some(tmp) });
    }
    let mut file = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let meta = file.metadata()?;
    if meta.is_dir() {
        return open_bundle(&[path.to_path_buf()]);
    }
    // A block device's length is where its end is.
    let size = file.seek(SeekFrom::End(0)).with_context(|| format!("cannot size {}", path.display()))?;
    file.seek(SeekFrom::Start(0))?;
    let bar = hashing_bar(size);
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
    let hash = Some(*hasher.finalize().as_bytes());
    Ok(Source { object: Object::File(file), size: Some(size), hash, growth: None, _spool: None })
}

pub(super) async fn send(a: SendArgs) -> Result<()> {
    let first = &a.files[0];
    // `.` names the current directory by its own name; a label of a
    // bundle never starts with a dot (receivers refuse hidden names).
    let own_name = |p: &Path| {
        let canonical = if p.file_name().is_none() { std::fs::canonicalize(p).ok() } else { None };
        canonical.as_deref().unwrap_or(p).file_name().map(|n| n.to_string_lossy().into_owned())
    };
    let label = |n: String| match n.trim_start_matches('.') {
        "" => "bundle".to_string(),
        t => t.to_string(),
    };
    let name = match &a.name {
        Some(n) => n.clone(),
        None if a.files.len() > 1 => {
            format!("{} and {} more", label(own_name(first).unwrap_or_default()), a.files.len() - 1)
        }
        None if first == Path::new("-") => "stdin".into(),
        None if first.is_dir() => label(own_name(first).context("FILE has no file name")?),
        None => own_name(first).context("FILE has no file name")?,
    };
    if name.is_empty() || name.contains('/') || name == "." || name == ".." || name.len() > 255 {
        bail!("--name must be a plain file name of at most 255 bytes, not {name:?}");
    }
    if let Some(p) = a.max_loss {
        if !(0.0..=100.0).contains(&p) {
            bail!("--max-loss is a percentage between 0 and 100, not {p}");
        }
    }
    let hosts = a.hosts.as_deref().map(Hosts::load).transpose()?;
    // --hosts without --receivers: wait for every listed host.
    let receivers = a.receivers.unwrap_or(hosts.as_ref().map_or(1, |h| h.hosts.len()));
    if a.max_window == 0 || receivers == 0 {
        bail!("--max-window and --receivers must be at least 1");
    }
    if !(a.alpha > 1.0 && a.beta > a.alpha) {
        bail!("paper 03's flow control needs β > α > 1 (got --alpha {} --beta {})", a.alpha, a.beta);
    }
    if !(0.0..100.0).contains(&a.loss_tolerance) {
        bail!("--loss-tolerance is a percentage from 0 up to 100, not {}", a.loss_tolerance);
    }
    if a.fec > 256 || (a.fec == 0 && a.fec_proactive > 0) || a.fec_proactive > 64 {
        bail!("--fec takes 0..=256 packets per block, and --fec-proactive (at most 64) needs --fec above 0");
    }
    if let (Some(min), Some(cap)) = (a.min_rate, a.rate) {
        if min > cap {
            bail!("--min-rate ({min} B/s) is above --rate ({cap} B/s): every receiver would be dropped");
        }
    }
    if !(576..=65_507).contains(&a.max_datagram) {
        bail!("--max-datagram must be between 576 and 65507 bytes");
    }
    let security = a.net.security()?;
    let mode = crate::keys::describe(security.as_ref());
    let src = if a.files.len() > 1 { open_bundle(&a.files)? } else { open_source(first)? };
    if let Object::Bundle(b) = &src.object {
        let (n, bytes) = b.manifest.totals();
        eprintln!(
            "manyfold mcast: a bundle (spec §16.10) of {} entries: {n} file(s), {} of files",
            b.manifest.entries.len(),
            human_bytes(bytes)
        );
    }
    let cfg = SenderConfig {
        seed: crate::net::random_u64(),
        max_datagram: a.max_datagram,
        announce_wait: secs(a.wait, "--wait")?,
        min_receivers: receivers,
        artp_max: Duration::from_micros(a.artp_max),
        default_timeout: Duration::from_millis(a.timeout_floor.max(1)),
        max_window: a.max_window,
        windows_in_flight: a.windows_in_flight,
        completion_timeout: secs(a.completion_timeout, "--completion-timeout")?,
        receiver_timeout: secs(a.receiver_timeout, "--receiver-timeout")?,
        max_repair_passes: a.max_passes,
        max_loss: a.max_loss.map(|p| p / 100.0),
        pace: a.pace,
        queue_target: (a.queue_target > 0).then(|| Duration::from_millis(a.queue_target)),
        max_rate: a.rate,
        min_rate: a.min_rate,
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
    let bars: RefCell<Vec<(SocketAddr, ProgressBar)>> = RefCell::new(Vec::new());
    eprintln!(
        "manyfold mcast: sending {name} ({}) to {} via {} ({mode}); waiting up to {:.0}s for {} receiver(s)",
        src.size.map_or("length unknown".into(), human_bytes),
        a.net.group,
        a.net.iface.as_deref().unwrap_or("the default route"),
        a.wait,
        receivers
    );
    let size_known = src.size;
    // The data phase, first DATA to all data sent once: what --rate holds.
    let (data_start, data_end) = (Cell::new(None), Cell::new(None));
    let left = RefCell::new(Vec::new());
    let on_event = |e: &SenderEvent| match e {
        SenderEvent::DataStarted => data_start.set(Some(Instant::now())),
        SenderEvent::ReceiverJoined { addr, from_sn, .. } => {
            let bar = transfer_bar(&multi, size_known.unwrap_or(0), &addr.ip().to_string());
            if *from_sn > 0 {
                multi.println(format!("{addr} joined late, from packet {from_sn}")).ok();
            }
            bars.borrow_mut().push((*addr, bar));
        }
        // A receiver that left says why (its ReceiverDone, Incomplete, follows).
        SenderEvent::ReceiverLeft { client, code, .. } => {
            left.borrow_mut().push(*client);
            multi.println(format!("receiver {client:08x}: {}", left_text(*code))).ok();
        }
        SenderEvent::ReceiverDone { client, outcome }
            if *outcome != ReceiverOutcome::Completed && !left.borrow().contains(client) =>
        {
            multi.println(format!("receiver {client:08x}: {}", outcome_text(*outcome))).ok();
        }
        SenderEvent::RepairStarted => {
            data_end.set(Some(Instant::now()));
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
                    crate::report::end_failed(bar, ending_text(r).trim_start_matches("FAILED: "));
                }
            }
        }
    };
    // spec §16.8: with --hosts, a REGISTER from anyone else is refused.
    let refused = RefCell::new(Vec::<SocketAddr>::new());
    let admission = |addr: SocketAddr, client: u32| {
        let ok = hosts.as_ref().is_none_or(|h| h.admits(addr, client));
        if !ok && !refused.borrow().contains(&addr) {
            refused.borrow_mut().push(addr);
            multi.suspend(|| eprintln!("refused {addr} (id {client:08x}): not in --hosts"));
        }
        ok
    };
    let started = Instant::now();
    let view = manyfold::mcast::send_admitting(
        &a.net.net(),
        cfg,
        info,
        src.object,
        src.growth,
        admission,
        on_signal(),
        on_event,
        on_tick,
    )
    .await
    .with_context(|| format!("multicast to {}", a.net.group))
    .map_err(|e| hint_datagram_size(e, &a.net, a.max_datagram))?;
    main.finish_and_clear();
    multi.clear().ok();
    let data_phase = data_start.get().zip(data_end.get()).map(|(a, b)| b.saturating_duration_since(a));
    let ok = print_send_report(&view, &name, &mode, data_phase);
    if let Some(path) = &a.json {
        let announce = data_start.get().map(|t| t.saturating_duration_since(started));
        std::fs::write(path, send_json(&view, &name, &mode, announce, data_phase))
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    if crate::net::lifecycle::signal().is_some() {
        return interrupted("every receiver was told (END with code 10, interrupted)");
    }
    let joined: Vec<String> = view.receivers.iter().map(|r| format!("{} (id {:08x})", r.addr.ip(), r.client)).collect();
    let joined_text = if joined.is_empty() { "none".to_string() } else { joined.join(", ") };
    // Every host of --hosts must have the file; those that do not are named.
    if let Some(h) = &hosts {
        let missing = h.missing(&view.receivers, &ending_text);
        if !missing.is_empty() {
            bail!(
                "{} of the {} receivers in --hosts did not get the file: {}; joined: {joined_text}",
                missing.len(),
                h.hosts.len(),
                missing.join(", ")
            );
        }
    }
    // Started after --wait with fewer than asked for: those got the file,
    // but not what the command was told to do.
    if view.receivers.len() < receivers {
        bail!(
            "only {} of the {receivers} receivers asked for (--receivers {receivers}) joined, the wait for them ended after {} s{}; joined: {joined_text}; {} missing",
            view.receivers.len(),
            a.wait,
            if ok { "; those that joined have the file" } else { "" },
            receivers - view.receivers.len()
        );
    }
    if let Some(e) = view.failed {
        bail!("{e}");
    }
    if !ok {
        bail!("not every receiver has the file");
    }
    Ok(())
}

/// A send refused as longer than the interface's MTU (EMSGSIZE: the
/// datagrams go unfragmented) says what to change: --max-datagram, at
/// most the MTU of --iface (when it can be read) less the IP and UDP headers.
fn hint_datagram_size(e: anyhow::Error, net: &super::NetArgs, max_datagram: usize) -> anyhow::Error {
    let msgsize = Some(rustix::io::Errno::MSGSIZE.raw_os_error());
    if !e.chain().any(|c| c.downcast_ref::<std::io::Error>().is_some_and(|io| io.raw_os_error() == msgsize)) {
        return e;
    }
    // IPv4 and UDP headers take 28 bytes of the MTU; IPv6 and UDP, 48.
    let headers = if net.group.is_ipv4() { 28 } else { 48 };
    let iface = net.iface.as_deref();
    let mtu = iface
        .and_then(|i| std::fs::read_to_string(format!("/sys/class/net/{i}/mtu")).ok())
        .and_then(|s| s.trim().parse::<usize>().ok());
    let hint = match (iface, mtu) {
        (Some(i), Some(mtu)) if mtu > headers => {
            format!("{i}'s MTU of {mtu} bytes: give --max-datagram {} or less", mtu - headers)
        }
        _ => format!(
            "the interface's MTU: give --max-datagram the MTU less {headers} bytes or less (`ip link` shows it)"
        ),
    };
    // The hint after what failed, not before it as a context would go.
    anyhow::anyhow!("{e:#}: datagrams of {max_datagram} bytes (--max-datagram) do not fit {hint}")
}

/// Why a receiver left a session itself (its STATUS's code, spec §16.7).
fn left_text(code: manyfold::ErrorCode) -> String {
    match code.0 {
        manyfold::mcast::codes::INTERRUPTED => "LEFT: interrupted (Ctrl-C or SIGTERM on its side)".into(),
        c if c == manyfold::ErrorCode::APPLICATION.0 => {
            "LEFT: it could not store what it received (a refused name in a bundle, a full disk, …; its report says)"
                .into()
        }
        c => format!("LEFT with error code {c}"),
    }
}

/// How a receiver's part ended, in words: why it left, if it did, else
/// its outcome (a receiver that left ends Incomplete).
fn ending_text(r: &ReceiverReport) -> String {
    r.left.map_or_else(|| outcome_text(r.outcome).into(), left_text)
}

pub(super) fn outcome_text(o: ReceiverOutcome) -> &'static str {
    match o {
        ReceiverOutcome::Active => "still receiving",
        ReceiverOutcome::Completed => "completed, hash verified",
        ReceiverOutcome::HashMismatch => "FAILED: the whole-file hash did not match",
        ReceiverOutcome::Incomplete => "DROPPED: still missing data at the completion timeout",
        ReceiverOutcome::Unresponsive => "DROPPED: unresponsive",
        ReceiverOutcome::TooManyPasses => "DROPPED: too many repair passes",
        ReceiverOutcome::TooLossy => "DROPPED: reported loss above --max-loss",
        ReceiverOutcome::TooSlow => "DROPPED: took the data slower than --min-rate",
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
    // Ended before any data went (interrupted, or nobody joined): no rate.
    let once = (u64::from(v.progress.0) * u64::from(v.block)).min(bytes);
    let how = if st.data_packets == 0 || v.transfer.is_zero() {
        "not sent".to_string()
    } else if once < bytes {
        // Cut short (interrupted, everyone gone): how far it got, no rate
        // of the whole.
        format!("cut short after {} sent once, in {}", human_bytes(once), human_duration(v.transfer))
    } else {
        format!("in {} ({} per receiver)", human_duration(v.transfer), human_rate(bytes, v.transfer))
    };
    outln!(
        "{name}: {} {how} to {} receiver(s) on {} network(s), after {} announcing; {mode}",
        human_bytes(bytes),
        v.receivers.len(),
        networks.len(),
        human_duration(v.elapsed.saturating_sub(v.transfer))
    );
    if let Some(d) = data_phase {
        outln!(
            "  data      every packet sent once in {} ({} on the wire)",
            human_duration(d),
            human_rate(sent_bytes(v), d)
        );
    }
    outln!(
        "  packets   {} data, {} parity, {} repairs by multicast, {} by unicast: {:.3} packets sent per packet of the file",
        st.data_packets,
        st.parity_packets,
        st.repair_multicast,
        st.repair_unicast,
        sent as f64 / f64::from(total.max(1))
    );
    outln!(
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
        let outcome = ending_text(r);
        outln!(
            "  {:<21} id {:08x}: {}; joined at packet {}, reported {} lost, {} repair request(s){key}",
            r.addr.to_string(),
            r.client,
            outcome,
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

/// `announce`: from the start to the first DATA; `data_phase`: from there
/// until every packet was sent once.
fn send_json(
    v: &SenderView,
    name: &str,
    mode: &str,
    announce: Option<Duration>,
    data_phase: Option<Duration>,
) -> String {
    use std::fmt::Write as _;
    let st = &v.stats;
    let mut s = String::new();
    let _ = write!(
        s,
        "{{\"name\":{name:?},\"mode\":{mode:?},\"announce_s\":{},\"data_s\":{},\"elapsed_s\":{},\"transfer_s\":{},\"packets\":{},\"block\":{},\"data_packets\":{},\"repair_multicast\":{},\"repair_unicast\":{},\"parity_packets\":{},\"parity_proactive\":{},\"parity_topped_up\":{},\"parity_repair\":{},\"acks\":{},\"nacks\":{},\"late_acks\":{},\"repair_requests\":{},\"status_reports\":{},\"windows_confirmed\":{},\"windows_expired\":{},\"artp_max_us\":{},\"receivers\":[",
        announce.map_or("null".to_string(), |d| d.as_secs_f64().to_string()),
        data_phase.map_or("null".to_string(), |d| d.as_secs_f64().to_string()),
        v.elapsed.as_secs_f64(),
        v.transfer.as_secs_f64(),
        v.progress.1.unwrap_or(v.progress.0),
        v.block,
        st.data_packets,
        st.repair_multicast,
        st.repair_unicast,
        st.parity_packets,
        st.parity_proactive,
        st.parity_topped_up,
        st.parity_repair,
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
            "{}{{\"addr\":\"{}\",\"client\":\"{:08x}\",\"network\":{},\"group\":{},\"behind\":{},\"outcome\":\"{:?}\",\"joined_at\":{},\"reported_lost\":{},\"repair_passes\":{}}}",
            if i > 0 { "," } else { "" },
            r.addr,
            r.client,
            r.network,
            r.group.map_or("null".to_string(), |g| g.to_string()),
            r.behind,
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
            "{}[{},{},{},{},{},{},{}]",
            if i > 0 { "," } else { "" },
            w.size,
            u8::from(w.confirmed),
            w.feedback,
            w.timeout.as_micros(),
            w.worst_lost,
            w.worst_receiver.map_or(-1, |r| r as i64),
            u8::from(w.cut_for_loss)
        );
    }
    s.push_str("]}\n");
    s
}
