//! When acknowledgements go out (spec §5.3) and how often the peer is asked
//! to send them (spec §5.6).
//!
//! The receiving half, [`AckState`], counts ack-eliciting packets since the
//! last ack and holds the policy the peer asked for: an ack after
//! `threshold` packets or `max_delay`, whichever comes first. The sending
//! half, [`AckFrequency`], decides when to ask the peer for a new policy:
//! an ack per about an eighth of the congestion window instead of one
//! every two packets, as draft-ietf-quic-ack-frequency does. Immediate acks
//! (reordering, loss, gaps, KLV) are not affected.

use std::time::{Duration, Instant};

use crate::wire::chunk::{parse_chunks, Chunk};
use crate::wire::Echo;

/// Largest ack threshold a request may set (spec §5.6); larger ones are
/// lowered to it. At a 1,452-byte datagram, 64 packets are 93 KB.
pub(crate) const MAX_ACK_THRESHOLD: u16 = 64;

/// Longest ack delay a request may set (spec §5.6); longer ones are
/// lowered to it.
pub(crate) const MAX_REQUESTED_ACK_DELAY: Duration = Duration::from_secs(1);

/// Fraction of the congestion window an ack may wait for: 1/8 (spec §5.6).
const WINDOW_FRACTION: u64 = 8;

/// Acknowledgement bookkeeping on the receiving side (spec §5.3).
#[derive(Debug)]
pub(super) struct AckState {
    /// Ack-eliciting packets received since we last sent an ack.
    pub pending: u32,
    /// Send an ack now (out of order, duplicate, FIN, handshake, probe, window update).
    pub immediate: bool,
    /// When the oldest unacknowledged ack-eliciting packet arrived.
    pub since: Option<Instant>,
    /// The peer ended its sending with a FIN on data (a whole request) and
    /// we have not sent ours: the ack waits `reply_ack_delay` for our
    /// answer to carry it (spec §5.3).
    pub reply_wait: bool,
    /// An ack is due after this many ack-eliciting packets.
    pub threshold: u32,
    /// Longest an ack waits after the first packet it covers.
    pub max_delay: Duration,
    /// Number of the last ACK_FREQUENCY request applied (spec §5.6).
    applied: Option<u32>,
    /// The window our last packet advertised (spec §7.3's update rule).
    pub advertised: u64,
    /// The peer takes RESENT chunks and echoes (spec §5.4.2): it announced
    /// `TX_ECHO`, or sent one of them.
    pub peer_echoes: bool,
    /// Which transmission of which packet arrived last: the echo our next
    /// ack carries to such a peer (spec §5.4.2).
    pub echo: Option<Echo>,
}

impl AckState {
    /// Before any request: our own `ack_frequency` and `max_ack_delay`.
    pub fn new(threshold: u32, max_delay: Duration) -> Self {
        AckState {
            pending: 0,
            immediate: false,
            since: None,
            reply_wait: false,
            threshold: threshold.max(1),
            max_delay,
            applied: None,
            advertised: u64::MAX,
            peer_echoes: false,
            echo: None,
        }
    }

    /// An ack went out: nothing is owed until the next packet.
    pub fn on_ack_sent(&mut self) {
        self.pending = 0;
        self.immediate = false;
        self.since = None;
        self.reply_wait = false;
    }

    /// Whether an ack is due now.
    pub fn due(&self) -> bool {
        self.immediate || self.pending >= self.threshold
    }

    /// spec §5.6: applies the newest ACK_FREQUENCY request among the
    /// control chunks at the head of `data` (they precede the data chunks,
    /// spec §13.2), if it is newer than the last one applied. Returns
    /// whether the packet carried one.
    pub fn on_request(&mut self, data: &[u8]) -> bool {
        let mut seen = false;
        for c in parse_chunks(data) {
            match c {
                Ok(Chunk::AckFrequency { seq, threshold, max_delay_us }) => {
                    seen = true;
                    if self.applied.is_some_and(|last| seq <= last) {
                        continue;
                    }
                    self.applied = Some(seq);
                    self.threshold = u32::from(threshold.min(MAX_ACK_THRESHOLD));
                    self.max_delay = Duration::from_micros(u64::from(max_delay_us)).min(MAX_REQUESTED_ACK_DELAY);
                }
                Ok(Chunk::Data(_)) | Err(_) => break,
                Ok(_) => {}
            }
        }
        seen
    }
}

/// The sending side of spec §5.6: what we last asked the peer for.
#[derive(Debug)]
pub(super) struct AckFrequency {
    /// We may send requests (`ConnectionConfig::adaptive_acks`).
    enabled: bool,
    /// The peer understands the chunk: it announced the feature (spec
    /// §3.3.2), or sent us one.
    pub peer_takes_it: bool,
    /// Number of the next request.
    next_seq: u32,
    /// What we last asked for, and when.
    asked: Option<(AckRequest, Instant)>,
    /// The longest delay we ask for: our `max_ack_delay`, the one our RTO
    /// allows for.
    max_delay: Duration,
    /// The peer's threshold before any request: our own `ack_frequency`.
    default_threshold: u32,
}

/// One ack-frequency request's two values (spec §5.6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct AckRequest {
    /// Ack-eliciting packets the peer lets pass before it acks.
    pub threshold: u16,
    /// Longest the peer holds an ack back.
    pub delay: Duration,
}

/// The shortest ack delay asked for: below it, timer wake-ups cost more
/// than the acks they save.
const MIN_REQUESTED_ACK_DELAY: Duration = Duration::from_millis(1);

/// Fraction of the smoothed RTT an ack may wait (spec §5.6): a quarter
/// keeps RTT samples and the ack clock within a quarter of a round trip
/// of what an immediate ack would give.
const RTT_FRACTION: u32 = 4;

impl AckFrequency {
    pub fn new(enabled: bool, max_delay: Duration, default_threshold: u32) -> Self {
        AckFrequency { enabled, peer_takes_it: false, next_seq: 0, asked: None, max_delay, default_threshold }
    }

    /// The packets the peer lets pass before it acks: what we last asked
    /// for, or the default.
    pub fn peer_threshold(&self) -> u32 {
        self.asked.map_or(self.default_threshold, |(r, _)| u32::from(r.threshold))
    }

    /// The request to send now, if one is due: the first one as soon as
    /// the peer takes it (it tells a listener that we take them too), then
    /// whenever a window's eighth, or a quarter of the smoothed RTT, moved
    /// at least twofold from what was asked, at most once per smoothed RTT.
    pub fn due(&self, now: Instant, cwnd: u64, mss: u16, srtt: Duration) -> Option<AckRequest> {
        if !self.enabled || !self.peer_takes_it {
            return None;
        }
        let packets = cwnd / (WINDOW_FRACTION * u64::from(mss.max(1)));
        let threshold = packets.clamp(2, u64::from(MAX_ACK_THRESHOLD)) as u16;
        let delay = (srtt / RTT_FRACTION).clamp(MIN_REQUESTED_ACK_DELAY.min(self.max_delay), self.max_delay);
        let want = AckRequest { threshold, delay };
        match self.asked {
            None => Some(want),
            Some((asked, at)) => {
                let twofold = |a: u128, b: u128| a >= b.saturating_mul(2) || a.saturating_mul(2) <= b;
                let moved = twofold(u128::from(want.threshold), u128::from(asked.threshold))
                    || twofold(want.delay.as_micros(), asked.delay.as_micros());
                (moved && now.saturating_duration_since(at) >= srtt).then_some(want)
            }
        }
    }

    /// The request's chunk; call [`AckFrequency::on_sent`] once it left.
    pub fn chunk<D>(&self, request: AckRequest) -> Chunk<D> {
        let max_delay_us = u32::try_from(request.delay.as_micros()).unwrap_or(u32::MAX);
        Chunk::AckFrequency { seq: self.next_seq, threshold: request.threshold, max_delay_us }
    }

    /// `request` went out.
    pub fn on_sent(&mut self, now: Instant, request: AckRequest) {
        self.next_seq = self.next_seq.wrapping_add(1);
        self.asked = Some((request, now));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encoded(chunks: &[Chunk<&[u8]>]) -> Vec<u8> {
        let mut out = vec![0u8; chunks.iter().map(|c| c.encoded_len()).sum()];
        let mut at = 0;
        for c in chunks {
            at += c.emit(&mut out[at..]);
        }
        out
    }

    #[test]
    fn a_request_sets_threshold_and_delay_and_an_older_one_is_ignored() {
        let mut s = AckState::new(2, Duration::from_millis(25));
        let newer = Chunk::AckFrequency { seq: 5, threshold: 16, max_delay_us: 10_000 };
        assert!(s.on_request(&encoded(&[newer])));
        assert_eq!((s.threshold, s.max_delay), (16, Duration::from_millis(10)));
        let older = Chunk::AckFrequency { seq: 4, threshold: 3, max_delay_us: 1 };
        assert!(s.on_request(&encoded(&[older])));
        assert_eq!(s.threshold, 16, "a late retransmission of an older request changes nothing");
    }

    #[test]
    fn a_request_beyond_the_limits_is_lowered_to_them() {
        let mut s = AckState::new(2, Duration::from_millis(25));
        s.on_request(&encoded(&[Chunk::AckFrequency { seq: 0, threshold: u16::MAX, max_delay_us: u32::MAX }]));
        assert_eq!((s.threshold, s.max_delay), (u32::from(MAX_ACK_THRESHOLD), MAX_REQUESTED_ACK_DELAY));
    }

    #[test]
    fn the_threshold_asked_is_an_eighth_of_the_window_moved_twofold_once_per_rtt() {
        let t0 = Instant::now();
        let srtt = Duration::from_millis(100);
        let mut f = AckFrequency::new(true, Duration::from_millis(25), 2);
        let threshold = |r: Option<AckRequest>| r.map(|r| r.threshold);
        assert_eq!(f.due(t0, 1 << 20, 1452, srtt), None, "not before the peer takes it");
        f.peer_takes_it = true;
        // 10 packets of window: the first request asks for the floor, 2.
        let first = f.due(t0, 14_520, 1452, srtt).expect("first request");
        assert_eq!(first.threshold, 2);
        f.on_sent(t0, first);
        assert_eq!(f.due(t0, 14_520, 1452, srtt), None);
        // 1 MiB of window = 722 packets: an eighth is 90, capped at 64,
        // but not within one RTT of the last request.
        assert_eq!(f.due(t0 + srtt / 2, 1 << 20, 1452, srtt), None);
        let big = f.due(t0 + srtt, 1 << 20, 1452, srtt).expect("twofold");
        assert_eq!(big.threshold, MAX_ACK_THRESHOLD);
        f.on_sent(t0 + srtt, big);
        // 40 wanted against 64 asked: not twofold, no request.
        assert_eq!(f.due(t0 + srtt * 3, 40 * 8 * 1452, 1452, srtt), None);
        let r = f.due(t0 + srtt * 3, 30 * 8 * 1452, 1452, srtt).expect("halved");
        assert_eq!(threshold(Some(r)), Some(30));
        assert!(matches!(f.chunk::<&[u8]>(r), Chunk::AckFrequency { seq: 2, threshold: 30, max_delay_us: 25_000 }));
    }

    #[test]
    fn the_delay_asked_is_a_quarter_of_the_rtt_within_1_ms_and_max_ack_delay() {
        let t0 = Instant::now();
        let mut f = AckFrequency::new(true, Duration::from_millis(25), 2);
        f.peer_takes_it = true;
        let delay = |f: &AckFrequency, at, srtt| f.due(at, 14_520, 1452, srtt).map(|r| r.delay);
        // A 200 ms path: capped at our own max_ack_delay, which the RTO allows for.
        assert_eq!(delay(&f, t0, Duration::from_millis(200)), Some(Duration::from_millis(25)));
        // A 20 ms path: 5 ms.
        let r = f.due(t0, 14_520, 1452, Duration::from_millis(20)).expect("first request");
        assert_eq!(r.delay, Duration::from_millis(5));
        f.on_sent(t0, r);
        // 12 ms is not twofold from 20 ms; 8 ms is, once an RTT has passed.
        assert_eq!(delay(&f, t0 + Duration::from_millis(20), Duration::from_millis(12)), None);
        assert_eq!(delay(&f, t0 + Duration::from_millis(5), Duration::from_millis(8)), None, "within one RTT");
        assert_eq!(delay(&f, t0 + Duration::from_millis(20), Duration::from_millis(8)), Some(Duration::from_millis(2)));
        // Loopback's 50 µs: the 1 ms floor.
        assert_eq!(delay(&f, t0 + Duration::from_secs(1), Duration::from_micros(50)), Some(Duration::from_millis(1)));
    }

    #[test]
    fn a_disabled_sender_never_asks() {
        let mut f = AckFrequency::new(false, Duration::from_millis(25), 2);
        f.peer_takes_it = true;
        assert_eq!(f.due(Instant::now(), 1 << 30, 1452, Duration::ZERO), None);
    }
}
