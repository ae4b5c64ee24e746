//! The endpoint's memory limit (spec §7.5): the bytes every connection
//! holds, to send or received, counted against `max_buffered_bytes`.
//! At the limit, sends take nothing and connections advertise less; the
//! connections refused are told (`Writable`) once the total falls to
//! seven eighths of the limit.

use std::collections::VecDeque;

use super::table::Table;
use crate::conn_handle::ConnHandle;
use crate::connection::{Connection, Event};

/// What all connections hold, and who waits for room.
#[derive(Debug)]
pub(super) struct Memory {
    limit: u64,
    total: u64,
    /// Connections whose sends were refused, to be told when room comes back.
    waiters: Vec<ConnHandle>,
}

impl Memory {
    pub fn new(limit: u64) -> Self {
        Memory { limit, total: 0, waiters: Vec::new() }
    }

    /// Bytes all connections hold.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Whether the endpoint holds its limit (connections then advertise less).
    pub fn at_limit(&self) -> bool {
        self.total >= self.limit
    }

    /// Bytes a send may still take before the limit.
    pub fn room(&self) -> usize {
        usize::try_from(self.limit.saturating_sub(self.total)).unwrap_or(usize::MAX)
    }

    /// Recounts slot `idx`'s connection in the total, and tells those who
    /// waited for room when there is some again.
    pub fn account(&mut self, idx: u32, table: &mut Table, events: &mut VecDeque<(ConnHandle, Event)>) {
        let slot = table.slot_mut(idx);
        let memory = slot.conn.as_ref().map_or(0, Connection::memory);
        self.total = self.total - slot.buffered + memory;
        slot.buffered = memory;
        if !self.waiters.is_empty() && self.total < self.limit / 8 * 7 {
            for w in std::mem::take(&mut self.waiters) {
                let Some(slot) = table.slot_of_mut(w) else { continue };
                if slot.waiting_for_memory {
                    slot.waiting_for_memory = false;
                    events.push_back((w, Event::Writable));
                }
            }
        }
    }

    /// A freed connection's bytes leave the total.
    pub fn forget(&mut self, bytes: u64) {
        self.total -= bytes;
    }

    /// Whether the endpoint is at its limit; if so, `h` is told
    /// (`Writable`) when it no longer is.
    pub fn refuse(&mut self, h: ConnHandle, table: &mut Table) -> bool {
        if self.total < self.limit || table.get(h).is_none() {
            return false;
        }
        let slot = table.slot_mut(h.index());
        if !slot.waiting_for_memory {
            slot.waiting_for_memory = true;
            self.waiters.push(h);
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;
    use crate::endpoint::table::tests::client;

    #[test]
    fn a_refused_connection_is_told_writable_once_below_seven_eighths() {
        let now = Instant::now();
        let mut table = Table::default();
        let h = table.insert(client(now, 1, 7));
        let mut events = VecDeque::new();
        let limit = 1 << 20;
        let mut memory = Memory::new(limit);
        assert!(!memory.refuse(h, &mut table), "room");
        memory.total = limit;
        assert!(memory.at_limit() && memory.room() == 0);
        assert!(memory.refuse(h, &mut table));
        assert!(memory.refuse(h, &mut table));
        assert_eq!(memory.waiters, [h], "waits once");
        memory.total = limit / 8 * 7;
        memory.account(h.index(), &mut table, &mut events);
        assert!(events.is_empty(), "not below seven eighths: {}", memory.total);
        let held = memory.total;
        memory.total = held - limit / 8;
        memory.account(h.index(), &mut table, &mut events);
        assert_eq!(events.iter().collect::<Vec<_>>(), [&(h, Event::Writable)]);
        assert!(memory.waiters.is_empty() && !table.slot(h.index()).waiting_for_memory);
    }

    #[test]
    fn the_total_follows_each_connections_recount_and_release() {
        let now = Instant::now();
        let mut table = Table::default();
        let h = table.insert(client(now, 1, 7));
        let mut memory = Memory::new(1 << 20);
        memory.account(h.index(), &mut table, &mut VecDeque::new());
        let held = table.get(h).map_or(0, Connection::memory);
        assert_eq!((memory.total(), table.slot(h.index()).buffered), (held, held));
        memory.account(h.index(), &mut table, &mut VecDeque::new());
        assert_eq!(memory.total(), held, "a recount does not add twice");
        memory.forget(held);
        assert_eq!(memory.total(), 0);
    }
}
