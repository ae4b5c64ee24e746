//! The BLAKE3 of a session kept up to date while it is written, so that
//! the receiver's whole-file check (spec §16.1 step 4) at the end hashes
//! only what arrived out of order instead of reading the file again.
//!
//! Packets arrive mostly in order (a window's packets in sequence); what
//! comes after a gap is written where it belongs and remembered as a
//! range, and is read back from the file (the page cache) once the gap is
//! filled. A session with more separate ranges than [`MAX_RANGES`]
//! waiting for their gaps gives up, and the check reads the whole file as
//! before: the running hash is only ever a shortcut.

use std::collections::BTreeMap;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

/// Separate written ranges past the hashed prefix kept at most (a few
/// MB of table); beyond, the running hash is dropped.
pub(super) const MAX_RANGES: usize = 65_536;

/// Largest read when a filled gap lets the hash run over data written
/// earlier.
const READ_BACK: usize = 1 << 20;

#[derive(Debug)]
pub(super) struct RunningHash {
    hasher: blake3::Hasher,
    /// The file's first `done` bytes are hashed.
    done: u64,
    /// Written ranges past `done`, start → end, disjoint and not touching.
    ahead: BTreeMap<u64, u64>,
    /// Too many ranges: the check reads the whole file.
    gave_up: bool,
}

impl Default for RunningHash {
    fn default() -> Self {
        RunningHash { hasher: blake3::Hasher::new(), done: 0, ahead: BTreeMap::new(), gave_up: false }
    }
}

impl RunningHash {
    /// `data` was just written at `offset` of `file`.
    pub fn wrote(&mut self, file: &File, offset: u64, data: &[u8]) -> io::Result<()> {
        let end = offset + data.len() as u64;
        if self.gave_up || end <= self.done {
            return Ok(());
        }
        if offset > self.done {
            self.remember(offset, end);
            return Ok(());
        }
        // Bytes below `done` were hashed already (a copy of a repaired
        // packet holds the same bytes).
        self.hasher.update(&data[(self.done - offset) as usize..]);
        self.done = end;
        self.catch_up(file)
    }

    /// The hash of the file's first `size` bytes, if every one of them
    /// (and none past them) went through [`wrote`](Self::wrote).
    pub fn finish(&self, size: u64) -> Option<[u8; 32]> {
        (!self.gave_up && self.done == size && self.ahead.is_empty()).then(|| *self.hasher.finalize().as_bytes())
    }

    /// Hashes the written ranges that now follow `done`, read back.
    fn catch_up(&mut self, file: &File) -> io::Result<()> {
        let mut buf = Vec::new();
        while let Some((&start, &end)) = self.ahead.first_key_value() {
            if start > self.done {
                break;
            }
            self.ahead.remove(&start);
            while self.done < end {
                let n = ((end - self.done) as usize).min(READ_BACK);
                buf.resize(n, 0);
                file.read_exact_at(&mut buf, self.done)?;
                self.hasher.update(&buf);
                self.done += n as u64;
            }
        }
        Ok(())
    }

    /// Adds [start, end) to the ranges ahead, merged with any it touches.
    fn remember(&mut self, mut start: u64, mut end: u64) {
        if let Some((&s, &e)) = self.ahead.range(..=start).next_back() {
            if e >= start {
                start = s;
                end = end.max(e);
                self.ahead.remove(&s);
            }
        }
        while let Some((&s, &e)) = self.ahead.range(start..).next() {
            if s > end {
                break;
            }
            end = end.max(e);
            self.ahead.remove(&s);
        }
        self.ahead.insert(start, end);
        if self.ahead.len() > MAX_RANGES {
            self.gave_up = true;
            self.ahead = BTreeMap::new();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes `data` in pieces in the given order to a scratch file,
    /// feeding a running hash; returns the hash.
    fn write_in_order(data: &[u8], pieces: &[(usize, usize)]) -> RunningHash {
        let dir = tempfile::tempdir().unwrap();
        let file =
            File::options().read(true).write(true).create(true).truncate(true).open(dir.path().join("f")).unwrap();
        let mut h = RunningHash::default();
        for &(a, b) in pieces {
            file.write_all_at(&data[a..b], a as u64).unwrap();
            h.wrote(&file, a as u64, &data[a..b]).unwrap();
        }
        h
    }

    fn sample(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 7 + i / 251) as u8).collect()
    }

    #[test]
    fn pieces_out_of_order_with_copies_hash_as_the_whole_file() {
        let data = sample(10_000);
        // Gaps filled late, a copy of a hashed piece, one straddling the
        // hashed prefix, ranges merging on both sides.
        let pieces = [
            (0, 1000),
            (3000, 4000),
            (5000, 6000),
            (4000, 5000),
            (1000, 2000),
            (500, 1500),
            (2500, 3500),
            (2000, 2500),
        ];
        let h = write_in_order(&data, &pieces[..4]);
        assert_eq!((h.done, h.ahead.iter().collect::<Vec<_>>()), (1000, vec![(&3000, &6000)]));
        let h = write_in_order(&data, &pieces);
        assert_eq!((h.done, h.ahead.len()), (6000, 0));
        let h = write_in_order(&data, &[&pieces[..], &[(6000, 10_000)]].concat());
        assert_eq!(h.finish(10_000), Some(*blake3::hash(&data).as_bytes()));
    }

    #[test]
    fn a_gap_never_filled_gives_no_hash() {
        let data = sample(4000);
        let h = write_in_order(&data, &[(0, 1000), (2000, 4000)]);
        assert_eq!(h.finish(4000), None);
    }

    #[test]
    fn more_separate_ranges_than_the_limit_give_up_and_stay_given_up() {
        let mut h = RunningHash::default();
        let dir = tempfile::tempdir().unwrap();
        let file = File::create(dir.path().join("f")).unwrap();
        for i in 0..=MAX_RANGES as u64 {
            h.wrote(&file, 2 + 2 * i, &[0]).unwrap();
        }
        assert!(h.gave_up && h.ahead.is_empty());
        h.wrote(&file, 0, &[0, 0]).unwrap();
        assert_eq!(h.finish(2), None);
    }
}
