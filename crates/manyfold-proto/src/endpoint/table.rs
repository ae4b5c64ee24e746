//! The connection table (spec §6.1, §6.4): every connection of an
//! endpoint in a slot of a vector, named by a [`ConnHandle`] whose
//! generation detects reuse, and the maps that route to a slot: our
//! connection id, the peer's address and id (RSTs, spec §6.5), the SYNs
//! we sent (simultaneous open, spec §4.3) and the count per peer address.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::time::Instant;

use rand::RngCore;

use crate::conn_handle::ConnHandle;
use crate::connection::Connection;
use crate::ids::ConnId;

/// One entry of the table. Beside the connection, what the endpoint's
/// other concerns keep per connection: its timer entry and transmit mark
/// (schedule.rs), its memory (memory.rs) and whether it is held unseen.
#[derive(Debug)]
pub(super) struct Slot {
    pub generation: u32,
    pub conn: Option<Connection>,
    /// Deadline of this slot's live entry in the timer heap, if any; other
    /// entries for the slot are stale and skipped.
    pub scheduled: Option<Instant>,
    pub queued_for_transmit: bool,
    pub released: bool,
    /// The connection's memory as last counted in the endpoint's total.
    pub buffered: u64,
    /// A protected connection the engine holds until its handshake proves
    /// the peer (spec §19.2): the application knows nothing of it.
    pub held: bool,
    /// Its sends were refused at the memory limit (spec §7.5).
    pub waiting_for_memory: bool,
}

impl Slot {
    fn new(conn: Connection) -> Self {
        Slot {
            generation: 0,
            conn: Some(conn),
            scheduled: None,
            queued_for_transmit: false,
            released: false,
            buffered: 0,
            held: false,
            waiting_for_memory: false,
        }
    }

    /// The slot taken by a new connection, in its next generation.
    fn reuse(&mut self, conn: Connection) {
        self.generation = self.generation.wrapping_add(1);
        self.conn = Some(conn);
        self.scheduled = None;
        self.queued_for_transmit = false;
        self.released = false;
        self.held = false;
        self.waiting_for_memory = false;
    }
}

/// Every connection of an endpoint, and the maps that find them.
#[derive(Debug, Default)]
pub(super) struct Table {
    slots: Vec<Slot>,
    free: Vec<u32>,
    live: usize,
    /// Our connection id -> slot (spec §6.1).
    by_id: HashMap<ConnId, u32>,
    /// (peer address, peer's connection id) -> slot, for RSTs from a peer
    /// that lost its state and for simultaneous open (spec §6.5, §4.3).
    by_peer: HashMap<(SocketAddr, ConnId), u32>,
    /// Connections in SYN-SENT by peer address, for simultaneous open.
    syn_sent: HashMap<SocketAddr, u32>,
    /// Connections held per peer IP address (spec §6.4).
    per_source: HashMap<IpAddr, usize>,
}

impl Table {
    /// Connection entries held, in any state.
    pub fn live(&self) -> usize {
        self.live
    }

    /// Slots held, free ones included: every index below is a slot.
    pub fn slot_count(&self) -> u32 {
        self.slots.len() as u32
    }

    pub fn slot(&self, idx: u32) -> &Slot {
        &self.slots[idx as usize]
    }

    pub fn slot_mut(&mut self, idx: u32) -> &mut Slot {
        &mut self.slots[idx as usize]
    }

    /// The slot `h` names, if it still holds `h`'s connection's generation.
    pub fn slot_of_mut(&mut self, h: ConnHandle) -> Option<&mut Slot> {
        self.slots.get_mut(h.index() as usize).filter(|s| s.generation == h.generation())
    }

    pub fn get(&self, h: ConnHandle) -> Option<&Connection> {
        let slot = self.slots.get(h.index() as usize)?;
        (slot.generation == h.generation()).then_some(())?;
        slot.conn.as_ref()
    }

    pub fn get_mut(&mut self, h: ConnHandle) -> Option<&mut Connection> {
        self.slot_of_mut(h)?.conn.as_mut()
    }

    /// The connection in slot `idx`, whatever its generation.
    pub fn at(&self, idx: u32) -> Option<&Connection> {
        self.slots.get(idx as usize)?.conn.as_ref()
    }

    pub fn at_mut(&mut self, idx: u32) -> Option<&mut Connection> {
        self.slots.get_mut(idx as usize)?.conn.as_mut()
    }

    pub fn handle_of(&self, idx: u32) -> ConnHandle {
        ConnHandle::new(idx, self.slots[idx as usize].generation)
    }

    /// Every connection held.
    pub fn conns(&self) -> impl Iterator<Item = &Connection> {
        self.slots.iter().filter_map(|s| s.conn.as_ref())
    }

    /// spec §6.1: the slot of our connection id.
    pub fn by_id(&self, id: ConnId) -> Option<u32> {
        self.by_id.get(&id).copied()
    }

    /// spec §6.5: the slot that knows the peer at `from` by `id`.
    pub fn by_peer(&self, from: SocketAddr, id: ConnId) -> Option<u32> {
        self.by_peer.get(&(from, id)).copied()
    }

    /// spec §4.3: the slot in SYN-SENT towards `to`.
    pub fn syn_sent(&self, to: SocketAddr) -> Option<u32> {
        self.syn_sent.get(&to).copied()
    }

    pub fn note_syn_sent(&mut self, to: SocketAddr, idx: u32) {
        self.syn_sent.insert(to, idx);
    }

    /// A fresh id of ours, never 0 and not in use (spec §6.1).
    pub fn fresh_id(&self, rng: &mut impl RngCore) -> ConnId {
        loop {
            match ConnId::from_wire(rng.next_u32()) {
                Some(id) if !self.by_id.contains_key(&id) => return id,
                _ => {}
            }
        }
    }

    /// Connections held with peers at `from`'s IP address (spec §6.4).
    pub fn conns_from(&self, from: SocketAddr) -> usize {
        self.per_source.get(&from.ip()).copied().unwrap_or(0)
    }

    pub fn insert(&mut self, conn: Connection) -> ConnHandle {
        let (local_id, remote, remote_id) = (conn.local_id(), conn.remote(), conn.remote_id());
        let idx = match self.free.pop() {
            Some(i) => {
                self.slots[i as usize].reuse(conn);
                i
            }
            None => {
                self.slots.push(Slot::new(conn));
                (self.slots.len() - 1) as u32
            }
        };
        self.live += 1;
        *self.per_source.entry(remote.ip()).or_insert(0) += 1;
        self.by_id.insert(local_id, idx);
        if let Some(remote_id) = remote_id {
            self.by_peer.insert((remote, remote_id), idx);
        }
        self.handle_of(idx)
    }

    /// After a packet reached slot `idx`: a connection learns its peer's id
    /// from the peer's SYN or SYN-ACK (`had_remote_id` is what it knew
    /// before), and a synchronized one no longer answers id-0 SYNs.
    pub fn after_packet(&mut self, idx: u32, had_remote_id: Option<ConnId>) {
        let Some(conn) = self.at(idx) else { return };
        let (remote, rid, state) = (conn.remote(), conn.remote_id(), conn.state());
        if had_remote_id.is_none() {
            if let Some(rid) = rid {
                self.by_peer.insert((remote, rid), idx);
            }
        }
        // spec §4.3: until synchronized, a retransmitted id-0 SYN of the
        // peer must still reach this connection, not the listener.
        let synchronizing = matches!(state, crate::connection::State::SynSent | crate::connection::State::SynReceived);
        if !synchronizing && self.syn_sent.get(&remote) == Some(&idx) {
            self.syn_sent.remove(&remote);
        }
    }

    /// spec §6.8: slot `idx`'s peer moved from `old` to the connection's
    /// current address.
    pub fn moved(&mut self, idx: u32, old: SocketAddr) {
        let Some(conn) = self.at(idx) else { return };
        let (new, rid) = (conn.remote(), conn.remote_id());
        if let Some(rid) = rid {
            if self.by_peer.get(&(old, rid)) == Some(&idx) {
                self.by_peer.remove(&(old, rid));
            }
            self.by_peer.insert((new, rid), idx);
        }
        self.forget_source(old.ip());
        *self.per_source.entry(new.ip()).or_insert(0) += 1;
    }

    /// Frees slot `idx` if its connection is CLOSED, released, and has
    /// nothing left to send. Returns the memory it was counted for, and the
    /// connection (whose memory the endpoint may reuse, issue 21).
    pub fn reap(&mut self, idx: u32) -> Option<(u64, Connection)> {
        let slot = &mut self.slots[idx as usize];
        if !slot.released || !slot.conn.as_ref().is_some_and(|c| c.is_drained()) {
            return None;
        }
        let conn = slot.conn.take()?;
        slot.scheduled = None;
        let buffered = std::mem::take(&mut slot.buffered);
        self.live -= 1;
        self.forget_source(conn.remote().ip());
        self.by_id.remove(&conn.local_id());
        if let Some(rid) = conn.remote_id() {
            if self.by_peer.get(&(conn.remote(), rid)) == Some(&idx) {
                self.by_peer.remove(&(conn.remote(), rid));
            }
        }
        if self.syn_sent.get(&conn.remote()) == Some(&idx) {
            self.syn_sent.remove(&conn.remote());
        }
        // The index may still sit in the transmit queue; a reused slot is
        // simply polled once more, which is harmless.
        self.free.push(idx);
        Some((buffered, conn))
    }

    /// One connection fewer with a peer at `ip` (spec §6.4).
    fn forget_source(&mut self, ip: IpAddr) {
        if let std::collections::hash_map::Entry::Occupied(mut e) = self.per_source.entry(ip) {
            *e.get_mut() -= 1;
            if *e.get() == 0 {
                e.remove();
            }
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::config::ConnectionConfig;
    use crate::wire::ErrorCode;

    /// A client connection in SYN-SENT to 198.18.0.1:`port`, with our id `id`.
    pub(in crate::endpoint) fn client(now: Instant, port: u16, id: u32) -> Connection {
        let remote = SocketAddr::from(([198, 18, 0, 1], port));
        Connection::new_client(std::sync::Arc::new(ConnectionConfig::default()), now, remote, cid(id), 1000, None, None)
    }

    fn cid(v: u32) -> ConnId {
        ConnId::from_wire(v).expect("not 0")
    }

    /// Aborts `h`'s connection, sends its RST and releases it: reapable.
    fn finish(table: &mut Table, h: ConnHandle, now: Instant) {
        let c = table.get_mut(h).expect("live");
        c.abort(ErrorCode::APPLICATION);
        let mut buf = vec![0u8; 2048];
        while c.poll_transmit(now, &mut buf).is_some() {}
        table.slot_mut(h.index()).released = true;
    }

    #[test]
    fn connections_are_found_by_id_and_counted_per_source_address() {
        let now = Instant::now();
        let mut table = Table::default();
        let a = table.insert(client(now, 1, 7));
        let b = table.insert(client(now, 2, 8));
        assert_eq!(
            (table.by_id(cid(7)), table.by_id(cid(8)), table.by_id(cid(9))),
            (Some(a.index()), Some(b.index()), None)
        );
        assert_eq!(table.live(), 2);
        assert_eq!(table.conns_from(SocketAddr::from(([198, 18, 0, 1], 3))), 2, "per IP, any port (spec §6.4)");
        assert_eq!(table.conns_from(SocketAddr::from(([198, 18, 0, 2], 1))), 0);
    }

    #[test]
    fn a_slot_is_freed_only_when_released_and_drained_and_reused_under_a_new_generation() {
        let now = Instant::now();
        let mut table = Table::default();
        let old = table.insert(client(now, 1, 7));
        table.note_syn_sent(SocketAddr::from(([198, 18, 0, 1], 1)), old.index());
        table.slot_mut(old.index()).released = true;
        assert!(table.reap(old.index()).is_none(), "released but still in SYN-SENT");
        finish(&mut table, old, now);
        assert_eq!(table.reap(old.index()).map(|(buffered, _)| buffered), Some(0));
        assert_eq!((table.live(), table.by_id(cid(7))), (0, None));
        assert_eq!(table.syn_sent(SocketAddr::from(([198, 18, 0, 1], 1))), None);
        assert_eq!(table.conns_from(SocketAddr::from(([198, 18, 0, 1], 1))), 0);
        let new = table.insert(client(now, 2, 8));
        assert_eq!(new.index(), old.index(), "the free slot is taken");
        assert_ne!(new, old);
        assert!(table.get(old).is_none(), "the stale handle names nothing");
        assert!(table.get(new).is_some());
    }

    #[test]
    fn a_fresh_id_is_never_one_in_use() {
        use rand::SeedableRng;
        let now = Instant::now();
        let mut table = Table::default();
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
        let taken = table.fresh_id(&mut rand_chacha::ChaCha8Rng::seed_from_u64(1));
        table.insert(client(now, 1, taken.wire()));
        let id = table.fresh_id(&mut rng);
        assert!(id != taken, "the seed's first id is taken: the next one is drawn");
    }
}
