//! Which peers a group message goes to (spec §14.4–§14.6): the shared
//! send buffer's bound, then the delivery mode's choice among the peers
//! with room, load-balanced by CBAL score where the mode allows a choice.

use super::{Group, GroupError, Mode, Phase};
use crate::ids::StreamId;

impl Group {
    /// Picks the destinations of the next message of `len` bytes:
    /// `(peer, stream)` pairs. `room(peer, stream)` is the peer's own
    /// send capacity on that stream; `load(peer)` its CBAL score.
    pub(crate) fn choose(
        &mut self,
        len: usize,
        room: impl Fn(u32, StreamId) -> usize,
        load: impl Fn(u32) -> f64,
    ) -> Result<Vec<(u32, StreamId)>, GroupError> {
        match self.phase {
            Phase::Connecting { .. } => return Err(GroupError::NotEstablished),
            Phase::Closed => return Err(GroupError::Closed),
            Phase::Established => {}
        }
        let live: Vec<(u32, StreamId)> = self
            .peers
            .iter()
            .enumerate()
            .filter(|(_, p)| p.takes_new())
            .flat_map(|(i, p)| p.streams.iter().map(move |&s| (i as u32, s)))
            .collect();
        if live.is_empty() {
            return Err(GroupError::NoPeers);
        }
        // spec §14.4: the shared buffer bounds what is not yet delivered.
        let full = self.outstanding() + len > self.config.send_buffer
            || self.stats.messages_sent - self.stats.messages_delivered - self.stats.messages_undeliverable
                >= self.config.max_messages as u64;
        if self.outstanding() > 0 && full {
            self.want_writable = true;
            return Err(GroupError::Blocked);
        }
        let fits: Vec<(u32, StreamId)> = live.iter().copied().filter(|&(p, s)| room(p, s) >= len).collect();
        let chosen = match self.config.mode {
            // spec §14.5: All keeps pace with the slowest: every live
            // destination must take the message.
            Mode::All => {
                if fits.len() < live.len() {
                    self.want_writable = true;
                    return Err(GroupError::Blocked);
                }
                fits
            }
            Mode::Any | Mode::AtLeast(_) => fits,
            Mode::Subset { k, .. } => {
                // spec §14.6: the k least loaded, ties taken round-robin.
                let n = fits.len().max(1);
                let start = self.rr % n;
                self.rr = self.rr.wrapping_add(1);
                let mut ranked: Vec<(f64, usize, (u32, StreamId))> =
                    fits.iter().enumerate().map(|(i, &d)| (load(d.0), (i + n - start) % n, d)).collect();
                ranked.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
                ranked.into_iter().take(usize::from(k)).map(|(_, _, d)| d).collect()
            }
        };
        let needed = self.config.mode.needed(usize::MAX);
        if chosen.is_empty() || chosen.len() < needed.min(live.len()) {
            self.want_writable = true;
            return Err(GroupError::Blocked);
        }
        Ok(chosen)
    }
}
