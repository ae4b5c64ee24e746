//! Behaviour of the qlog trace (spec §18): a lossy transfer's trace,
//! written as a file and read back, gives a summary that matches the
//! connection's own counters, event for event.

mod common;

use std::time::Duration;

use common::*;
use manyfold_proto::{CongestionAlgorithm, ConnStats, QlogData, State};
use manyfold_sim::{Transfer, World};

const MB: u64 = 1 << 20;

fn assert_summary_matches(w: &World, who: &str, stats: &ConnStats, events: &[manyfold_proto::QlogEvent], seed: u64) {
    let mut file = Vec::new();
    manyfold::qlog::write_trace(&mut file, events).expect("written to memory");
    let trace = manyfold::qlog::parse(&file).unwrap_or_else(|e| panic!("{who}: {e} (seed {seed})"));
    assert_eq!(trace.skipped, 0, "{who}: every record reads back (seed {seed})");
    let times: Vec<f64> = trace.events.iter().map(|e| e.time).collect();
    assert!(times.windows(2).all(|t| t[0] <= t[1]), "{who}: event times never go back (seed {seed})");
    let s = trace.summary();
    eprintln!("{who}:\n{s}");
    let ctx = format!("{who} (seed {seed})\nsummary:\n{s}\nstats: {stats:?}");
    assert_eq!(s.packets_sent, stats.packets_sent, "packets sent: {ctx}");
    assert_eq!(s.packets_received, stats.packets_received, "packets received: {ctx}");
    assert_eq!(s.retransmissions, stats.retransmissions, "retransmissions: {ctx}");
    assert_eq!(s.packets_lost, stats.lost_packets, "packets lost: {ctx}");
    assert_eq!(s.rto_expiries, stats.rto_expiries, "RTO expiries: {ctx}");
    assert_eq!(s.stream_bytes_sent, stats.bytes_sent, "stream bytes first sent: {ctx}");
    assert_eq!(s.final_cwnd, stats.cwnd, "final congestion window: {ctx}");
    let close = |a: f64, b: Duration| (a - b.as_secs_f64() * 1e3).abs() < 1e-6;
    assert!(close(s.final_srtt_ms, stats.srtt), "final smoothed RTT: {ctx}");
    assert!(close(s.min_rtt_ms, stats.min_rtt), "min RTT: {ctx}");
    assert!(s.rtt_samples > 0 && s.max_cwnd >= s.final_cwnd && s.max_bytes_in_flight > 0, "{ctx}");
    assert_eq!(s.close_reason.as_deref(), Some("closed gracefully"), "{ctx}");
    assert_eq!(s.states.last().map(String::as_str), Some(State::Closed.name()), "{ctx}");
    assert!(s.states.iter().any(|st| st == State::Established.name()), "{ctx}");
    assert_eq!(w.endpoint(client()).stats().qlog_dropped + w.endpoint(server()).stats().qlog_dropped, 0, "{ctx}");
}

#[test]
fn a_lossy_transfers_trace_summary_matches_the_connection_stats() {
    for (seed, cc) in
        [(181, CongestionAlgorithm::NewReno), (182, CongestionAlgorithm::Cubic), (183, CongestionAlgorithm::Bbr)]
    {
        let mut cfg = config(cc);
        cfg.connection.qlog = true;
        let mut w = pair(seed, faulty(0.05), cfg);
        let mut t = Transfer::start(&mut w, client(), server(), 2 * MB, MB / 2);
        let c = t.client_conn();
        assert!(w.run_until(|w| t.pump(w), Duration::from_secs(600)), "transfer unfinished (seed {seed})");
        assert!(t.error().is_none(), "{:?} (seed {seed})", t.error());
        let s = t.server_conn().expect("accepted");
        let closed = |w: &World| {
            w.endpoint(client()).conn(c).state() == Some(State::Closed)
                && w.endpoint(server()).conn(s).state() == Some(State::Closed)
        };
        assert!(w.run_until(|w| closed(w), Duration::from_secs(120)), "not closed (seed {seed})");

        let client_stats = w.endpoint(client()).conn(c).stats().expect("not released");
        let server_stats = w.endpoint(server()).conn(s).stats().expect("not released");
        assert!(client_stats.lost_packets > 0 && server_stats.lost_packets > 0, "loss exercised (seed {seed})");
        let client_trace = w.qlog(client(), c);
        let server_trace = w.qlog(server(), s);
        assert!(
            matches!(client_trace.first().map(|e| &e.data), Some(QlogData::Started { client: true, .. })),
            "seed {seed}"
        );
        assert!(
            matches!(server_trace.first().map(|e| &e.data), Some(QlogData::Started { client: false, .. })),
            "seed {seed}"
        );
        assert_summary_matches(&w, "client", &client_stats, &client_trace, seed);
        assert_summary_matches(&w, "server", &server_stats, &server_trace, seed);
    }
}

#[test]
fn without_qlog_a_connection_records_nothing() {
    let seed = 184;
    let mut w = pair(seed, faulty(0.02), config(CongestionAlgorithm::NewReno));
    let t = Transfer::start(&mut w, client(), server(), MB / 4, 0);
    let c = t.client_conn();
    t.run(&mut w, Duration::from_secs(120)).unwrap_or_else(|e| panic!("{e}"));
    assert!(w.qlog(client(), c).is_empty(), "seed {seed}");
}
