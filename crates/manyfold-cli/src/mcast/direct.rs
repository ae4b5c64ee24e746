//! The receiver's file written past the page cache: a session's bytes
//! arrive mostly in order, so they are gathered in a block-aligned window
//! and written with `O_DIRECT` a window at a time; what falls behind the
//! window (a repair of a packet lost long ago) goes through the page
//! cache as before.
//!
//! Why: copying into new page-cache pages was the largest cost of a
//! multicast receiver (RESULTS §35: a third of a 2-core host running 32
//! receivers went to `pwrite`), and an image pushed to a machine has no
//! use for its cache. A device or file system that refuses direct writes
//! (or any direct write that fails) leaves the window writing through the
//! page cache.
//!
//! The window holds `[base, base + WINDOW)` of the file, `base` a multiple
//! of [`ALIGN`]. It only ever covers bytes never written before it took
//! them (it starts at or past the highest byte written so far), so a hole
//! it writes (a packet not yet received) overwrites nothing; the packet's
//! repair comes later and goes through the page cache, which reads the
//! block back.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

/// Offsets, lengths and memory of direct writes are multiples of this
/// (the logical block size of nearly every device is 512 or 4,096).
pub(super) const ALIGN: usize = 4096;

/// Bytes gathered before a direct write.
pub(super) const WINDOW: usize = 2 << 20;

fn align_down(x: u64) -> u64 {
    x & !(ALIGN as u64 - 1)
}

fn align_up(x: u64) -> u64 {
    align_down(x + ALIGN as u64 - 1)
}

/// Opens `path` for direct writes, or `None` where the system refuses.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub(super) fn open_direct(path: &Path) -> Option<File> {
    use rustix::fs::{Mode, OFlags};
    let flags = OFlags::WRONLY | OFlags::CLOEXEC | OFlags::DIRECT;
    match rustix::fs::open(path, flags, Mode::empty()) {
        Ok(fd) => Some(File::from(fd)),
        Err(e) => {
            tracing::debug!(error = %e, path = %path.display(), "no direct writes; writing through the page cache");
            None
        }
    }
}

/// No direct writes here: everything goes through the page cache.
#[cfg(not(any(target_os = "linux", target_os = "android")))]
pub(super) fn open_direct(_: &Path) -> Option<File> {
    None
}

/// Reads `out.len()` bytes at `offset` unless the file ends first;
/// returns how many it read.
pub(super) fn read_full(file: &File, offset: u64, out: &mut [u8]) -> io::Result<usize> {
    let mut got = 0;
    while got < out.len() {
        match file.read_at(&mut out[got..], offset + got as u64)? {
            0 => break,
            n => got += n,
        }
    }
    Ok(got)
}

/// A file's writes, gathered and written directly where they can be.
#[derive(Debug)]
pub(super) struct Window {
    /// The direct handle; `None` once a direct write failed.
    direct: Option<File>,
    /// `ALIGN + WINDOW` bytes, never reallocated: `buf[at..]` is aligned.
    buf: Vec<u8>,
    at: usize,
    /// File offset of `buf[at]`.
    base: u64,
    /// Bytes from `base` to the highest end gathered.
    held: usize,
    /// One past the highest byte ever written, gathered or not.
    high: u64,
}

impl Window {
    pub fn new(direct: Option<File>) -> Window {
        let buf = vec![0u8; ALIGN + WINDOW];
        let at = buf.as_ptr().align_offset(ALIGN);
        Window { direct, buf, at, base: 0, held: 0, high: 0 }
    }

    /// Whether writes still go past the page cache.
    #[cfg(test)]
    pub fn is_direct(&self) -> bool {
        self.direct.is_some()
    }

    /// Stores `data` at `offset` of the file that `plain` (a handle through
    /// the page cache) and the direct handle both open.
    pub fn write(&mut self, plain: &File, mut offset: u64, mut data: &[u8]) -> io::Result<()> {
        let end = offset + data.len() as u64;
        if data.len() > WINDOW - ALIGN {
            self.flush(plain)?;
            self.write_plain(plain, offset, data)?;
            // The window never covers bytes written around it.
            self.base = self.base.max(align_up(self.high));
            return Ok(());
        }
        if end > self.base + WINDOW as u64 {
            self.advance(plain, offset, end)?;
        }
        if offset < self.base {
            let cut = end.min(self.base);
            self.write_plain(plain, offset, &data[..(cut - offset) as usize])?;
            data = &data[(cut - offset) as usize..];
            offset = cut;
        }
        if !data.is_empty() {
            let from = (offset - self.base) as usize;
            self.buf[self.at + from..self.at + from + data.len()].copy_from_slice(data);
            self.held = self.held.max(from + data.len());
            self.high = self.high.max(end);
        }
        Ok(())
    }

    /// Reads `out.len()` bytes at `offset` as written so far (gathered
    /// bytes from the window, the rest from the file); returns how many
    /// the file and the window hold.
    pub fn read(&self, plain: &File, offset: u64, out: &mut [u8]) -> io::Result<usize> {
        let mut got = read_full(plain, offset, out)?;
        let end = offset + out.len() as u64;
        let (from, to) = (offset.max(self.base), end.min(self.base + self.held as u64));
        if from < to {
            let w = self.at + (from - self.base) as usize;
            out[(from - offset) as usize..(to - offset) as usize]
                .copy_from_slice(&self.buf[w..w + (to - from) as usize]);
            got = got.max((to - offset) as usize);
        }
        Ok(got)
    }

    /// Writes everything gathered; the window then starts past it.
    pub fn flush(&mut self, plain: &File) -> io::Result<()> {
        let whole = align_down(self.held as u64) as usize;
        self.write_blocks(plain, whole)?;
        let tail = &self.buf[self.at..self.at + self.held];
        if !tail.is_empty() {
            plain.write_all_at(tail, self.base)?;
        }
        self.buf[self.at..self.at + self.held].fill(0);
        self.base = align_up(self.high.max(self.base + self.held as u64));
        self.held = 0;
        Ok(())
    }

    /// Moves the window so that a write at `offset` (ending past it) fits:
    /// whole blocks gathered are written and the partial last one moves to
    /// the front; a write further ahead than that restarts the window.
    fn advance(&mut self, plain: &File, offset: u64, end: u64) -> io::Result<()> {
        let whole = align_down(self.held as u64) as usize;
        self.write_blocks(plain, whole)?;
        let tail = self.held - whole;
        self.buf.copy_within(self.at + whole..self.at + self.held, self.at);
        self.buf[self.at + tail..self.at + self.held].fill(0);
        self.base += whole as u64;
        self.held = tail;
        if end > self.base + WINDOW as u64 {
            self.flush(plain)?;
            // Start at the write's block if nothing there was written yet.
            let start = align_down(offset);
            self.base = if start >= self.high { start } else { align_up(offset.max(self.high)) };
        }
        Ok(())
    }

    /// Writes the window's first `len` bytes (whole blocks) and forgets
    /// nothing: the caller moves what follows.
    fn write_blocks(&mut self, plain: &File, len: usize) -> io::Result<()> {
        if len == 0 {
            return Ok(());
        }
        let blocks = &self.buf[self.at..self.at + len];
        if let Some(d) = &self.direct {
            match d.write_all_at(blocks, self.base) {
                Ok(()) => return Ok(()),
                Err(e) => {
                    tracing::debug!(error = %e, "a direct write failed; writing through the page cache from now on");
                    self.direct = None;
                }
            }
        }
        plain.write_all_at(blocks, self.base)
    }

    fn write_plain(&mut self, plain: &File, offset: u64, data: &[u8]) -> io::Result<()> {
        plain.write_all_at(data, offset)?;
        self.high = self.high.max(offset + data.len() as u64);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 31 + i / 4093) as u8).collect()
    }

    fn scratch(dir: &Path) -> File {
        File::options().read(true).write(true).create(true).truncate(true).open(dir.join("f")).unwrap()
    }

    /// Writes `data` as `pieces` (in that order) through a window, checks
    /// every read on the way, and returns the file's contents after the
    /// final flush.
    fn through_window(data: &[u8], pieces: &[(usize, usize)], direct: bool) -> (Vec<u8>, bool) {
        let dir = tempfile::tempdir().unwrap();
        let plain = scratch(dir.path());
        plain.set_len(data.len() as u64).unwrap();
        let mut w = Window::new(if direct { open_direct(&dir.path().join("f")) } else { None });
        let mut written = vec![false; data.len()];
        for &(a, b) in pieces {
            w.write(&plain, a as u64, &data[a..b]).unwrap();
            written[a..b].iter_mut().for_each(|x| *x = true);
            // What was written reads back, from the window or the file.
            let (ra, rb) = (a.saturating_sub(5000), (b + 5000).min(data.len()));
            let mut out = vec![0; rb - ra];
            assert_eq!(w.read(&plain, ra as u64, &mut out).unwrap(), rb - ra);
            for i in ra..rb {
                if written[i] {
                    assert_eq!(out[i - ra], data[i], "byte {i} after writing {a}..{b}");
                }
            }
        }
        w.flush(&plain).unwrap();
        (std::fs::read(dir.path().join("f")).unwrap(), w.is_direct())
    }

    /// 1,428-byte packets in order, with `lost` ones left out and written
    /// `late` pieces later.
    fn packets(len: usize, lost: &[usize], late: usize) -> Vec<(usize, usize)> {
        let all: Vec<_> = (0..len).step_by(1428).map(|a| (a, (a + 1428).min(len))).collect();
        let mut order: Vec<_> = all.iter().enumerate().filter(|(i, _)| !lost.contains(i)).map(|(_, p)| *p).collect();
        for (k, &i) in lost.iter().enumerate() {
            order.insert((i + late + k).min(order.len()), all[i]);
        }
        order
    }

    #[test]
    fn packets_in_order_are_stored_whole_by_direct_writes() {
        let data = sample(7 * WINDOW + 1234);
        let (got, direct) = through_window(&data, &packets(data.len(), &[], 0), true);
        assert!(got == data, "contents differ");
        // The test directory's file system takes direct writes on Linux
        // (ext4, xfs, tmpfs since 6.6); elsewhere the window falls back.
        if cfg!(target_os = "linux") {
            assert!(direct, "the window fell back to the page cache");
        }
    }

    #[test]
    fn repairs_inside_and_behind_the_window_and_a_jump_ahead_are_stored() {
        let data = sample(6 * WINDOW + 777);
        // Losses repaired soon (inside the window) and long after (behind
        // it), a copy of a packet already stored, a packet straddling the
        // window's start, and a jump ahead with the gap filled last.
        let mut pieces = packets(4 * WINDOW, &[3, 4, 900, 2000, 2001, 5000], 40);
        pieces.insert(3000, (10_000, 11_428));
        pieces.insert(4500, (2 * WINDOW - 700, 2 * WINDOW + 700));
        let jump = 5 * WINDOW + 100;
        pieces.push((jump, data.len()));
        pieces.push((4 * WINDOW, jump));
        let (got, _) = through_window(&data, &pieces, true);
        assert!(got == data, "contents differ");
    }

    #[test]
    fn a_failed_direct_write_falls_back_to_the_page_cache() {
        let data = sample(3 * WINDOW + 99);
        let dir = tempfile::tempdir().unwrap();
        let plain = scratch(dir.path());
        // A handle that cannot write stands for a device that refuses.
        let mut w = Window::new(Some(File::open(dir.path().join("f")).unwrap()));
        for (a, b) in packets(data.len(), &[7], 3) {
            w.write(&plain, a as u64, &data[a..b]).unwrap();
        }
        w.flush(&plain).unwrap();
        assert!(!w.is_direct());
        assert!(std::fs::read(dir.path().join("f")).unwrap() == data, "contents differ");
    }

    #[test]
    fn a_write_larger_than_the_window_goes_through_the_page_cache() {
        let data = sample(3 * WINDOW);
        // Then a copy of a packet inside it, and packets after it.
        let mut pieces = vec![(0, 1000), (1000, 1000 + WINDOW), (5000, 6428)];
        pieces.extend((1000 + WINDOW..data.len()).step_by(1428).map(|a| (a, (a + 1428).min(data.len()))));
        let (got, _) = through_window(&data, &pieces, true);
        assert!(got == data, "contents differ");
    }
}
