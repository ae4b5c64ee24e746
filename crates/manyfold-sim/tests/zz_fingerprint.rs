//! Uncommitted: prints every figure of several multicast runs, to diff
//! before and after a restructure.
use std::net::SocketAddr;
use std::time::Duration;

use manyfold_proto::mcast::{ReceiverConfig, SenderConfig};
use manyfold_sim::mcast::McastWorld;
use manyfold_sim::LinkConfig;

fn group() -> SocketAddr {
    "239.1.2.3:5000".parse().unwrap()
}
fn sender() -> SocketAddr {
    "198.18.0.1:5000".parse().unwrap()
}
fn receiver(net: u8, i: u8) -> SocketAddr {
    SocketAddr::from(([198, 18, net, 10 + i], 5000))
}
fn receivers(seed: u64, nets: &[(u8, u8)]) -> Vec<(SocketAddr, ReceiverConfig)> {
    let mut v = Vec::new();
    for &(net, count) in nets {
        for i in 0..count {
            v.push((
                receiver(net, i),
                ReceiverConfig {
                    seed: seed * 1000 + u64::from(net) * 100 + u64::from(i),
                    network: u32::from(net),
                    ..ReceiverConfig::default()
                },
            ));
        }
    }
    v
}
fn lan() -> LinkConfig {
    LinkConfig::with_delay(Duration::from_micros(200))
}

fn dump(name: &str, w: &McastWorld) {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    let start = w.now() - w.elapsed();
    for (t, e) in &w.sender_events {
        match e {
            manyfold_proto::mcast::SenderEvent::Window(r) => format!(
                "{t:?} {} {} {} {:?} {} {:?} {:?} {}",
                r.first,
                r.lwsn,
                r.size,
                r.sent - start,
                r.confirmed,
                r.resolved - start,
                r.timeout,
                r.feedback
            )
            .hash(&mut h),
            other => format!("{t:?} {other:?}").hash(&mut h),
        }
    }
    eprintln!("FP {name}: elapsed {:?} events {} hash {:x}", w.elapsed(), w.sender_events.len(), h.finish());
    eprintln!("FP {name}: sender {:?}", w.sender.stats());
    eprintln!("FP {name}: window {:?} progress {:?}", w.sender.window(), w.sender.progress());
    for r in w.sender.receivers() {
        eprintln!("FP {name}: report {:?} {:?} {} {} {}", r.addr, r.outcome, r.held, r.reported_lost, r.repair_passes);
    }
    for r in &w.receivers {
        eprintln!(
            "FP {name}: rx {:?} {:?} {:?} {:?} {:?}",
            r.addr,
            r.engine.stats(),
            r.complete_at,
            r.verified,
            r.ended
        );
    }
}

#[test]
fn fingerprint() {
    let seed = 9001;
    let cfg = SenderConfig { max_window: 64, ..SenderConfig::default() };
    let mut w = McastWorld::new(seed, cfg, 3 << 20, group(), sender(), receivers(seed, &[(1, 4), (2, 4)]));
    w.set_default_link(lan());
    w.set_link(sender(), receiver(2, 0), lan().loss(0.02));
    w.set_link(sender(), receiver(1, 3), lan().loss(0.05));
    assert!(w.run_to_end(Duration::from_secs(120)));
    dump("loss", &w);

    let mut w = McastWorld::new(seed, SenderConfig::default(), 16 << 20, group(), sender(), receivers(seed, &[(1, 4)]));
    w.set_default_link(lan().rate(100_000_000, 1 << 20));
    for i in 0..4 {
        w.set_link(sender(), receiver(1, i), lan().rate(100_000_000, 1 << 20).loss(0.10));
    }
    assert!(w.run_to_end(Duration::from_secs(300)));
    dump("ten-percent", &w);

    let mut w = McastWorld::new(seed, SenderConfig::default(), 2 << 20, group(), sender(), receivers(seed, &[(1, 3)]));
    w.set_default_link(lan());
    w.upstream_loss = 0.10;
    assert!(w.run_to_end(Duration::from_secs(120)));
    dump("upstream", &w);

    let cfg = SenderConfig { fec_proactive: 3, max_loss: Some(0.2), ..SenderConfig::default() };
    let mut w = McastWorld::new(seed, cfg, 4 << 20, group(), sender(), receivers(seed, &[(1, 4), (2, 1)]));
    w.set_default_link(lan());
    for i in 0..4 {
        w.set_link(sender(), receiver(1, i), lan().loss(0.03));
    }
    w.set_link(sender(), receiver(2, 0), lan().loss(0.4));
    assert!(w.run_to_end(Duration::from_secs(120)));
    dump("parity", &w);

    let mut w = McastWorld::new_stream(
        seed,
        SenderConfig::default(),
        (2 << 20) + 333,
        4e6,
        group(),
        sender(),
        receivers(seed, &[(1, 2), (2, 1)]),
    );
    w.set_default_link(lan());
    w.set_link(sender(), receiver(2, 0), lan().loss(0.05));
    assert!(w.run_to_end(Duration::from_secs(60)));
    dump("stream", &w);

    let cfg =
        SenderConfig { receiver_timeout: Duration::from_secs(3), max_repair_passes: 3, ..SenderConfig::default() };
    let mut w = McastWorld::new(seed, cfg, 2 << 20, group(), sender(), receivers(seed, &[(1, 2), (2, 2)]));
    w.set_default_link(lan());
    w.set_link(sender(), receiver(1, 1), lan().loss(0.5));
    let q = (512u32 << 10) / u32::from(w.sender.block());
    assert!(w.run_until(|w| w.sender.progress().0 >= q, Duration::from_secs(60)));
    w.receivers[2].running = false;
    assert!(w.run_to_end(Duration::from_secs(120)));
    dump("dead", &w);
}
