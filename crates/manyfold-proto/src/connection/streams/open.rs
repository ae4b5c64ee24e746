//! Streams opened without choosing numbers (spec §13.11): [`Streams::open`]
//! hands out numbers of this end's parity, never one used on the
//! connection; [`Streams::accept`] reports, in order of arrival, the
//! streams the peer started.

use super::{StreamRefusal, Streams};
use crate::ids::StreamId;

impl Streams {
    /// A stream number of ours that this connection has never used, its
    /// stream now open (spec §13.11): odd for the end that opened the
    /// connection (`odd`), even for the other, lowest first. Numbers in
    /// use, finished or refused are skipped, so numbered streams chosen by
    /// hand do not collide with it.
    pub fn open(&mut self, odd: bool) -> Result<StreamId, StreamRefusal> {
        if self.map.len() >= self.limits.max_streams {
            return Err(StreamRefusal::Limit(self.limits.max_streams));
        }
        let mut n = self.next_local.unwrap_or(if odd { 1 } else { 2 });
        while let Ok(number) = u16::try_from(n) {
            n += 2;
            let id = StreamId::new(number);
            let used = self.map.contains_key(&id)
                || self.closed_tx.contains(id)
                || self.closed_rx.contains(id)
                || self.refused.contains(&id);
            if !used {
                self.next_local = Some(n);
                let s = self.fresh(id);
                self.map.insert(id, Box::new(s));
                return Ok(id);
            }
        }
        // Every number of our parity has been used on this connection.
        self.next_local = Some(n);
        Err(StreamRefusal::Limit(self.limits.max_streams))
    }

    /// The next stream the peer started (its first chunk named a number
    /// this end had not used) that `accept` has not returned yet.
    pub fn accept(&mut self) -> Option<StreamId> {
        self.opened.pop_front()
    }
}

#[cfg(test)]
mod tests {
    use super::super::Limits;
    use super::*;
    use crate::wire::chunk::{data_flags, Chunk, DataChunk};

    fn streams(max_streams: usize) -> Streams {
        Streams::new(Limits { max_streams, stream_window: 1 << 20, stream0_window: 1 << 20 })
    }

    /// The wire form of one data chunk on `stream`.
    fn data_on(stream: u16) -> Vec<u8> {
        let c: Chunk<&[u8]> = Chunk::Data(DataChunk {
            stream: StreamId::new(stream),
            flags: data_flags::BEGIN | data_flags::END,
            offset: 0,
            in_msg: 0,
            data: b"hi",
            msg: 0,
        });
        let mut out = vec![0u8; c.encoded_len()];
        c.emit(&mut out);
        out
    }

    #[test]
    fn opener_gets_odd_numbers_and_the_other_end_even_ones() {
        let mut a = streams(100);
        let mut b = streams(100);
        let odd: Vec<u16> = (0..3).map(|_| a.open(true).unwrap().get()).collect();
        let even: Vec<u16> = (0..3).map(|_| b.open(false).unwrap().get()).collect();
        assert_eq!(odd, [1, 3, 5]);
        assert_eq!(even, [2, 4, 6]);
    }

    #[test]
    fn open_skips_numbers_already_used_by_hand_or_by_the_peer() {
        let mut s = streams(100);
        s.check_send(StreamId::new(1)).unwrap(); // used by hand
        s.on_chunks(&data_on(3)); // started by the peer
        assert_eq!(s.open(true).unwrap().get(), 5);
        assert_eq!(s.open(true).unwrap().get(), 7);
    }

    #[test]
    fn accept_reports_peer_streams_once_in_arrival_order_but_not_our_own() {
        let mut s = streams(100);
        let ours = s.open(false).unwrap();
        s.on_chunks(&data_on(9));
        s.on_chunks(&data_on(ours.get())); // the peer answers on our stream
        s.on_chunks(&data_on(7));
        s.on_chunks(&data_on(9)); // a second chunk of a known stream
        s.on_chunks(&data_on(0)); // stream 0 always exists
        assert_eq!(s.accept(), Some(StreamId::new(9)));
        assert_eq!(s.accept(), Some(StreamId::new(7)));
        assert_eq!(s.accept(), None);
    }

    #[test]
    fn open_is_refused_at_the_stream_limit() {
        let mut s = streams(3); // stream 0 and two more
        s.open(true).unwrap();
        s.open(true).unwrap();
        assert_eq!(s.open(true), Err(StreamRefusal::Limit(3)));
    }

    #[test]
    fn open_is_refused_once_every_number_of_its_parity_was_used() {
        let mut s = streams(1 << 16);
        s.next_local = Some(65_535);
        assert_eq!(s.open(true).unwrap().get(), 65_535);
        assert_eq!(s.open(true), Err(StreamRefusal::Limit(1 << 16)));
    }
}
