//! `manyfold mcast recv`: one session, or (`--daemon`) session after
//! session into a directory until stopped; the report and `--json`
//! object of each (spec §16, §16.10).

use std::collections::HashSet;
use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use manyfold::mcast::{codes, network_of, ReceiveOutcome, ReceiverView};
use manyfold_proto::mcast::ReceiverConfig;
use serde_json::{json, Value};

use super::bundle::{Kind, Manifest};
use super::sink::{Sink, Target};
use super::{interrupted, on_signal, secs, NetArgs, RecvArgs};
use crate::report::{multi_progress, outln};
use crate::size::{human_bytes, human_duration, human_rate};

/// How one session ended for this receiver.
enum Ended {
    /// Stored and verified.
    Received,
    /// Failed (the report and JSON object already out); why.
    Failed(anyhow::Error),
    /// SIGINT or SIGTERM: the sender was told and no partial file is
    /// left; `during`: a session was under way.
    Interrupted { during: bool },
}

/// What every session of one `mcast recv` shares.
struct Setup {
    target: Target,
    network: u32,
    /// No --network: the sender groups this receiver (spec §16.12).
    auto_group: bool,
    mode: String,
    wait: Option<Duration>,
}

pub(super) async fn recv(a: RecvArgs) -> Result<()> {
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
    let mode = crate::keys::describe(a.net.security()?.as_ref()).to_string();
    let wait = a.wait.map(|w| secs(w, "--wait")).transpose()?;
    secs(a.sender_timeout, "--sender-timeout")?;
    let setup = Setup { target, network, auto_group: a.network.is_none(), mode, wait };
    let mut done = HashSet::new();
    if !a.daemon {
        return match session(&a, &setup, &mut done).await? {
            Ended::Received => Ok(()),
            Ended::Failed(e) => Err(e),
            Ended::Interrupted { .. } => interrupted("the sender was told, and the partial file was deleted"),
        };
    }
    // uftpd's loop: each session's status line and report, until a signal.
    let (mut received, mut failed) = (0u64, 0u64);
    eprintln!(
        "manyfold mcast: receiving session after session on {} into {} ({}) until SIGINT or SIGTERM",
        a.net.group,
        a.dir.as_deref().map_or("?".into(), |d| d.display().to_string()),
        setup.mode
    );
    loop {
        match session(&a, &setup, &mut done).await? {
            Ended::Received => received += 1,
            Ended::Failed(e) => {
                failed += 1;
                eprintln!("manyfold mcast: session failed: {e:#}; waiting for the next");
            }
            Ended::Interrupted { during } => {
                let by = crate::net::lifecycle::signal().map_or("a signal", |s| s.name());
                eprintln!(
                    "manyfold mcast: stopped by {by} after {} session(s): {received} received, {failed} failed{}",
                    received + failed,
                    if during {
                        "; the session under way was left (its sender told) and its partial file deleted"
                    } else {
                        ""
                    }
                );
                return Ok(());
            }
        }
    }
}

/// One session: joins the next one the group carries (not one in
/// `done`), stores it, prints its status line and report (or JSON).
/// `Err`: this receiver cannot go on (sockets, no session within --wait).
async fn session(a: &RecvArgs, setup: &Setup, done: &mut HashSet<u32>) -> Result<Ended> {
    let cfg = ReceiverConfig {
        seed: crate::net::random_u64(),
        network: setup.network,
        auto_group: setup.auto_group,
        sender_timeout: secs(a.sender_timeout, "--sender-timeout")?,
        security: a.net.security()?,
        client_id: a.id,
        ..ReceiverConfig::default()
    };
    let mode = setup.mode.as_str();
    let mut sink = Sink::new(setup.target.clone(), a.overwrite);
    let multi = multi_progress();
    let bar = crate::report::waiting_bar(&multi, "received", "waiting for a sender's session");
    if !a.daemon {
        eprintln!("manyfold mcast: listening on {} for a session ({mode})", a.net.group);
    }
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
                        "session {} from {}: {} ({})",
                        v.session.map_or("?".into(), |s| format!("{s:08x}")),
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
    let before = done.clone();
    let received =
        manyfold::mcast::receive_session(&a.net.net(), cfg, &mut sink, setup.wait, done, on_signal(), on_tick).await;
    let session = done.difference(&before).next().map(|s| format!("{s:08x}"));
    bar.finish_and_clear();
    if crate::net::lifecycle::signal().is_some() {
        // The sink (and its partial file) goes with this function.
        return Ok(Ended::Interrupted { during: sink.heard.is_some() });
    }
    let encrypted = a.net.key_file.is_some();
    let (outcome, view) = match received {
        Ok(r) => r,
        // Our store failed or refused the session (the sender was told):
        // this session failed, a daemon goes on.
        Err(e) if sink.heard.is_some() => {
            let name = sink.heard.as_deref().unwrap_or("?");
            let why = format!("{name}: {e}");
            crate::report::emit_json(
                || json!({"ok": false, "error": why, "name": name, "session": session, "encrypted": encrypted}),
            );
            if a.daemon && crate::report::output() == crate::report::Output::Text {
                eprintln!("session {} ({name}): FAILED: {e}", session.as_deref().unwrap_or("?"));
            }
            return Ok(Ended::Failed(anyhow::anyhow!(why)));
        }
        Err(e) => return Err(e).with_context(|| format!("receiving from {}", a.net.group)),
    };
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
    let bundle = sink.bundle.take();
    let failed = |why: String| -> Result<Ended> {
        crate::report::emit_json(|| recv_json(&view, None, bundle.as_ref(), sink.check, Some(&why), encrypted));
        if crate::report::output() == crate::report::Output::Text && a.daemon {
            eprintln!("{}", status_line(&view, &name, Some(&why)));
        }
        Ok(Ended::Failed(anyhow::anyhow!(why)))
    };
    match outcome {
        ReceiveOutcome::Completed => {
            let size = info.as_ref().and_then(|i| i.size).unwrap_or(0);
            let stored = match (&sink.target, &bundle) {
                (Target::Dir(dir), Some(_)) => Some(dir.clone()),
                (Target::Stdout, _) => {
                    let part = sink.part.take().context("no data")?;
                    let mut f = File::open(part.path())?;
                    let mut out = std::io::stdout().lock();
                    std::io::copy(&mut f, &mut out).context("cannot write standard output")?;
                    out.flush()?;
                    None
                }
                (Target::Dir(dir), None) => Some(dir.join(&name)),
                (Target::Path(path), _) => Some(path.clone()),
            };
            if bundle.is_some() {
                // Its files are in place (spec §16.10); the spool goes.
                drop(sink.part.take());
            } else if let Some(part) = sink.part.take() {
                if let Err(e) = part.commit(a.overwrite) {
                    return failed(format!("{name}: {e:#}"));
                }
            } else if let Some(dev) = &sink.device {
                dev.sync_all()?;
            }
            let what = match &bundle {
                Some(m) => {
                    let (n, bytes) = m.totals();
                    format!("{n} file(s), {} in a bundle of {}", human_bytes(bytes), human_bytes(size))
                }
                None => human_bytes(size),
            };
            let mut text = format!(
                "{name}: {what} received and verified (BLAKE3) in {} ({}); {mode}\n  {summary}",
                human_duration(view.session_elapsed),
                human_rate(size, view.session_elapsed)
            );
            if let Some(m) = &bundle {
                for e in &m.entries {
                    text.push_str(&match &e.kind {
                        Kind::File { size, .. } => format!("\n  file    {} ({})", e.path, human_bytes(*size)),
                        Kind::Dir => format!("\n  dir     {}/", e.path),
                        Kind::Symlink { target } => format!("\n  link    {} -> {target}", e.path),
                    });
                }
            }
            // On stderr: stdout may be the file (--stdout).
            match crate::report::output() {
                crate::report::Output::Text => {
                    if a.daemon {
                        eprintln!("{}", status_line(&view, &name, None));
                    }
                    eprintln!("{text}");
                }
                crate::report::Output::Json => {
                    outln!("{}", recv_json(&view, stored.as_deref(), bundle.as_ref(), sink.check, None, encrypted))
                }
                crate::report::Output::Quiet => {}
            }
            Ok(Ended::Received)
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

/// A daemon's line per session: its id, sender, name, and how it went.
fn status_line(view: &ReceiverView, name: &str, error: Option<&str>) -> String {
    format!(
        "session {} from {} ({}): {}",
        view.session.map_or("?".into(), |s| format!("{s:08x}")),
        view.sender.map_or("?".into(), |s| s.to_string()),
        name,
        error.map_or("received".to_string(), |e| format!("FAILED: {e}"))
    )
}

/// `mcast recv --json`: the session's object (fields in RecvArgs::json).
fn recv_json(
    view: &ReceiverView,
    stored: Option<&Path>,
    bundle: Option<&Manifest>,
    check: Option<(std::time::Duration, bool)>,
    error: Option<&str>,
    encrypted: bool,
) -> Value {
    let info = view.info.as_ref();
    let st = &view.stats;
    let bytes = info.and_then(|i| i.size);
    let secs = view.session_elapsed.as_secs_f64();
    let files = bundle.map(|m| {
        m.entries
            .iter()
            .map(|e| match &e.kind {
                Kind::File { size, .. } => json!({"path": e.path, "type": "file", "bytes": size}),
                Kind::Dir => json!({"path": e.path, "type": "dir", "bytes": 0}),
                Kind::Symlink { target } => json!({"path": e.path, "type": "symlink", "bytes": 0, "target": target}),
            })
            .collect::<Vec<_>>()
    });
    json!({
        "ok": error.is_none(),
        "error": error,
        "name": info.map(|i| &i.name),
        "sender": view.sender.map(|s| s.to_string()),
        "session": view.session.map(|s| format!("{s:08x}")),
        "client": format!("{:08x}", view.client),
        "stored": stored,
        "files": files,
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
        "acks_deferred": st.acks_deferred,
        "acker_overtaken": st.acker_overtaken,
        "nacks_sent": st.nacks_sent,
        "nacks_suppressed": st.nacks_suppressed,
        "repair_requests": st.repair_requests,
        "dropped_malformed": st.dropped_malformed,
        "dropped_beyond_limit": st.dropped_beyond_limit,
        "lagged": st.lagged,
        "held_after_stall": st.held_after_stall,
        "reordered": st.reordered,
        "reorder_delay_max_us": st.reorder_delay_max.as_micros() as u64,
        "late_after_report": st.late_after_report,
        "check_s": check.map(|c| c.0.as_secs_f64()),
        "check_reread": check.map(|c| c.1),
    })
}

/// How the sender ended a session this receiver had not completed, said
/// once ("the sender was interrupted", not "the sender ended the session:
/// the sender was interrupted").
fn ended_text(code: Option<u16>) -> String {
    match code {
        None => "the sender ended the session before this receiver had the file".into(),
        Some(codes::INTERRUPTED) => "the sender was interrupted (Ctrl-C or SIGTERM on its side)".into(),
        Some(codes::REFUSED) => {
            "the sender refused this receiver: its --hosts list does not name it, or its receiver table is full".into()
        }
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
        Some(codes::TOO_SLOW) => {
            "the sender dropped this receiver: it took the data slower than the sender's --min-rate".into()
        }
        Some(c) => format!("the sender ended the session with error code {c}"),
    }
}

/// The default network id: the /24 of the address this host would use
/// towards the group (spec §16.4).
fn default_network(net: &NetArgs) -> Result<u32> {
    let any = if net.group.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" };
    let probe = std::net::UdpSocket::bind(any)?;
    let local = match probe.connect(net.group).and_then(|_| probe.local_addr()) {
        Ok(a) => a,
        Err(_) => return Ok(0),
    };
    Ok(network_of(local))
}
