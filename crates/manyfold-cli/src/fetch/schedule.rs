//! Which server is asked for which segment, and when (paper 00 §5.2: each
//! server is asked for different segments). No I/O and no clock: every
//! call takes `now`, so the tests below run on invented time.
//!
//! - **Pipelines.** Each server has a window of requests outstanding. It
//!   starts at [`INITIAL_WINDOW`] and follows the server's rate: enough
//!   requests to cover its round trip at the pace its answers come, plus
//!   two (`⌈srtt / gap⌉ + 2`, from [`MIN_WINDOW`] to [`MAX_WINDOW`]). Work
//!   is pulled: a server gets a new segment when an answer frees a slot,
//!   so a fast server gets more segments.
//! - **Failure.** A failed server (connection lost, error reply, bad hash,
//!   or silent: not one packet heard from it for [`silence`] while it owes
//!   answers) gets no more work; its segments go back to the front of the
//!   queue for the others. Silence, not a late answer, is the sign of a
//!   dead server: a slow one is still sending.
//! - **Timeouts.** A request unanswered for the server's timeout (four
//!   times its smoothed answer latency, from [`MIN_TIMEOUT`] to
//!   [`MAX_TIMEOUT`]) is given to someone else; the server counts as slow
//!   and its window drops to one. A late answer is still taken.
//! - **Endgame.** When no segment is left unassigned, a server with
//!   nothing outstanding asks for a segment still outstanding elsewhere
//!   (the longest waiting one, at most [`MAX_COPIES`] asks live per
//!   segment); the first answer wins, later copies are counted as
//!   duplicates and dropped.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

pub const INITIAL_WINDOW: usize = 3;
pub const MIN_WINDOW: usize = 2;
pub const MAX_WINDOW: usize = 16;
/// Timeout of a server that has not answered yet (its first answer may
/// wait for a manifest to be computed or a congestion window to open).
pub const INITIAL_TIMEOUT: Duration = Duration::from_secs(5);
pub const MIN_TIMEOUT: Duration = Duration::from_secs(1);
pub const MAX_TIMEOUT: Duration = Duration::from_secs(30);
/// Least silence that fails a server owing answers ([`silence`]).
pub const MIN_SILENCE: Duration = Duration::from_millis(1500);
/// Most live requests for one segment at once (endgame).
pub const MAX_COPIES: u8 = 2;

/// Index of a server in the schedule (the order they were given).
pub type ServerIx = usize;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Seg {
    /// Not asked of anyone live: in the queue.
    Waiting,
    /// Asked of `copies` servers whose requests have not timed out.
    Asked {
        copies: u8,
    },
    Done,
}

#[derive(Debug, Clone, Copy)]
struct Ask {
    index: u32,
    sent: Instant,
    /// Timed out: the segment went to someone else, but the answer is still taken.
    late: bool,
}

/// One server's part in the schedule, and its figures for the report.
#[derive(Debug, Clone)]
pub struct Server {
    asks: Vec<Ask>,
    window: usize,
    /// Smoothed time from request to answer.
    latency: Option<Duration>,
    /// Smoothed time between answers while it was busy: its pace.
    gap: Option<Duration>,
    last_answer: Option<Instant>,
    /// Whether a request was outstanding right after the last answer.
    busy: bool,
    /// Since when it owes us an answer without having given one.
    waiting_since: Option<Instant>,
    /// When a packet of its connection last arrived.
    heard: Option<Instant>,
    srtt: Duration,
    pub failed: Option<String>,
    /// Segments it delivered first, and their bytes.
    pub segments: u64,
    pub bytes: u64,
    /// Answers that came after another server's.
    pub duplicates: u64,
    pub timeouts: u64,
}

impl Server {
    fn new() -> Server {
        Server {
            asks: Vec::new(),
            window: INITIAL_WINDOW,
            latency: None,
            gap: None,
            last_answer: None,
            busy: false,
            waiting_since: None,
            heard: None,
            srtt: Duration::ZERO,
            failed: None,
            segments: 0,
            bytes: 0,
            duplicates: 0,
            timeouts: 0,
        }
    }

    pub fn outstanding(&self) -> usize {
        self.asks.len()
    }

    #[cfg(test)]
    pub fn window(&self) -> usize {
        self.window
    }

    /// How long a request may wait for its answer.
    pub fn timeout(&self) -> Duration {
        match self.latency {
            None => INITIAL_TIMEOUT,
            Some(l) => (l * 4).clamp(MIN_TIMEOUT, MAX_TIMEOUT),
        }
    }

    /// How long it has owed answers without a packet heard from it.
    fn silent(&self, now: Instant) -> Option<Duration> {
        let since = self.waiting_since?.max(self.heard.unwrap_or(self.waiting_since?));
        Some(now.saturating_duration_since(since))
    }

    fn asked(&self, index: u32) -> bool {
        self.asks.iter().any(|a| a.index == index)
    }
}

/// What became of an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// The segment's first answer: verify it, then [`Schedule::verified`]
    /// or [`Schedule::fail`].
    Fresh,
    /// Another server's answer came first.
    Duplicate,
    /// Never asked of this server (or it has failed): ignore it.
    Unasked,
}

/// What a timer tick found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tick {
    /// A request to this server timed out; its segment went back to the queue.
    Slow { server: ServerIx, index: u32 },
    /// The server gave no answer for too long and is dropped.
    Failed { server: ServerIx, why: String },
}

/// The segments of one file and the servers fetching them.
#[derive(Debug)]
pub struct Schedule {
    segs: Vec<Seg>,
    /// Waiting segments, front first; entries no longer waiting are skipped.
    queue: VecDeque<u32>,
    servers: Vec<Server>,
    done: u32,
    /// The server offered the next request first: it moves on with every
    /// request, so that a budget of a few at a time (`--rate`) still
    /// spreads over the servers.
    turn: usize,
}

fn ewma(old: Option<Duration>, sample: Duration) -> Duration {
    match old {
        None => sample,
        Some(o) => (o * 3 + sample) / 4,
    }
}

impl Schedule {
    /// `done[i]`: segment i is already on disk (resumed).
    pub fn new(done: &[bool], servers: usize) -> Schedule {
        let segs: Vec<Seg> = done.iter().map(|&d| if d { Seg::Done } else { Seg::Waiting }).collect();
        let queue = (0..segs.len() as u32).filter(|&i| segs[i as usize] == Seg::Waiting).collect();
        let done = done.iter().filter(|d| **d).count() as u32;
        Schedule { segs, queue, servers: (0..servers).map(|_| Server::new()).collect(), done, turn: 0 }
    }

    pub fn servers(&self) -> &[Server] {
        &self.servers
    }

    pub fn is_complete(&self) -> bool {
        self.done as usize == self.segs.len()
    }

    /// Servers still taking part.
    pub fn live(&self) -> usize {
        self.servers.iter().filter(|s| s.failed.is_none()).count()
    }

    /// The connection's smoothed RTT, which sizes the server's window.
    pub fn set_srtt(&mut self, server: ServerIx, srtt: Duration) {
        self.servers[server].srtt = srtt;
    }

    /// The requests to send now: each live server's free slots filled from
    /// the queue, then the endgame's second asks. The caller sends them.
    #[cfg(test)]
    pub fn requests(&mut self, now: Instant) -> Vec<(ServerIx, u32)> {
        self.requests_within(now, usize::MAX)
    }

    /// [`Schedule::requests`], at most `budget` of them (`--rate`: what
    /// the cap allows now); the rest wait for a later call.
    pub fn requests_within(&mut self, now: Instant, budget: usize) -> Vec<(ServerIx, u32)> {
        let mut out = Vec::new();
        // Round by round, one request per server per round, so that
        // segments at the front of the queue spread over the servers.
        let n = self.servers.len();
        loop {
            let mut any = false;
            let turn = self.turn;
            for s in (0..n).map(|k| (turn + k) % n) {
                let server = &self.servers[s];
                if out.len() >= budget || server.failed.is_some() || server.asks.len() >= server.window {
                    continue;
                }
                if let Some(index) = self.pop_waiting() {
                    self.ask(s, index, now);
                    out.push((s, index));
                    any = true;
                }
            }
            self.turn = out.last().map_or(self.turn, |&(s, _)| (s + 1) % n.max(1));
            if !any {
                break;
            }
        }
        if !self.has_waiting() {
            for s in 0..self.servers.len() {
                let server = &self.servers[s];
                if out.len() >= budget || server.failed.is_some() || !server.asks.is_empty() {
                    continue;
                }
                if let Some(index) = self.endgame_pick(s) {
                    self.ask(s, index, now);
                    out.push((s, index));
                }
            }
        }
        out
    }

    /// Whether any segment waits in the queue (dropping stale entries).
    fn has_waiting(&mut self) -> bool {
        while let Some(&i) = self.queue.front() {
            if self.segs[i as usize] == Seg::Waiting {
                return true;
            }
            self.queue.pop_front();
        }
        false
    }

    fn pop_waiting(&mut self) -> Option<u32> {
        while let Some(i) = self.queue.pop_front() {
            if self.segs[i as usize] == Seg::Waiting {
                return Some(i);
            }
        }
        None
    }

    /// The segment outstanding longest elsewhere that `s` has not been
    /// asked for and that has room for another copy.
    fn endgame_pick(&self, s: ServerIx) -> Option<u32> {
        let mut best: Option<(Instant, u32)> = None;
        for (o, other) in self.servers.iter().enumerate() {
            if o == s {
                continue;
            }
            for a in &other.asks {
                let room = matches!(self.segs[a.index as usize], Seg::Asked { copies } if copies < MAX_COPIES);
                if room && !self.servers[s].asked(a.index) && best.is_none_or(|(t, _)| a.sent < t) {
                    best = Some((a.sent, a.index));
                }
            }
        }
        best.map(|(_, i)| i)
    }

    fn ask(&mut self, s: ServerIx, index: u32, now: Instant) {
        let seg = &mut self.segs[index as usize];
        *seg = match *seg {
            Seg::Waiting => Seg::Asked { copies: 1 },
            Seg::Asked { copies } => Seg::Asked { copies: copies + 1 },
            Seg::Done => unreachable!("a done segment is never asked for"),
        };
        let server = &mut self.servers[s];
        if server.asks.is_empty() {
            server.waiting_since = Some(now);
        }
        server.asks.push(Ask { index, sent: now, late: false });
    }

    /// One live ask of `index` fewer; back to the queue's front if none is left.
    fn drop_live_ask(&mut self, index: u32) {
        if let Seg::Asked { copies } = self.segs[index as usize] {
            self.segs[index as usize] = Seg::Asked { copies: copies.saturating_sub(1) };
            self.requeue_orphan(index);
        }
    }

    /// A segment asked of no one live and not done goes back to the front.
    fn requeue_orphan(&mut self, index: u32) {
        if self.segs[index as usize] == (Seg::Asked { copies: 0 }) {
            self.segs[index as usize] = Seg::Waiting;
            self.queue.push_front(index);
        }
    }

    /// A segment arrived from `s` (its length already checked).
    pub fn answer(&mut self, s: ServerIx, index: u32, now: Instant) -> Answer {
        let server = &mut self.servers[s];
        if server.failed.is_some() {
            return Answer::Unasked;
        }
        let Some(at) = server.asks.iter().position(|a| a.index == index) else { return Answer::Unasked };
        let ask = server.asks.remove(at);
        server.latency = Some(ewma(server.latency, now.saturating_duration_since(ask.sent)));
        if let (true, Some(last)) = (server.busy, server.last_answer) {
            server.gap = Some(ewma(server.gap, now.saturating_duration_since(last)));
        }
        server.last_answer = Some(now);
        server.busy = !server.asks.is_empty();
        server.waiting_since = server.busy.then_some(now);
        if let Some(gap) = server.gap.filter(|g| !g.is_zero()) {
            let cover = server.srtt.as_nanos().div_ceil(gap.as_nanos()) as usize;
            server.window = (cover + 2).clamp(MIN_WINDOW, MAX_WINDOW);
        } else if !ask.late {
            server.window = server.window.max(MIN_WINDOW);
        }
        if let (false, Seg::Asked { copies }) = (ask.late, self.segs[index as usize]) {
            // Zero copies while it is checked: verified makes it done, a
            // failed check puts it back in the queue.
            self.segs[index as usize] = Seg::Asked { copies: copies.saturating_sub(1) };
        }
        if self.segs[index as usize] == Seg::Done {
            self.servers[s].duplicates += 1;
            return Answer::Duplicate;
        }
        Answer::Fresh
    }

    /// The fresh segment `index` from `s` matched its hash and is written.
    pub fn verified(&mut self, s: ServerIx, index: u32, bytes: u64) {
        if self.segs[index as usize] != Seg::Done {
            self.segs[index as usize] = Seg::Done;
            self.done += 1;
            self.servers[s].segments += 1;
            self.servers[s].bytes += bytes;
        }
    }

    /// Drops `s` for good: its outstanding segments go back to the queue
    /// (`also` is a fresh answer of it that failed its check).
    pub fn fail(&mut self, s: ServerIx, why: String, also: Option<u32>) {
        if self.servers[s].failed.is_some() {
            return;
        }
        let asks = std::mem::take(&mut self.servers[s].asks);
        // Backwards, so that they keep their order at the queue's front.
        for a in asks.iter().rev().filter(|a| !a.late) {
            self.drop_live_ask(a.index);
        }
        if let Some(index) = also {
            self.requeue_orphan(index);
        }
        let server = &mut self.servers[s];
        server.failed = Some(why);
        server.window = 0;
        server.waiting_since = None;
    }

    /// Times out requests and drops servers silent for too long; call it
    /// every 100 ms or so.
    pub fn tick(&mut self, now: Instant) -> Vec<Tick> {
        let mut out = Vec::new();
        for s in 0..self.servers.len() {
            if self.servers[s].failed.is_some() {
                continue;
            }
            if let Some(failed) = self.fail_if_silent(s, now) {
                out.push(failed);
                continue;
            }
            let timeout = self.servers[s].timeout();
            let mut expired = Vec::new();
            for a in self.servers[s].asks.iter_mut() {
                if !a.late && now.saturating_duration_since(a.sent) > timeout {
                    a.late = true;
                    expired.push(a.index);
                }
            }
            for index in expired {
                let server = &mut self.servers[s];
                server.timeouts += 1;
                server.window = 1;
                self.drop_live_ask(index);
                out.push(Tick::Slow { server: s, index });
            }
        }
        out
    }
}

/// How long a server owing answers may stay silent: eight round trips,
/// and at least [`MIN_SILENCE`] (a loss repaired by a backed-off timeout
/// leaves a gap of a few hundred milliseconds).
pub fn silence(srtt: Duration) -> Duration {
    (srtt * 8).max(MIN_SILENCE)
}

impl Schedule {
    /// A packet of `s`'s connection arrived (the caller samples its
    /// connection's counters).
    pub fn heard(&mut self, s: ServerIx, now: Instant) {
        self.servers[s].heard = Some(now);
    }

    fn fail_if_silent(&mut self, s: ServerIx, now: Instant) -> Option<Tick> {
        let server = &self.servers[s];
        let silent = server.silent(now)?;
        if server.failed.is_some() || silent <= silence(server.srtt) {
            return None;
        }
        let why = format!(
            "no packet for {} while it owed {} segment(s)",
            crate::size::human_duration(silent),
            server.asks.len()
        );
        self.fail(s, why.clone(), None);
        Some(Tick::Failed { server: s, why })
    }

    /// At the end: fails the servers that are silent while owing answers
    /// (the others finished their segments before the next tick did).
    pub fn settle(&mut self, now: Instant) -> Vec<Tick> {
        (0..self.servers.len()).filter_map(|s| self.fail_if_silent(s, now)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    /// Runs servers, each answering one request per `pace` in order and
    /// dying after `lives` answers, until the file is complete or `limit`
    /// passes; settles and returns the schedule and the time taken.
    fn simulate(count: usize, servers: &[(Duration, usize)], limit: Duration) -> (Schedule, Duration) {
        let t0 = Instant::now();
        let mut now = t0;
        let mut sched = Schedule::new(&vec![false; count], servers.len());
        let mut queues: Vec<VecDeque<u32>> = vec![VecDeque::new(); servers.len()];
        let mut next: Vec<Option<Instant>> = vec![None; servers.len()];
        let mut answered = vec![0; servers.len()];
        while !sched.is_complete() && now - t0 < limit {
            for (s, index) in sched.requests(now) {
                queues[s].push_back(index);
            }
            for (s, &(pace, lives)) in servers.iter().enumerate() {
                if answered[s] >= lives {
                    continue;
                }
                // A live server is sending: its packets are heard.
                sched.heard(s, now);
                if next[s].is_none() && !queues[s].is_empty() {
                    next[s] = Some(now + pace);
                }
                if next[s].is_some_and(|t| t <= now) {
                    let index = queues[s].pop_front().unwrap();
                    if sched.answer(s, index, now) == Answer::Fresh {
                        sched.verified(s, index, 1);
                    }
                    answered[s] += 1;
                    next[s] = None;
                }
            }
            sched.tick(now);
            now += MS;
        }
        sched.settle(now);
        (sched, now - t0)
    }

    const FOREVER: usize = usize::MAX;

    #[test]
    fn a_fast_server_gets_more_segments() {
        let servers = [(2 * MS, FOREVER), (10 * MS, FOREVER), (10 * MS, FOREVER)];
        let (sched, _) = simulate(200, &servers, Duration::from_secs(10));
        assert!(sched.is_complete());
        let s = sched.servers();
        assert!(s[0].segments > 2 * s[1].segments, "{:?}", s.iter().map(|s| s.segments).collect::<Vec<_>>());
        assert!(s.iter().all(|s| s.failed.is_none() && s.segments > 0 && s.duplicates <= 1), "{s:?}");
    }

    #[test]
    fn a_server_dead_from_the_start_is_covered_by_the_endgame() {
        let (sched, took) =
            simulate(100, &[(5 * MS, FOREVER), (5 * MS, 0), (5 * MS, FOREVER)], Duration::from_secs(30));
        assert!(sched.is_complete());
        assert_eq!(sched.servers()[1].segments, 0);
        // The others took its segments without waiting out its timeout.
        assert!(took < MIN_SILENCE, "{took:?}");
    }

    #[test]
    fn a_budget_of_one_request_at_a_time_still_spreads_over_the_servers() {
        let now = Instant::now();
        let mut sched = Schedule::new(&[false; 6], 3);
        let mut asked = Vec::new();
        for _ in 0..6 {
            let got = sched.requests_within(now, 1);
            assert_eq!(got.len(), 1, "{got:?}");
            asked.push(got[0]);
        }
        assert_eq!(asked, [(0, 0), (1, 1), (2, 2), (0, 3), (1, 4), (2, 5)]);
        assert!(sched.requests_within(now, 0).is_empty());
    }

    #[test]
    fn a_server_that_dies_mid_way_falls_silent_and_is_dropped() {
        let servers = [(5 * MS, FOREVER), (5 * MS, 5), (5 * MS, FOREVER)];
        let (sched, took) = simulate(1000, &servers, Duration::from_secs(30));
        assert!(sched.is_complete());
        let dead = &sched.servers()[1];
        assert_eq!(dead.segments, 5);
        let why = dead.failed.as_deref().unwrap_or_default();
        assert!(why.starts_with("no packet for 1.5") && why.ends_with("owed 2 segment(s)"), "{why}");
        assert!(took < Duration::from_secs(3), "{took:?}");
    }

    #[test]
    fn a_slow_server_that_is_still_sending_keeps_its_place() {
        let servers = [(5 * MS, FOREVER), (6000 * MS, FOREVER), (5 * MS, FOREVER)];
        let (sched, _) = simulate(2000, &servers, Duration::from_secs(30));
        assert!(sched.is_complete());
        let slow = &sched.servers()[1];
        assert!(slow.failed.is_none(), "{slow:?}");
        assert!(slow.timeouts > 0, "its first requests went to the others: {slow:?}");
    }

    #[test]
    fn a_failed_server_returns_its_segments_to_the_front() {
        let now = Instant::now();
        let mut sched = Schedule::new(&[false; 10], 2);
        let first = sched.requests(now);
        assert_eq!(first, [(0, 0), (1, 1), (0, 2), (1, 3), (0, 4), (1, 5)]);
        assert_eq!(sched.answer(1, 1, now), Answer::Fresh);
        sched.verified(1, 1, 10);
        sched.fail(1, "lost".into(), None);
        assert_eq!(sched.live(), 1);
        assert_eq!(sched.answer(1, 3, now), Answer::Unasked, "a failed server's answers are ignored");
        assert_eq!(sched.answer(0, 0, now), Answer::Fresh);
        sched.verified(0, 0, 10);
        // Its segments 3 and 5 come before 6..9.
        assert_eq!(sched.requests(now), [(0, 3)]);
        assert_eq!(sched.servers()[1].bytes, 10);
    }

    #[test]
    fn endgame_asks_an_idle_server_and_the_first_answer_wins() {
        let now = Instant::now();
        let mut sched = Schedule::new(&[false, false, true], 2);
        assert_eq!(sched.requests(now), [(0, 0), (1, 1)]);
        assert_eq!(sched.answer(1, 1, now + MS), Answer::Fresh);
        sched.verified(1, 1, 1);
        // Nothing waits: idle server 1 asks for segment 0 too.
        assert_eq!(sched.requests(now + MS), [(1, 0)]);
        assert_eq!(sched.requests(now + MS), [], "at most one endgame ask per idle server");
        assert_eq!(sched.answer(1, 0, now + 2 * MS), Answer::Fresh);
        sched.verified(1, 0, 1);
        assert!(sched.is_complete());
        assert_eq!(sched.answer(0, 0, now + 3 * MS), Answer::Duplicate);
        assert_eq!(sched.servers()[0].duplicates, 1);
    }

    #[test]
    fn a_late_answer_is_still_taken_and_a_bad_one_requeues() {
        let t = Instant::now();
        let mut sched = Schedule::new(&[false, false], 1);
        assert_eq!(sched.requests(t), [(0, 0), (0, 1)]);
        let late = t + INITIAL_TIMEOUT + MS;
        sched.heard(0, late);
        let ticks = sched.tick(late);
        assert_eq!(ticks, [Tick::Slow { server: 0, index: 0 }, Tick::Slow { server: 0, index: 1 }]);
        assert_eq!(sched.servers()[0].window(), 1);
        assert_eq!(sched.requests(late), [], "its window is full of late requests");
        assert_eq!(sched.answer(0, 1, late), Answer::Fresh);
        sched.verified(0, 1, 1);
        assert_eq!(sched.answer(0, 0, late), Answer::Fresh);
        sched.fail(0, "segment 0 does not match its hash".into(), Some(0));
        assert!(!sched.is_complete());
        assert_eq!(sched.live(), 0);
    }

    #[test]
    fn the_window_follows_the_round_trip_over_the_pace() {
        let t = Instant::now();
        let mut sched = Schedule::new(&[false; 40], 1);
        sched.set_srtt(0, 20 * MS);
        let mut now = t;
        for _ in 0..10 {
            sched.requests(now);
            let index = sched.servers[0].asks[0].index;
            now += 2 * MS;
            assert_eq!(sched.answer(0, index, now), Answer::Fresh);
            sched.verified(0, index, 1);
        }
        // 20 ms of round trip at one answer per 2 ms: 10 in flight, plus 2.
        assert_eq!(sched.servers()[0].window(), 12);
        assert!(sched.servers()[0].timeout() >= MIN_TIMEOUT);
    }
}
