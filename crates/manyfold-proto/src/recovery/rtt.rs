//! Round-trip time estimation and the retransmission timeout (RFC 6298).

use std::time::{Duration, Instant};

/// Clock granularity G of RFC 6298 (2.2): the driver's timers are ~1 ms.
const GRANULARITY: Duration = Duration::from_millis(1);
/// The shortest probe timeout (spec §5.4).
const MIN_PTO: Duration = Duration::from_millis(10);
/// The most doublings late acks put on the PTO and the RTO (spec §5.4 step 8).
const MAX_LATE: u8 = 3;
/// The least time after which one doubling comes off again (spec §5.4
/// step 8); 16 SRTTs if longer.
const LATE_RELAX: Duration = Duration::from_secs(1);

/// RFC 6298 smoothed RTT, variation and RTO, plus the minimum RTT seen.
#[derive(Debug, Clone, Copy)]
pub struct RttEstimator {
    srtt: Option<Duration>,
    rttvar: Duration,
    latest: Duration,
    min: Duration,
    /// Samples taken so far.
    samples: u64,
    initial_rto: Duration,
    min_rto: Duration,
    max_rto: Duration,
    /// The longest the peer delays an ack (its `max_ack_delay`).
    ack_delay: Duration,
    /// The peer's round trip as earlier connections left it (spec §5.4.1):
    /// a floor under the PTO and the RTO until the first sample of data.
    remembered: Option<(Duration, Duration)>,
    /// SRTT and RTTVAR over the samples of data only (not of a SYN or a
    /// lone cookie echo): what the connection reports at its end.
    of_data: Option<(Duration, Duration)>,
    /// Doublings of the PTO and the RTO since acks came later than they
    /// allowed (spec §5.4 step 8).
    late: u8,
    /// Doublings are barred: RACK declared a loss at `late_at`.
    late_barred: bool,
    /// When the last doubling was added or taken off, or the loss that
    /// bars them was declared.
    late_at: Option<Instant>,
}

/// What a finished connection tells its endpoint's memory of the peer
/// (spec §5.4.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RttReport {
    /// Samples of data (not of the handshake), and no RTO backed off.
    Measured {
        /// The smoothed round trip of the data's samples.
        srtt: Duration,
        /// Their round-trip variation.
        rttvar: Duration,
    },
    /// The connection ended by a timeout or an unreachable peer: what
    /// was remembered no longer holds.
    Failed,
}

impl RttEstimator {
    /// An estimator before any sample: the RTO starts at `initial_rto` and stays within `min_rto`..`max_rto`; `ack_delay` is the peer's delayed-ack allowance added to it.
    pub fn new(initial_rto: Duration, min_rto: Duration, max_rto: Duration, ack_delay: Duration) -> Self {
        RttEstimator {
            srtt: None,
            rttvar: Duration::ZERO,
            latest: Duration::ZERO,
            min: Duration::ZERO,
            samples: 0,
            initial_rto,
            min_rto,
            max_rto,
            ack_delay,
            remembered: None,
            of_data: None,
            late: 0,
            late_barred: false,
            late_at: None,
        }
    }

    /// Takes the peer's remembered round trip (spec §5.4.1): until the
    /// first sample of data, the PTO and the RTO are at least what
    /// `srtt` and `rttvar` give (as Linux sets a new connection's RTO
    /// from its cached RTT). The handshake's samples measure a peer that
    /// answers without its application; the estimate itself stays the
    /// connection's own.
    pub fn remember(&mut self, srtt: Duration, rttvar: Duration) {
        self.remembered = Some((srtt, rttvar));
    }

    /// Feeds one sample of data. Callers apply Karn's rule: never a
    /// sample from a retransmitted packet (RFC 6298 (3)).
    pub fn on_sample(&mut self, r: Duration) {
        self.on_handshake_sample(r);
        self.remembered = None;
        self.of_data = Some(rfc6298(self.of_data, r));
    }

    /// Feeds one sample of a SYN or a lone cookie echo (spec §5.4.1): it
    /// moves the estimate as any, but neither ends the remembered floor
    /// nor goes into what the connection reports.
    pub fn on_handshake_sample(&mut self, r: Duration) {
        self.samples += 1;
        self.latest = r;
        self.min = if self.srtt.is_none() { r } else { self.min.min(r) };
        let (srtt, rttvar) = rfc6298(self.srtt.map(|s| (s, self.rttvar)), r);
        (self.srtt, self.rttvar) = (Some(srtt), rttvar);
    }

    /// SRTT and RTTVAR of the samples of data, if any (spec §5.4.1).
    pub fn of_data(&self) -> Option<(Duration, Duration)> {
        self.of_data
    }

    /// spec §5.4.1: the floor the remembered round trip puts under a
    /// timeout of SRTT + max(4·RTTVAR, G) + `extra`, until a sample of data.
    fn remembered_floor(&self, extra: Duration) -> Duration {
        self.remembered.map_or(Duration::ZERO, |(srtt, rttvar)| srtt + (rttvar * 4).max(GRANULARITY) + extra)
    }

    /// Whether any sample was taken.
    pub fn has_sample(&self) -> bool {
        self.srtt.is_some()
    }

    /// Smoothed RTT; the initial RTO's third before any sample (a guess used
    /// only for pacing-style decisions, never for the RTO itself).
    pub fn srtt(&self) -> Duration {
        self.srtt.unwrap_or(self.initial_rto / 3)
    }

    /// RTT variation (RFC 6298).
    pub fn rttvar(&self) -> Duration {
        self.rttvar
    }

    /// The latest sample.
    pub fn latest(&self) -> Duration {
        self.latest
    }

    /// The smallest sample.
    pub fn min(&self) -> Duration {
        self.min
    }

    /// How many samples were taken.
    pub fn samples(&self) -> u64 {
        self.samples
    }

    /// Probe timeout (spec §5.4): SRTT + max(4·RTTVAR, G) + G. Without the
    /// peer's ack delay — a flight's last packet asks for an immediate ack
    /// (spec §5.3) — so it comes the peer's ack delay less 1 ms before the
    /// RTO, and a spurious probe costs one datagram, never the window.
    ///
    /// At least `MIN_PTO` (10 ms, Linux's floor for its loss probe): on a
    /// sub-millisecond path a few milliseconds without the CPU would
    /// otherwise draw a probe from every flow of a loaded host.
    ///
    /// Doubled once for each [`RttEstimator::on_late_ack`] still in force.
    pub fn pto(&self) -> Duration {
        (self.srtt() + (self.rttvar * 4).max(GRANULARITY) + GRANULARITY)
            .max(MIN_PTO)
            .max(self.remembered_floor(GRANULARITY))
            * (1 << self.late)
    }

    /// spec §5.4 step 8: an ack that a transmission sent before a probe
    /// or an RTO drew came after it: the peer's acks come later than the
    /// timers allow (a receiver short of CPU), and each such timer resends
    /// for nothing. Both timers double, at most `MAX_LATE` times, unless
    /// RACK declared a loss within the quiet period: on a lossy path the
    /// ack that came before the probe may have been lost, not late.
    pub fn on_late_ack(&mut self, now: Instant) {
        if self.late_barred && self.late_at.is_some_and(|at| now.saturating_duration_since(at) < self.quiet()) {
            return;
        }
        self.late_barred = false;
        self.late = (self.late + 1).min(MAX_LATE);
        self.late_at = Some(now);
    }

    /// spec §5.4 step 8: RACK declared a loss. The doublings end: a lost
    /// tail is repaired one probe timeout after it, not eight.
    pub fn on_loss(&mut self, now: Instant) {
        self.late = 0;
        self.late_barred = true;
        self.late_at = Some(now);
    }

    /// spec §5.4 step 8: one doubling comes off per quiet period without a
    /// late ack.
    pub fn relax(&mut self, now: Instant) {
        let Some(at) = self.late_at.filter(|_| self.late > 0) else { return };
        if now.saturating_duration_since(at) >= self.quiet() {
            self.late -= 1;
            self.late_at = Some(now);
        }
    }

    /// `LATE_RELAX`, or 16 SRTTs if longer (spec §5.4 step 8).
    fn quiet(&self) -> Duration {
        (self.srtt() * 16).max(LATE_RELAX)
    }

    /// When a lone packet is overdue (spec §5.4, §6.2: the cookie echo
    /// with data waiting behind it): RACK's time threshold, SRTT + SRTT/4
    /// (RFC 8985 §6.2's reordering window), plus the peer's ack delay and
    /// the clock's granularity; at least `MIN_PTO`. Nothing follows such a
    /// packet, so no later ack can declare it lost, and the probe timeout's
    /// 4·RTTVAR (3·SRTT after the handshake's single sample) is what a lost
    /// echo would otherwise cost the data behind it.
    pub fn overdue_after(&self) -> Duration {
        let srtt = self.srtt();
        (srtt + srtt / 4 + self.ack_delay + GRANULARITY).max(MIN_PTO)
    }

    /// RTO with `backoff` doublings (RFC 6298 (5.5)) and those of late acks
    /// (spec §5.4 step 8), within [min_rto, max_rto].
    pub fn rto(&self, backoff: u32) -> Duration {
        let base = match self.srtt {
            None => self.initial_rto, // RFC 6298 (2.1)
            // RFC 6298 (2.3): RTO <- SRTT + max(G, K*RTTVAR), K = 4, plus the
            // peer's ack delay as RFC 9002 §6.2.1 adds it: an ack legitimately
            // delayed must not look like a lost flight.
            Some(srtt) => {
                (srtt + (self.rttvar * 4).max(GRANULARITY) + self.ack_delay).max(self.remembered_floor(self.ack_delay))
            }
        };
        // RFC 6298 (2.4) floors the RTO; spec §5.4 makes the floor configurable.
        let base = base.max(self.min_rto);
        let doublings = backoff.saturating_add(u32::from(self.late)).min(16);
        base.checked_mul(1u32 << doublings).unwrap_or(self.max_rto).min(self.max_rto)
    }
}

/// RFC 6298 (2.2) for the first sample, (2.3) after: α = 1/8, β = 1/4.
fn rfc6298(prev: Option<(Duration, Duration)>, r: Duration) -> (Duration, Duration) {
    match prev {
        None => (r, r / 2),
        Some((srtt, rttvar)) => ((srtt * 7 + r) / 8, (rttvar * 3 + srtt.abs_diff(r)) / 4),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn est() -> RttEstimator {
        RttEstimator::new(Duration::from_secs(1), Duration::from_millis(200), Duration::from_secs(60), Duration::ZERO)
    }

    #[test]
    fn initial_rto_before_any_sample() {
        assert_eq!(est().rto(0), Duration::from_secs(1));
        assert_eq!(est().rto(2), Duration::from_secs(4));
    }

    #[test]
    fn first_sample_sets_srtt_and_half_variance() {
        let mut e = est();
        e.on_sample(Duration::from_millis(100));
        assert_eq!(e.srtt(), Duration::from_millis(100));
        assert_eq!(e.rttvar(), Duration::from_millis(50));
        // 100 + 4 * 50 = 300 ms
        assert_eq!(e.rto(0), Duration::from_millis(300));
    }

    #[test]
    fn later_samples_use_one_eighth_and_one_quarter() {
        let mut e = est();
        e.on_sample(Duration::from_millis(100));
        e.on_sample(Duration::from_millis(200));
        // rttvar = 3/4*50 + 1/4*100 = 62.5; srtt = 7/8*100 + 1/8*200 = 112.5
        assert_eq!(e.rttvar(), Duration::from_micros(62_500));
        assert_eq!(e.srtt(), Duration::from_micros(112_500));
    }

    #[test]
    fn pto_comes_before_an_rto_that_allows_for_ack_delay() {
        let mut e = RttEstimator::new(
            Duration::from_secs(1),
            Duration::from_millis(1),
            Duration::from_secs(60),
            Duration::from_millis(25),
        );
        for _ in 0..50 {
            e.on_sample(Duration::from_millis(40));
        }
        assert!(e.pto() < e.rto(0));
        assert!(e.rto(0) - e.pto() >= Duration::from_millis(24));
    }

    #[test]
    fn a_remembered_round_trip_floors_the_timeouts_until_the_first_sample_of_data() {
        let ms = Duration::from_millis;
        let mut e = RttEstimator::new(Duration::from_secs(1), ms(20), Duration::from_secs(60), ms(25));
        e.remember(ms(40), ms(10));
        assert_eq!(e.rto(0), Duration::from_secs(1), "no sample yet: the initial RTO");
        e.on_handshake_sample(Duration::from_micros(200));
        assert_eq!(e.srtt(), Duration::from_micros(200), "the estimate stays the connection's own");
        assert_eq!(e.pto(), ms(81), "40 + 4 * 10 + 1");
        assert_eq!(e.rto(0), ms(105), "40 + 4 * 10 + 25");
        assert_eq!(e.of_data(), None, "a handshake sample is not reported");
        e.on_sample(ms(8));
        assert_eq!(e.of_data(), Some((ms(8), ms(4))), "the data's own estimate");
        assert!(e.pto() < ms(20), "the floor ends at the first sample of data: {:?}", e.pto());
    }

    #[test]
    fn late_acks_double_both_timers_up_to_three_times_and_a_quiet_second_takes_one_off() {
        let t0 = Instant::now();
        let mut e = est();
        e.on_sample(Duration::from_millis(40));
        let (pto, rto) = (e.pto(), e.rto(0));
        e.on_late_ack(t0);
        assert_eq!((e.pto(), e.rto(0)), (pto * 2, rto * 2));
        assert_eq!(e.rto(1), rto * 4, "backoff and late doublings add up");
        for _ in 0..5 {
            e.on_late_ack(t0);
        }
        assert_eq!(e.late, MAX_LATE);
        assert_eq!(e.pto(), pto * 8);
        e.relax(t0 + Duration::from_millis(999));
        assert_eq!(e.late, 3, "not yet a second without a late ack");
        e.relax(t0 + Duration::from_secs(1));
        assert_eq!(e.late, 2);
        e.relax(t0 + Duration::from_millis(1500));
        assert_eq!(e.late, 2, "the next second counts from the last change");
        e.relax(t0 + Duration::from_secs(4));
        e.relax(t0 + Duration::from_secs(5));
        assert_eq!((e.late, e.pto(), e.rto(0)), (0, pto, rto));
    }

    #[test]
    fn a_loss_ends_the_doublings_and_bars_them_for_a_quiet_second() {
        let t0 = Instant::now();
        let mut e = est();
        e.on_sample(Duration::from_millis(40));
        let pto = e.pto();
        e.on_late_ack(t0);
        e.on_late_ack(t0);
        e.on_loss(t0 + Duration::from_millis(10));
        assert_eq!((e.late, e.pto()), (0, pto));
        e.on_late_ack(t0 + Duration::from_millis(500));
        assert_eq!(e.late, 0, "the late ack may be a lost one's successor");
        e.on_late_ack(t0 + Duration::from_millis(1010));
        assert_eq!(e.late, 1);
    }

    #[test]
    fn rto_is_floored_and_capped() {
        let mut e = est();
        e.on_sample(Duration::from_millis(1));
        assert_eq!(e.rto(0), Duration::from_millis(200));
        assert_eq!(e.rto(30), Duration::from_secs(60));
    }
}
