//! The soak's group churn (spec §14): epochs of one group each. An epoch
//! binds a sender endpoint (lossy), starts receivers (plain endpoints that
//! accept one connection and check the frames on it), opens the group to
//! them and sends frames of random size at `--group-rate`, consecutive ids,
//! in `Mode::All`. Every `--churn-every` a receiver joins
//! (`add_destination`), is removed (`remove_destination`: its stream ends
//! after what it was sent) or drops out (its endpoint closes at once; the
//! group finds it gone). At the epoch's end the group closes, every
//! receiver still in it must have read every frame from its join point to
//! the last one sent, and all of them are joined.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use manyfold::{Destination, GroupConfig, GroupEvent, Left, Mode, StreamId};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tokio::io::AsyncReadExt;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::frame::{frame, Frame, FrameCheck};
use super::{bind, Plan, Tally, OP_LIMIT};
use crate::loopback::mf::check_protection;

/// Why a receiver is no longer meant to be in the group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Leaving {
    Removed,
    Dropped,
    /// Its join could not complete (refused, cut by the close): stopped.
    Stopped,
}

/// What a receiver read.
#[derive(Debug, Default)]
struct Received {
    first: Option<Frame>,
    last: Option<Frame>,
    /// Stopped by us (dropped out) rather than at the end of its stream.
    aborted: bool,
}

/// One receiver, as the sender's side of the soak tracks it.
struct Receiver {
    addr: SocketAddr,
    dest: Option<Destination>,
    /// The group message it receives from (its join point), once joined.
    first_msg: Option<u64>,
    leaving: Option<Leaving>,
    abort: Option<oneshot::Sender<()>>,
    task: JoinHandle<Result<Received>>,
}

impl Receiver {
    fn live(&self) -> bool {
        self.first_msg.is_some() && self.leaving.is_none()
    }

    fn stop(&mut self, why: Leaving) {
        self.leaving = Some(why);
        if let Some(a) = self.abort.take() {
            let _ = a.send(());
        }
    }
}

/// Group epochs until the deadline.
pub async fn run(plan: Plan, tally: Arc<Tally>) {
    let mut rng = ChaCha8Rng::seed_from_u64(plan.seed ^ 0x6120_0000);
    let mut epoch = 0u64;
    while plan.running() {
        if let Err(e) = run_epoch(epoch, &plan, &tally, &mut rng).await {
            tally.fail(format!("group epoch {epoch}: {e:#}"));
            // Not a hot loop if something keeps failing.
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        epoch += 1;
    }
}

/// The id of message 0 of `epoch`: room for 2^32 consecutive ids.
fn base_id(seed: u64, epoch: u64) -> u64 {
    (seed.wrapping_mul(0x9E37_79B9) ^ (epoch + 1)) << 32
}

async fn run_epoch(epoch: u64, plan: &Plan, tally: &Arc<Tally>, rng: &mut ChaCha8Rng) -> Result<()> {
    let sender = bind(plan.config(true, plan.seed.wrapping_add(0x5e4d_0000_0000 + epoch))).await?;
    let mut rx: Vec<Receiver> = Vec::new();
    let first = (plan.min_receivers + 1).min(plan.max_receivers);
    for _ in 0..first {
        rx.push(start_receiver(plan, tally).await?);
    }
    let addrs: Vec<SocketAddr> = rx.iter().map(|r| r.addr).collect();
    let config = GroupConfig {
        mode: Mode::All,
        // A receiver that dropped out holds the group back for
        // `peer_timeout` (the library's 10 s): sends wait while the
        // shared buffer is full. 3 s was tried: under a loaded machine a
        // live receiver was once declared unresponsive.
        send_buffer: 4 << 20,
        // As connect_timeout (soak/mod.rs, CONNECT_LIMIT): at 5% loss each
        // way the default 10 s leaves a receiver unreachable by chance
        // with odds near 10⁻⁴.
        overall_timeout: Duration::from_secs(60),
        ..GroupConfig::default()
    };
    let base = base_id(plan.seed, epoch);
    let mut sent = 0u64;
    let opened = tokio::time::timeout(OP_LIMIT, sender.group(&addrs, config)).await;
    match opened {
        Ok(Ok((group, unreachable))) => {
            Tally::add(&tally.groups_opened, 1);
            for (addr, why) in unreachable {
                tally.fail(format!("group epoch {epoch}: receiver {addr} unreachable at the open: {why}"));
                if let Some(r) = rx.iter_mut().find(|r| r.addr == addr) {
                    r.stop(Leaving::Stopped);
                }
            }
            for (peer, stats) in group.peers() {
                if let Some(r) = rx.iter_mut().find(|r| r.addr == stats.addr && r.leaving.is_none()) {
                    r.dest = Some(Destination { peer, stream: StreamId::BYTES });
                    r.first_msg = Some(stats.first_msg);
                    Tally::add(&tally.joins_at_open, 1);
                }
            }
            if let Err(e) = drive(&group, base, &mut sent, &mut rx, plan, tally, rng).await {
                tally.fail(format!("group epoch {epoch}: {e:#}"));
            }
            match tokio::time::timeout(OP_LIMIT, group.close()).await {
                Ok(Ok(())) => Tally::add(&tally.groups_closed, 1),
                Ok(Err(e)) => tally.fail(format!("group epoch {epoch}: closing: {e}")),
                Err(_) => tally.fail(format!("group epoch {epoch}: closing took over {} s", OP_LIMIT.as_secs())),
            }
            let s = group.stats();
            Tally::add(&tally.group_messages_delivered, s.messages_delivered);
            Tally::add(&tally.group_messages_undeliverable, s.messages_undeliverable);
        }
        Ok(Err(e)) => tally.fail(format!("group epoch {epoch}: opening: {e}")),
        Err(_) => tally.fail(format!("group epoch {epoch}: opening took over {} s", OP_LIMIT.as_secs())),
    }
    // Receivers whose join the close cut short never get a connection.
    for r in rx.iter_mut().filter(|r| r.first_msg.is_none() && r.leaving.is_none()) {
        r.stop(Leaving::Stopped);
    }
    let finish_by = Instant::now() + Duration::from_secs(30);
    for mut r in rx {
        let addr = r.addr;
        let got = match tokio::time::timeout_at(finish_by, &mut r.task).await {
            Ok(Ok(got)) => got,
            Ok(Err(e)) => {
                tally.fail(format!("group epoch {epoch}: receiver {addr} panicked: {e}"));
                continue;
            }
            Err(_) => {
                r.stop(Leaving::Stopped);
                r.task.abort();
                tally.fail(format!("group epoch {epoch}: receiver {addr} had not finished 30 s after the close"));
                continue;
            }
        };
        if let Err(e) = judge(&r, got, base, sent, tally) {
            tally.fail(format!("group epoch {epoch}: receiver {addr}: {e:#}"));
        }
    }
    if tokio::time::timeout(Duration::from_secs(10), sender.shutdown_within(Duration::from_secs(2))).await.is_err() {
        tally.fail(format!("group epoch {epoch}: the sender's endpoint did not shut down within 10 s"));
    }
    Ok(())
}

/// Checks what one receiver read against what it was meant to get.
fn judge(r: &Receiver, got: Result<Received>, base: u64, sent: u64, tally: &Tally) -> Result<()> {
    let got = got?;
    match r.leaving {
        Some(Leaving::Dropped) => {
            Tally::add(&tally.leaves_dropped, 1);
            return Ok(());
        }
        Some(Leaving::Stopped) => return Ok(()),
        Some(Leaving::Removed) => Tally::add(&tally.leaves_removed, 1),
        None => Tally::add(&tally.leaves_at_close, 1),
    }
    if got.aborted {
        bail!("stopped before the end of its stream");
    }
    let join = r.first_msg.context("ended without having joined")?;
    if let Some(f) = got.first {
        if f.id != base + join {
            bail!("its first frame was message {}, its join point {join}", f.id.wrapping_sub(base));
        }
    }
    // Still in the group at the close: it must have everything to the last message.
    if r.leaving.is_none() {
        let last = got.last.map_or(join, |f| f.id - base + 1);
        if last != sent {
            bail!("read messages {join} to {} of {sent} before its stream ended", last as i64 - 1);
        }
    }
    Ok(())
}

/// Sends, churns and watches events until the epoch's end.
async fn drive(
    group: &manyfold::Group,
    base: u64,
    sent: &mut u64,
    rx: &mut Vec<Receiver>,
    plan: &Plan,
    tally: &Arc<Tally>,
    rng: &mut ChaCha8Rng,
) -> Result<()> {
    let end = (Instant::now() + plan.epoch).min(plan.deadline);
    let mut send_tick = tokio::time::interval(Duration::from_secs(1) / plan.group_rate);
    send_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut churn_tick = tokio::time::interval_at(Instant::now() + plan.churn_every, plan.churn_every);
    churn_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            biased;
            ev = group.next_event() => match ev {
                Some(ev) => on_event(ev, rx, tally),
                None => bail!("the group closed by itself"),
            },
            _ = tokio::time::sleep_until(end) => return Ok(()),
            _ = churn_tick.tick() => churn(group, rx, plan, tally, rng).await?,
            _ = send_tick.tick() => {
                let len = rng.gen_range(0..=plan.max_message);
                let seq = match tokio::time::timeout(OP_LIMIT, group.send(frame(base + *sent, len))).await {
                    Ok(r) => r.with_context(|| format!("sending message {sent}"))?,
                    Err(_) => bail!("sending message {sent} took over {} s", OP_LIMIT.as_secs()),
                };
                if seq != *sent {
                    bail!("the group numbered message {sent} as {seq}");
                }
                *sent += 1;
                Tally::add(&tally.group_messages, 1);
            }
        }
    }
}

fn on_event(ev: GroupEvent, rx: &mut [Receiver], tally: &Tally) {
    let find = |rx: &mut [Receiver], addr: SocketAddr| rx.iter_mut().position(|r| r.addr == addr);
    match ev {
        // The OS may give a new receiver the port of one that left: the
        // join is the one still waiting for it.
        GroupEvent::PeerJoined { addr, first_msg, .. } => {
            match rx.iter().position(|r| r.addr == addr && r.first_msg.is_none() && r.leaving.is_none()) {
                Some(i) => {
                    rx[i].first_msg = Some(first_msg);
                    Tally::add(&tally.joins, 1);
                }
                None => tally.fail(format!("a peer joined that was not asked to: {addr}")),
            }
        }
        GroupEvent::PeerUnreachable { addr, why, .. } => {
            tally.fail(format!("receiver {addr} could not join: {why}"));
            if let Some(i) = find(rx, addr) {
                rx[i].stop(Leaving::Stopped);
            }
        }
        GroupEvent::PeerLeft { addr, why, .. } => {
            let leaving = find(rx, addr).and_then(|i| rx[i].leaving);
            let expected = match why {
                Left::Removed => leaving == Some(Leaving::Removed),
                Left::Lost(_) | Left::Unresponsive => matches!(leaving, Some(Leaving::Dropped | Leaving::Stopped)),
                Left::Closed => true,
                Left::Evicted => false,
            };
            if !expected {
                tally.fail(format!("receiver {addr} left the group ({why:?}) unasked"));
            }
        }
        _ => {}
    }
}

/// One membership change: a join below `max_receivers`, a removal or a
/// drop above `min_receivers`.
async fn churn(
    group: &manyfold::Group,
    rx: &mut Vec<Receiver>,
    plan: &Plan,
    tally: &Arc<Tally>,
    rng: &mut ChaCha8Rng,
) -> Result<()> {
    let live: Vec<usize> = (0..rx.len()).filter(|&i| rx[i].live()).collect();
    let joining = rx.iter().filter(|r| r.first_msg.is_none() && r.leaving.is_none()).count();
    let can_join = live.len() + joining < plan.max_receivers;
    let can_leave = live.len() > plan.min_receivers;
    let roll = rng.gen_range(0..10);
    if can_join && (roll < 5 || !can_leave) {
        let mut r = start_receiver(plan, tally).await?;
        let dest = group.add_destination(r.addr).with_context(|| format!("adding {}", r.addr))?;
        if dest.stream != StreamId::BYTES {
            // The new receiver's port is a departing peer's the group has
            // not yet seen go: that peer got a second stream. Undo it.
            group.remove_destination(dest)?;
            r.stop(Leaving::Stopped);
        } else {
            r.dest = Some(dest);
        }
        rx.push(r);
    } else if can_leave {
        let i = live[rng.gen_range(0..live.len())];
        if roll < 8 {
            let dest = rx[i].dest.context("a live receiver without a destination")?;
            group.remove_destination(dest).with_context(|| format!("removing {}", rx[i].addr))?;
            rx[i].leaving = Some(Leaving::Removed);
        } else {
            rx[i].stop(Leaving::Dropped);
        }
    }
    // Receivers that finished (removed, dropped) are judged at the epoch's
    // end; their number is bounded by the churn of one epoch.
    Ok(())
}

/// Binds a receiver's endpoint and starts reading.
async fn start_receiver(plan: &Plan, tally: &Arc<Tally>) -> Result<Receiver> {
    let n = Tally::get(&tally.receiver_endpoints);
    let ep = bind(plan.config(false, plan.seed.wrapping_add(0x7ec0_0000_0000 + n))).await?;
    ep.listen();
    Tally::add(&tally.receiver_endpoints, 1);
    let addr = ep.local_addr()?;
    let (abort_tx, abort_rx) = oneshot::channel();
    let task = tokio::spawn(receive(ep, abort_rx, plan.clone(), tally.clone()));
    Ok(Receiver { addr, dest: None, first_msg: None, leaving: None, abort: Some(abort_tx), task })
}

/// A receiver: the group's connection, read to its end and checked frame
/// by frame; or, when told to drop out, its endpoint closed at once.
async fn receive(
    ep: manyfold::Endpoint,
    abort: oneshot::Receiver<()>,
    plan: Plan,
    tally: Arc<Tally>,
) -> Result<Received> {
    let mut check = FrameCheck::new(None, plan.max_message);
    let read = async {
        let mut conn = ep.accept().await.context("the endpoint closed before the group connected")?;
        check_protection(&conn, plan.encrypted)?;
        let mut buf = vec![0u8; 64 << 10];
        loop {
            let n = conn.read(&mut buf).await.context("reading")?;
            if n == 0 {
                break;
            }
            check.feed(&buf[..n]).map_err(anyhow::Error::msg)?;
            Tally::add(&tally.group_bytes_verified, n as u64);
        }
        if !check.at_boundary() {
            bail!("the stream ended inside a frame (after {} whole ones)", check.frames());
        }
        // Our side's FIN; the sender's verdict does not wait for it.
        let _ = tokio::time::timeout(Duration::from_secs(5), conn.close()).await;
        anyhow::Ok(())
    };
    let aborted = tokio::select! {
        r = read => {
            r?;
            false
        }
        _ = abort => true,
    };
    // Dropping out: the connection is gone with the read; the endpoint
    // aborts whatever is left at once.
    let limit = if aborted { Duration::ZERO } else { Duration::from_secs(2) };
    let _ = tokio::time::timeout(Duration::from_secs(10), ep.shutdown_within(limit)).await;
    Ok(Received { first: check.first(), last: check.last(), aborted })
}
