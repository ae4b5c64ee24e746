//! The request/reply application the session tests run (spec §15, §6.9):
//! a client's request is a pattern of its index, the reply the request
//! reversed, and the server counts how often it served each request.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use manyfold_proto::{ConnHandle, Endpoint};
use manyfold_sim::pattern;

use super::server;

/// Request number `i`, `len` bytes of its pattern.
pub fn request_of(i: u64, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    pattern(i, 0, &mut v);
    v
}

/// What the server answers to `req`.
pub fn reply_to(req: &[u8]) -> Vec<u8> {
    req.iter().rev().copied().collect()
}

/// The client application: sessions in flight, the request each sent and
/// the reply so far. A session ends when its reply is read to the end,
/// which must be the whole reversed request; a session that fails fails
/// the test.
#[derive(Default)]
pub struct Clients {
    pub open: BTreeMap<ConnHandle, (Vec<u8>, Vec<u8>)>,
    pub done: u64,
    /// Packets the finished sessions sent again (`retransmissions`).
    pub resent: u64,
    /// Sessions whose request waits to be written, and from when.
    unwritten: BTreeMap<ConnHandle, Instant>,
}

impl Clients {
    pub fn start(&mut self, ep: &mut Endpoint, now: std::time::Instant, i: u64, len: usize) {
        let h = ep.connect(now, server()).expect("connect");
        let req = request_of(i, len);
        assert_eq!(ep.conn_mut(h).send(&req), Ok(req.len()));
        ep.conn_mut(h).close();
        self.open.insert(h, (req, Vec::new()));
    }

    /// Like [`Clients::start`], but the request is written at `write_at`
    /// (by [`Clients::run_at`]), once the connection is established: an
    /// application that connects first and writes later.
    pub fn start_unwritten(&mut self, ep: &mut Endpoint, now: Instant, i: u64, len: usize, write_at: Instant) {
        let h = ep.connect(now, server()).expect("connect");
        self.open.insert(h, (request_of(i, len), Vec::new()));
        self.unwritten.insert(h, write_at);
    }

    /// Writes the requests due by `now`, then as [`Clients::run`].
    pub fn run_at(&mut self, ep: &mut Endpoint, now: Instant, seed: u64) {
        self.unwritten.retain(|&h, &mut at| {
            let due = at <= now && ep.conn(h).state() == Some(manyfold_proto::State::Established);
            if due {
                let req = &self.open[&h].0;
                assert_eq!(ep.conn_mut(h).send(req), Ok(req.len()));
                ep.conn_mut(h).close();
            }
            !due
        });
        self.run(ep, seed);
    }

    pub fn run(&mut self, ep: &mut Endpoint, seed: u64) {
        let mut buf = vec![0u8; 64 * 1024];
        let mut done = Vec::new();
        for (&h, (req, reply)) in self.open.iter_mut() {
            loop {
                match ep.conn_mut(h).recv(&mut buf) {
                    Ok(None) => break,
                    Ok(Some(0)) => {
                        assert_eq!(reply.len(), req.len(), "the reply's length (seed {seed}, {h:?})");
                        assert!(*reply == reply_to(req), "a wrong reply (seed {seed}, {h:?})");
                        self.resent += ep.conn(h).stats().map_or(0, |s| s.retransmissions);
                        ep.conn_mut(h).release();
                        done.push(h);
                        break;
                    }
                    Ok(Some(n)) => reply.extend_from_slice(&buf[..n]),
                    Err(e) => panic!("session {h:?} failed: {e:?} (seed {seed})"),
                }
            }
        }
        for h in done {
            self.open.remove(&h);
            self.done += 1;
        }
    }
}

/// The server application: accepts, reads each request to the client's
/// FIN, answers (after `think`, when [`Server::run_at`] drives it),
/// closes, releases.
#[derive(Default)]
pub struct Server {
    open: BTreeMap<ConnHandle, Vec<u8>>,
    /// How long the application takes to answer a whole request.
    pub think: Duration,
    /// Answers not yet due: when, to whom, the reply.
    thinking: Vec<(Instant, ConnHandle, Vec<u8>)>,
    /// Times each request was served, by a hash of its bytes (a hundred
    /// thousand sessions must not keep a hundred thousand requests).
    pub served: BTreeMap<u64, u32>,
}

impl Server {
    /// Serves at once (`think` is not used).
    pub fn run(&mut self, ep: &mut Endpoint) {
        for (h, reply) in self.whole_requests(ep) {
            answer(ep, h, &reply);
        }
    }

    /// Serves as [`Server::run`] does, each reply `think` after its
    /// request was whole; call it at least every millisecond of virtual
    /// time for replies to leave on time.
    pub fn run_at(&mut self, ep: &mut Endpoint, now: Instant) {
        for (h, reply) in self.whole_requests(ep) {
            self.thinking.push((now + self.think, h, reply));
        }
        self.thinking.retain(|(due, h, reply)| {
            let now_due = *due <= now;
            if now_due {
                answer(ep, *h, reply);
            }
            !now_due
        });
    }

    /// Accepts, reads, and takes each request its client has finished,
    /// with the reply it gets.
    fn whole_requests(&mut self, ep: &mut Endpoint) -> Vec<(ConnHandle, Vec<u8>)> {
        while let Some(h) = ep.accept() {
            self.open.insert(h, Vec::new());
        }
        let mut buf = vec![0u8; 64 * 1024];
        let mut done = Vec::new();
        for (&h, req) in self.open.iter_mut() {
            while let Ok(Some(n)) = ep.conn_mut(h).recv(&mut buf) {
                if n == 0 {
                    *self.served.entry(fnv1a(req)).or_insert(0) += 1;
                    done.push((h, reply_to(req)));
                    break;
                }
                req.extend_from_slice(&buf[..n]);
            }
        }
        for (h, _) in &done {
            self.open.remove(h);
        }
        done
    }

    /// Sessions served.
    pub fn total(&self) -> u64 {
        self.served.values().map(|&n| u64::from(n)).sum()
    }

    /// No request was served more than once.
    pub fn each_once(&self) -> bool {
        self.served.values().all(|&n| n == 1)
    }
}

/// The reply goes with the server's FIN, and the server lets go.
fn answer(ep: &mut Endpoint, h: ConnHandle, reply: &[u8]) {
    assert_eq!(ep.conn_mut(h).send(reply), Ok(reply.len()), "the reply fits the send buffer");
    ep.conn_mut(h).close();
    ep.conn_mut(h).release();
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}
