//! Loss recovery and congestion control as the connection drives them
//! (spec §5.3–§5.4, §9). `recovery` keeps the record of sent packets and
//! reports what an ack or a loss timer changed; the connection feeds those
//! reports to its congestion controller, so neither module calls the other.

use std::time::Instant;

use super::Connection;
use crate::recovery::AckOutcome;

impl Connection {
    /// After [`crate::recovery::SentQueue::on_ack`]: the controller hears of
    /// each acknowledged packet (with the RTT estimate as it was before this
    /// ack), of a window reduction to undo, then the RTT takes the ack's
    /// sample, loss detection runs, and the controller gets the ack's
    /// delivery-rate sample (spec §9.4). Returns the packets declared lost.
    pub(super) fn after_ack(&mut self, now: Instant, out: &AckOutcome) -> u64 {
        for a in self.sent.take_acked() {
            self.cc.on_ack(now, a.time_sent, a.bytes, &self.rtt, a.app_limited);
        }
        if out.undo_reduction {
            self.cc.on_spurious_congestion();
        }
        match out.rtt_sample {
            Some(sample) if out.rtt_sample_handshake => self.rtt.on_handshake_sample(sample),
            Some(sample) => self.rtt.on_sample(sample),
            None => {}
        }
        let lost = self.detect_lost(now);
        if let Some(sample) = self.sent.take_rate_sample(now, &self.rtt) {
            self.cc.on_rate_sample(now, &sample);
        }
        lost
    }

    /// RACK loss detection (spec §5.4); what it declares lost is one
    /// congestion event for the controller, except lost path MTU probes
    /// (spec §3.7). Returns the packets declared lost, probes included.
    pub(super) fn detect_lost(&mut self, now: Instant) -> u64 {
        let losses = self.sent.detect_lost(now, &self.rtt);
        if let Some(sent) = losses.newest_sent {
            self.cc.on_congestion_event(now, sent, losses.bytes);
            self.rtt.on_loss(now);
            tracing::debug!(
                target: "manyfold::recovery",
                conn = %self.local_id,
                lost = losses.packets,
                cwnd = self.cc.window(),
                in_flight = self.sent.bytes_in_flight(),
                "packets declared lost"
            );
        }
        losses.packets + losses.probes
    }
}
