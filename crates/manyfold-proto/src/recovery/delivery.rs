//! Delivery-rate estimation (draft-cheng-iccrg-delivery-rate-estimation;
//! spec §9.4): each sent packet is stamped with how much had been delivered
//! when it left; its ack then yields the rate at which data was delivered
//! over that packet's flight. Model-based controllers (BBR) feed on it.

use std::time::{Duration, Instant};

/// The connection's delivery state when a packet was (re)sent. Its two
/// times are kept as nanoseconds before that send, so that the record a
/// sender keeps per packet in flight stays small (16 bytes instead of 40;
/// issue 20 item 6). Both are within a round trip or so of the send; one
/// further back than ~4.3 s is held at that bound, which can only shorten
/// the interval of a sample whose packet itself was in flight that long.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Stamp {
    delivered: u64,
    delivered_ago_ns: u32,
    first_sent_ago_ns: u32,
}

fn nanos_before(sent: Instant, t: Instant) -> u32 {
    u32::try_from(sent.saturating_duration_since(t).as_nanos()).unwrap_or(u32::MAX)
}

fn back(sent: Instant, ago_ns: u32) -> Instant {
    sent.checked_sub(Duration::from_nanos(u64::from(ago_ns))).unwrap_or(sent)
}

impl Stamp {
    /// The same stamp for a packet whose send time moves from `from` to
    /// `to` (a tail-loss probe resends it without a new stamp).
    pub fn moved(self, from: Instant, to: Instant) -> Stamp {
        let shift = u32::try_from(to.saturating_duration_since(from).as_nanos()).unwrap_or(u32::MAX);
        Stamp {
            delivered: self.delivered,
            delivered_ago_ns: self.delivered_ago_ns.saturating_add(shift),
            first_sent_ago_ns: self.first_sent_ago_ns.saturating_add(shift),
        }
    }
}

/// One delivery-rate sample, taken per acknowledgement.
#[derive(Debug, Clone, Copy)]
pub struct RateSample {
    /// Bytes per second delivered over the sampled packet's flight.
    pub delivery_rate: f64,
    /// Bytes delivered in total, now.
    pub delivered: u64,
    /// Bytes delivered when the sampled packet was sent.
    pub prior_delivered: u64,
    /// Whether the sampled packet left while the sender was app-limited
    /// (the sample then underestimates the path).
    pub is_app_limited: bool,
    /// RTT of the sampled packet; `None` if it was ever resent (Karn: the
    /// ack may be for an earlier copy).
    pub rtt: Option<Duration>,
    /// Bytes newly acknowledged by this ack.
    pub newly_acked: u64,
    /// Bytes in flight after this ack.
    pub bytes_in_flight: u64,
}

#[derive(Debug, Clone, Default)]
pub(crate) struct Delivery {
    delivered: u64,
    delivered_time: Option<Instant>,
    first_sent_time: Option<Instant>,
    /// The sample candidate of the ack being processed: the most recently
    /// sent packet it acknowledges (stamp, send time, app-limited, resent).
    candidate: Option<(Stamp, Instant, bool, bool)>,
    newly_acked: u64,
}

impl Delivery {
    /// Stamps a packet being sent now; `idle` says nothing was in flight.
    pub fn stamp(&mut self, now: Instant, idle: bool) -> Stamp {
        if idle || self.delivered_time.is_none() {
            self.delivered_time = Some(now);
            self.first_sent_time = Some(now);
        }
        Stamp {
            delivered: self.delivered,
            delivered_ago_ns: nanos_before(now, self.delivered_time.unwrap_or(now)),
            first_sent_ago_ns: nanos_before(now, self.first_sent_time.unwrap_or(now)),
        }
    }

    /// A packet sent at `sent` with `stamp` was acknowledged (or SACKed).
    pub fn on_acked(&mut self, now: Instant, stamp: Stamp, sent: Instant, size: u64, flags: (bool, bool)) {
        let (app_limited, resent) = flags;
        self.delivered += size;
        self.delivered_time = Some(now);
        self.newly_acked += size;
        if self.candidate.is_none_or(|(_, s, _, _)| sent >= s) {
            self.candidate = Some((stamp, sent, app_limited, resent));
        }
    }

    /// The sample of the ack just processed, if it acknowledged anything.
    /// A sample over less than `min_rtt` is discarded: a packet resent
    /// spuriously and acked through its original would overstate the rate
    /// (as Linux's tcp_rate_gen does).
    pub fn take_sample(&mut self, now: Instant, bytes_in_flight: u64, min_rtt: Duration) -> Option<RateSample> {
        let (stamp, sent, app_limited, resent) = self.candidate.take()?;
        let newly_acked = std::mem::take(&mut self.newly_acked);
        // The next flight's send interval starts at this packet's send.
        self.first_sent_time = Some(sent);
        let send_elapsed = Duration::from_nanos(u64::from(stamp.first_sent_ago_ns));
        let ack_elapsed = now.saturating_duration_since(back(sent, stamp.delivered_ago_ns));
        let interval = send_elapsed.max(ack_elapsed);
        let bytes = self.delivered - stamp.delivered;
        if interval.is_zero() || interval < min_rtt {
            return None;
        }
        Some(RateSample {
            delivery_rate: bytes as f64 / interval.as_secs_f64(),
            delivered: self.delivered,
            prior_delivered: stamp.delivered,
            is_app_limited: app_limited,
            rtt: (!resent).then(|| now.saturating_duration_since(sent)),
            newly_acked,
            bytes_in_flight,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_steady_stream_samples_its_rate() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut d = Delivery::default();
        // One 1000 B packet per ms, each acked 50 ms after it left: 1 MB/s.
        let mut in_flight = std::collections::VecDeque::new();
        let mut last = None;
        for t in 0..300u64 {
            let now = t0 + ms(t);
            while in_flight.front().is_some_and(|&(_, sent)| sent + ms(50) <= now) {
                let (stamp, sent) = in_flight.pop_front().unwrap();
                d.on_acked(now, stamp, sent, 1000, (false, false));
                last = d.take_sample(now, 50_000, ms(40)).or(last);
            }
            in_flight.push_back((d.stamp(now, in_flight.is_empty()), now));
        }
        let rs = last.expect("samples");
        assert!((0.95e6..1.05e6).contains(&rs.delivery_rate), "{}", rs.delivery_rate);
        assert_eq!(rs.rtt, Some(ms(50)));
    }

    #[test]
    fn a_stamp_moved_with_its_packets_send_time_keeps_its_times() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut d = Delivery::default();
        d.stamp(t0, true);
        let first = d.stamp(t0, false);
        d.on_acked(t0 + ms(30), first, t0, 1000, (false, false));
        let stamp = d.stamp(t0 + ms(40), false);
        let moved = stamp.moved(t0 + ms(40), t0 + ms(90));
        assert_eq!(back(t0 + ms(40), stamp.delivered_ago_ns), t0 + ms(30));
        assert_eq!(back(t0 + ms(90), moved.delivered_ago_ns), t0 + ms(30));
        assert_eq!(back(t0 + ms(90), moved.first_sent_ago_ns), back(t0 + ms(40), stamp.first_sent_ago_ns));
        // Further back than a u32 of nanoseconds holds: kept at the bound.
        assert_eq!(stamp.moved(t0, t0 + Duration::from_secs(10)).delivered_ago_ns, u32::MAX);
    }
}
