//! Fairness: connections that share a bottleneck share it evenly, whatever
//! the congestion controller (issue 3's fairness test; spec §9).

mod common;

use std::time::Duration;

use common::*;
use manyfold_sim::{LinkConfig, Transfer, World};

const MB: u64 = 1_000_000;

/// Jain's fairness index of the shares: 1 is perfectly even, 0.5 is one
/// flow taking everything from two.
fn jain(x: &[f64]) -> f64 {
    let sum: f64 = x.iter().sum();
    let sq: f64 = x.iter().map(|v| v * v).sum();
    sum * sum / (x.len() as f64 * sq)
}

/// Two connections from one host through one 20 Mbit/s, 40 ms RTT
/// bottleneck with a queue of about one bandwidth-delay product; the second
/// starts 3 s after the first. Over the 15 s that follow a 5 s settling
/// period, each gets close to half.
#[test]
fn two_flows_through_one_bottleneck_share_it_evenly() {
    let seed = 501;
    for &cc in CONTROLLERS {
        let mut w = World::new(seed);
        w.add_node(client(), config(cc));
        w.add_node(server(), config(cc));
        let bottleneck = LinkConfig::with_delay(Duration::from_millis(20)).rate(20_000_000, 100_000);
        w.set_link_one_way(client(), server(), bottleneck);
        w.set_link_one_way(server(), client(), LinkConfig::with_delay(Duration::from_millis(20)));

        let mut first = Transfer::start(&mut w, client(), server(), 60 * MB, 0);
        w.run_until(|w| first.pump(w) || w.elapsed() >= Duration::from_secs(3), Duration::from_secs(4));
        let mut second = Transfer::start(&mut w, client(), server(), 60 * MB, 0);
        let mut mark = None;
        let window_start = w.elapsed() + Duration::from_secs(5);
        let window_end = window_start + Duration::from_secs(15);
        w.run_until(
            |w| {
                let done = first.pump(w) | second.pump(w);
                if mark.is_none() && w.elapsed() >= window_start {
                    mark = Some((first.progress().0, second.progress().0));
                }
                done || w.elapsed() >= window_end
            },
            Duration::from_secs(30),
        );
        assert!(
            first.error().is_none() && second.error().is_none(),
            "{cc:?} seed {seed}: {:?} {:?}",
            first.error(),
            second.error()
        );
        let (a0, b0) = mark.expect("window reached");
        let (a, b) = ((first.progress().0 - a0) as f64, (second.progress().0 - b0) as f64);
        let index = jain(&[a, b]);
        let utilisation = (a + b) * 8.0 / 15.0 / 20e6;
        eprintln!(
            "{cc:?}: flow shares {:.2} / {:.2} MB, Jain {index:.3}, link use {:.0}%",
            a / 1e6,
            b / 1e6,
            utilisation * 100.0
        );
        assert!(index >= 0.9, "{cc:?} seed {seed}: Jain index {index:.3} ({a} vs {b} bytes)");
        assert!(utilisation >= 0.8, "{cc:?} seed {seed}: the flows used {:.0}% of the link", utilisation * 100.0);
    }
}
