//! Scheduling (spec §2): which connection the endpoint looks at next. A
//! heap of timer deadlines and a queue of connections that may have
//! something to send keep the cost of each call independent of the number
//! of connections; a transmit is one connection's datagrams batched for
//! GSO.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::time::Instant;

use bytes::Bytes;

use super::table::{Slot, Table};
use crate::connection::Connection;
use crate::wire::PayloadCrcs;

/// The timer heap and the transmit queue.
#[derive(Debug, Default)]
pub(super) struct Schedule {
    /// (deadline, slot, generation): an entry is live only while it is
    /// its slot's `scheduled` deadline in that generation.
    timers: BinaryHeap<Reverse<(Instant, u32, u32)>>,
    transmit_queue: VecDeque<u32>,
}

impl Schedule {
    /// Marks slot `idx` as possibly having something to send.
    pub fn mark(&mut self, idx: u32, slot: &mut Slot) {
        if slot.conn.is_some() && !slot.queued_for_transmit {
            slot.queued_for_transmit = true;
            self.transmit_queue.push_back(idx);
        }
    }

    /// Slot `idx`'s connection now wants to wake at `deadline`.
    ///
    /// A heap entry is pushed only when the deadline moves earlier: a
    /// later deadline leaves the old entry, which fires early, finds
    /// nothing due and reschedules. The heap thus stays near one entry
    /// per connection although the keep-alive moves with every packet.
    pub fn arm(&mut self, idx: u32, slot: &mut Slot, deadline: Instant) {
        if slot.scheduled.is_none_or(|s| deadline < s) {
            slot.scheduled = Some(deadline);
            self.timers.push(Reverse((deadline, idx, slot.generation)));
        }
    }

    /// The next slot whose live timer entry is due at `now`, its entry
    /// consumed; stale entries on the way are dropped.
    pub fn pop_due(&mut self, now: Instant, table: &mut Table) -> Option<u32> {
        while let Some(&Reverse((t, idx, gen))) = self.timers.peek() {
            if t > now {
                return None;
            }
            self.timers.pop();
            let slot = table.slot_mut(idx);
            if slot.generation != gen || slot.scheduled != Some(t) {
                continue; // stale entry
            }
            slot.scheduled = None;
            return Some(idx);
        }
        None
    }

    /// The earliest live deadline; stale entries in front are dropped.
    pub fn next_deadline(&mut self, table: &Table) -> Option<Instant> {
        while let Some(&Reverse((t, idx, gen))) = self.timers.peek() {
            let slot = table.slot(idx);
            if slot.generation == gen && slot.scheduled == Some(t) {
                return Some(t);
            }
            self.timers.pop();
        }
        None
    }

    /// The next slot queued for transmit, its mark cleared.
    pub fn next_to_transmit(&mut self, table: &mut Table) -> Option<u32> {
        let idx = self.transmit_queue.pop_front()?;
        table.slot_mut(idx).queued_for_transmit = false;
        Some(idx)
    }
}

/// Most bytes of one batch (spec §2): what one GSO send carries, the IPv4
/// length field's 64 KiB less headers. A larger datagram goes alone.
pub const MAX_BATCH_BYTES: usize = 65_000;

/// Writes up to `max_datagrams` of `conn`'s datagrams at the start of
/// `buf` (scratch, grown as needed, never shrunk or zeroed again). Returns
/// how many, the size of each but the last, the bytes of the datagrams,
/// and with `crcs` (the endpoint's memo of payload checksums, moved to the
/// connection and back: no copy, no allocation) the payload left out of a lone first datagram (spec §7.2:
/// the buffer then holds all of it but that payload).
///
/// spec §2: a batch is datagrams of one size (the first one's), the last
/// possibly shorter, at most [`MAX_BATCH_BYTES`] in all past the first;
/// the connection never writes more than the room it is given, and
/// declines what does not fit.
pub(super) fn fill_batch(
    conn: &mut Connection,
    now: Instant,
    max_datagrams: usize,
    buf: &mut Vec<u8>,
    crcs: &mut Option<Box<PayloadCrcs>>,
) -> (usize, usize, usize, Option<Bytes>) {
    let mut count = 0;
    let mut len = 0;
    // The first datagram may be a path MTU probe, larger (spec §3.7).
    let mut segment = conn.next_datagram_room(now);
    while count < max_datagrams.max(1) {
        if count > 0 && (count + 1) * segment > MAX_BATCH_BYTES {
            break;
        }
        super::room(buf, len + segment);
        if count == 0 {
            conn.set_gather(crcs.take());
        }
        let sent = conn.poll_transmit(now, &mut buf[len..len + segment]);
        if let Some(lent) = conn.end_gather() {
            *crcs = Some(lent);
        }
        let Some(n) = sent else { break };
        len += n;
        count += 1;
        if let Some(tail) = conn.take_gathered() {
            // Only a first datagram is split, and it goes alone.
            return (count, n, len, Some(tail));
        }
        if count == 1 {
            segment = n;
        } else if n < segment {
            break;
        }
    }
    (count, segment, len, None)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::endpoint::table::tests::client;

    #[test]
    fn a_later_deadline_keeps_the_earlier_entry_and_stale_entries_never_fire() {
        let now = Instant::now();
        let ms = Duration::from_millis;
        let (mut table, mut schedule) = (Table::default(), Schedule::default());
        let idx = table.insert(client(now, 1, 7)).index();
        schedule.arm(idx, table.slot_mut(idx), now + ms(10));
        schedule.arm(idx, table.slot_mut(idx), now + ms(20));
        assert_eq!(table.slot(idx).scheduled, Some(now + ms(10)), "a later deadline pushes nothing");
        schedule.arm(idx, table.slot_mut(idx), now + ms(5));
        assert_eq!(schedule.next_deadline(&table), Some(now + ms(5)));
        assert_eq!(schedule.pop_due(now + ms(4), &mut table), None, "not due yet");
        assert_eq!(schedule.pop_due(now + ms(5), &mut table), Some(idx));
        assert_eq!(table.slot(idx).scheduled, None);
        assert_eq!(schedule.pop_due(now + ms(100), &mut table), None, "the 10 ms entry is stale");
        assert_eq!(schedule.next_deadline(&table), None);
    }

    #[test]
    fn a_marked_connection_is_queued_once_until_it_is_polled() {
        let now = Instant::now();
        let (mut table, mut schedule) = (Table::default(), Schedule::default());
        let idx = table.insert(client(now, 1, 7)).index();
        schedule.mark(idx, table.slot_mut(idx));
        schedule.mark(idx, table.slot_mut(idx));
        assert_eq!(schedule.next_to_transmit(&mut table), Some(idx));
        assert_eq!(schedule.next_to_transmit(&mut table), None);
        schedule.mark(idx, table.slot_mut(idx));
        assert_eq!(schedule.next_to_transmit(&mut table), Some(idx), "polled, it may be marked again");
    }

    #[test]
    fn a_batch_is_datagrams_of_the_first_ones_size_within_the_count() {
        let now = Instant::now();
        let mut conn = client(now, 1, 7);
        let mut buf = Vec::new();
        // A client in SYN-SENT has one SYN to send, then nothing.
        let (count, segment, len, _) = fill_batch(&mut conn, now, 8, &mut buf, &mut None);
        assert_eq!(count, 1);
        assert!(segment > 0 && segment == len, "one SYN of {segment} bytes, {len} written");
        let syn = buf[..len].to_vec();
        let (count, _, len_after, _) = fill_batch(&mut conn, now, 8, &mut buf, &mut None);
        assert_eq!((count, len_after), (0, 0), "nothing more");
        assert_eq!(buf[..len], syn[..], "a declined datagram leaves the buffer as it was");
    }
}
