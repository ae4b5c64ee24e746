//! Connections built from spares (spec §15.3, `max_spare_connections`):
//! a finished connection's emptied buffers, queues and controller serve
//! the next one. Sessions of random size in both directions run through
//! them under loss, and every reply must come back whole: a spare that
//! carried any state of its old connection would show as a short, long or
//! wrong reply, or a stuck session.

mod common;

use std::time::Duration;

use common::rr::{Clients, Server};
use common::{client, server};
use manyfold_proto::EndpointConfig;
use manyfold_sim::{LinkConfig, World};

#[test]
fn sessions_through_spare_connections_under_loss_return_every_byte() {
    for seed in [6101, 6102] {
        let link = LinkConfig::with_delay(Duration::from_millis(2)).loss(0.05).jitter(Duration::from_millis(1));
        let mut w = World::new(seed);
        let mut cfg =
            EndpointConfig { max_spare_connections: 16, accept_backlog: 1 << 14, ..EndpointConfig::default() };
        // Four lost SYNs in a row (1 in 10,000 at this loss) must not end
        // a session: this test is about what the spares carry.
        cfg.connection.connect_timeout = Duration::from_secs(60);
        // The client closes first and holds TIME-WAIT: short here, so that
        // its connections become spares within the run too.
        cfg.connection.time_wait = Duration::from_millis(200);
        w.add_node(client(), cfg.clone());
        w.add_node(server(), cfg);
        w.endpoint_mut(server()).set_listening(true);
        w.set_link(client(), server(), link);
        let (mut srv, mut cli) = (Server::default(), Clients::default());
        let (total, concurrency) = (400u64, 20usize);
        let mut started = 0u64;
        let mut x = seed;
        let ok = w.run_until(
            |w| {
                while cli.open.len() < concurrency && started < total {
                    let i = started;
                    // Sizes from empty to ~100 KB: one packet to a window's worth.
                    x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
                    let len = ((x >> 33) % 100_000) as usize;
                    w.act(client(), |ep, now| cli.start(ep, now, i, len));
                    started += 1;
                }
                srv.run(w.endpoint_mut(server()));
                cli.run(w.endpoint_mut(client()), seed);
                cli.done == total
            },
            Duration::from_secs(600),
        );
        assert!(ok, "{} of {total} sessions done (seed {seed})", cli.done);
        assert!(srv.each_once(), "seed {seed}");
        assert!(w.endpoint(server()).spare_connections() > 0, "the server's spares were used (seed {seed})");
        assert!(w.endpoint(client()).spare_connections() > 0, "the client's spares were used (seed {seed})");
    }
}
