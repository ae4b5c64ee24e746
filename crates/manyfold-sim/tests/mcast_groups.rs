//! Automatic grouping of multicast receivers by observed bottleneck (spec
//! §16.12) on the simulator: receivers given no network id are grouped by
//! the losses they share, each group is told its id and suppresses its
//! feedback within itself, independent loss forms no group, a slow
//! receiver is not hidden, and feedback stays within two packets per
//! window per group. Fixed seeds, printed on failure.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::Duration;

use manyfold_proto::mcast::{ReceiverConfig, ReceiverEvent, ReceiverOutcome, SenderConfig, SenderEvent};
use manyfold_sim::mcast::McastWorld;
use manyfold_sim::LinkConfig;

fn group() -> SocketAddr {
    "239.1.2.3:5000".parse().expect("addr")
}

fn sender() -> SocketAddr {
    "198.18.0.1:5000".parse().expect("addr")
}

fn receiver(i: u8) -> SocketAddr {
    SocketAddr::from(([198, 18, 1, 10 + i], 5000))
}

/// `n` receivers on one LAN (they hear each other's feedback), none
/// given a network id: each starts in its /24's group (1) and the sender
/// may regroup it. STATUS every 200 ms (the CLI's is 1 s, for sessions of
/// seconds): the signatures come often enough for a session this short.
fn auto_receivers(seed: u64, n: u8, auto_group: bool) -> Vec<(SocketAddr, ReceiverConfig)> {
    (0..n)
        .map(|i| {
            let cfg = ReceiverConfig {
                seed: seed * 1000 + u64::from(i),
                network: 1,
                auto_group,
                status_interval: Duration::from_millis(200),
                ..ReceiverConfig::default()
            };
            (receiver(i), cfg)
        })
        .collect()
}

fn assert_all_completed(w: &McastWorld, seed: u64) {
    for (i, r) in w.receivers.iter().enumerate() {
        assert_eq!(r.verified, Some(true), "receiver {i} ({}) file (seed {seed})", r.addr);
        assert!(matches!(r.ended, Some(ReceiverEvent::Confirmed)), "receiver {i}: {:?} (seed {seed})", r.ended);
    }
    for r in w.sender.receivers() {
        assert_eq!(r.outcome, ReceiverOutcome::Completed, "sender's view of {} (seed {seed})", r.addr);
    }
}

/// ACKs and NACKs per window, over all windows.
fn feedback_per_window(w: &McastWorld) -> f64 {
    let windows = w.windows();
    f64::from(windows.iter().map(|x| x.feedback).sum::<u32>()) / windows.len().max(1) as f64
}

/// The sender capped at 50 Mbit/s (`max_rate`), so that the losses are
/// the links' random ones, not queues overflowing alike everywhere.
fn capped() -> SenderConfig {
    SenderConfig { max_rate: Some(6_250_000), ..SenderConfig::default() }
}

/// Eight receivers on one LAN, 0.5% independent loss each; the first
/// four behind one lossy bottleneck (3%), the last four behind another
/// (3%); 16 MiB at 50 Mbit/s (about 2.8 s).
fn two_bottlenecks(seed: u64, auto_group: bool) -> McastWorld {
    let rx = auto_receivers(seed, 8, auto_group);
    let mut w = McastWorld::new(seed, capped(), 16 << 20, group(), sender(), rx).light();
    w.set_default_link(LinkConfig::with_delay(Duration::from_micros(200)));
    for i in 0..8 {
        w.set_link(sender(), receiver(i), LinkConfig::with_delay(Duration::from_millis(1)).loss(0.005));
    }
    w.shared_loss = vec![((0..4).collect(), 0.03), ((4..8).collect(), 0.03)];
    assert!(w.run_to_end(Duration::from_secs(120)), "not done (seed {seed})");
    w
}

#[test]
fn receivers_behind_two_bottlenecks_given_no_ids_end_up_in_two_groups() {
    let seed = 8101;
    let w = two_bottlenecks(seed, true);
    assert_all_completed(&w, seed);
    let groups: Vec<Option<u32>> = w.sender.receivers().iter().map(|r| r.group).collect();
    let told: Vec<Option<u32>> = w.receivers.iter().map(|r| r.engine.group()).collect();
    let per_window = feedback_per_window(&w);
    let grouped_at = w.sender_events.iter().find(|(_, e)| *e == SenderEvent::DataStarted).map(|x| x.0);
    eprintln!(
        "groups at the sender {groups:x?}, as told {told:x?}; {per_window:.2} feedback per window ({:.2} per \
         group); data from {grouped_at:?}; {:?}",
        per_window / 2.0,
        w.sender.stats()
    );
    // The sender's table lists receivers in the order they registered.
    let by_addr = |i: u8| w.sender.receivers().iter().find(|r| r.addr == receiver(i)).expect("registered").group;
    let a = by_addr(0);
    let b = by_addr(4);
    assert!(a.is_some() && b.is_some() && a != b, "two groups: {a:x?} {b:x?} (seed {seed})");
    for i in 0..4 {
        assert_eq!(by_addr(i), a, "receiver {i} behind the first bottleneck (seed {seed})");
        assert_eq!(by_addr(4 + i), b, "receiver {} behind the second bottleneck (seed {seed})", 4 + i);
    }
    for (i, r) in w.receivers.iter().enumerate() {
        let at_sender = w.sender.receivers().iter().find(|x| x.addr == r.addr).expect("registered").group;
        assert_eq!(r.engine.group(), at_sender, "receiver {i} was told its group (seed {seed})");
    }
    // One ACK per group and window, about one NACK when a group loses.
    assert!(per_window / 2.0 <= 2.0, "{per_window:.2} feedback per window over two groups (seed {seed})");
}

#[test]
fn independent_loss_forms_no_group_and_feedback_stays_per_network() {
    let seed = 8103;
    let mut w = McastWorld::new(seed, capped(), 16 << 20, group(), sender(), auto_receivers(seed, 8, true)).light();
    w.set_default_link(LinkConfig::with_delay(Duration::from_micros(200)));
    for i in 0..8 {
        w.set_link(sender(), receiver(i), LinkConfig::with_delay(Duration::from_millis(1)).loss(0.02));
    }
    assert!(w.run_to_end(Duration::from_secs(120)), "not done (seed {seed})");
    assert_all_completed(&w, seed);
    let groups: BTreeSet<Option<u32>> = w.sender.receivers().iter().map(|r| r.group).collect();
    let per_window = feedback_per_window(&w);
    eprintln!("groups {groups:x?}; {per_window:.2} feedback per window; {:?}", w.sender.stats());
    assert_eq!(groups, BTreeSet::from([None]), "losses that nobody shares group nobody (seed {seed})");
    assert!(per_window <= 2.0, "{per_window:.2} feedback per window on one network (seed {seed})");
}

#[test]
fn a_slow_receiver_among_fast_ones_given_no_ids_is_not_hidden_by_suppression() {
    // Four receivers of one LAN at 100 Mbit/s, the fourth behind a 20
    // Mbit/s link of its own (256 KB queue), 8 MiB; no ids.
    let seed = 8104;
    let mut w =
        McastWorld::new(seed, SenderConfig::default(), 8 << 20, group(), sender(), auto_receivers(seed, 4, true));
    let lan = LinkConfig::with_delay(Duration::from_micros(200));
    w.set_default_link(lan.clone());
    for i in 0..3 {
        w.set_link(sender(), receiver(i), lan.clone().rate(100_000_000, 1 << 20));
    }
    w.set_link(sender(), receiver(3), lan.rate(20_000_000, 256 << 10));
    assert!(w.run_to_end(Duration::from_secs(300)), "not done (seed {seed})");
    assert_all_completed(&w, seed);
    let behind: Vec<SocketAddr> = w
        .sender_events
        .iter()
        .filter_map(|(_, e)| if let SenderEvent::ReceiverBehind { addr, .. } = e { Some(*addr) } else { None })
        .collect();
    let slow = &w.receivers[3];
    let st = slow.engine.stats();
    let total = (8u64 << 20).div_ceil(u64::from(w.sender.block()));
    let lost = total - (st.data_packets - st.duplicates);
    let took = w.receivers.iter().filter_map(|r| r.complete_at).max().expect("completed");
    eprintln!("behind: {behind:?}; the slow one lost {lost} of {total}; all in {took:?}; {:?}", w.sender.stats());
    assert_eq!(behind, [receiver(3)], "the slow one is seen (seed {seed})");
    // Its link alone needs 3.4 s for 8 MiB: the session slowed to it.
    // (What it loses of the first sending varies with the seed, 100 to
    // 2,000 packets, with or without grouping: its own queue's overflow
    // before it is seen behind, repaired at its pace.)
    assert!(took < Duration::from_millis(3800), "all complete after {took:?} (seed {seed})");
    assert!(feedback_per_window(&w) <= 2.0 * 2.0, "one network and the slow one awaited alone (seed {seed})");
}
