//! What an interrupted `fetch` leaves for the next one: the data file
//! `.FILE.manyfold-fetch-part` beside FILE, written at each verified
//! segment's offset, and the journal `.FILE.manyfold-fetch` saying which
//! segments of which manifest it holds.
//!
//! ```text
//! journal: magic "MFFJ" (4) | version 1 (1) | size (8) | segment size (4) |
//!          segment count (4) | BLAKE3 of the whole file (32) |
//!          bitmap, bit i%8 of byte i/8 = segment i verified (⌈count/8⌉) |
//!          BLAKE3 of all the bytes before (32)
//! ```
//!
//! The journal is replaced atomically (written beside, then renamed) every
//! few segments and when the fetch stops; it lists a segment only after
//! its data was written. A fetch with the same FILE and a manifest of the
//! same content resumes: it re-hashes each listed segment from the data
//! file and trusts only those that match. Anything else (no journal, a
//! damaged one, another version of the file) starts over. The data file is
//! locked while a fetch writes it, so two fetches of one FILE cannot mix.

use std::fs::{self, File, OpenOptions, TryLockError};
use std::io::{self, Read as _};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use super::wire::{Manifest, HASH_LEN, MAX_SEGMENTS};

const MAGIC: [u8; 4] = *b"MFFJ";
const VERSION: u8 = 1;
/// Bytes before the bitmap.
const FIXED: usize = 4 + 1 + 8 + 4 + 4 + HASH_LEN;
/// The journal is rewritten after this many new segments, or after
/// [`SAVE_EVERY`] with any new one.
const SAVE_SEGMENTS: u32 = 8;
const SAVE_EVERY: Duration = Duration::from_secs(1);

/// The journal's meaning: which segments of which file are verified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Journal {
    pub size: u64,
    pub segment_size: u32,
    pub hash: [u8; HASH_LEN],
    /// One flag per segment.
    pub done: Vec<bool>,
}

impl Journal {
    pub fn for_manifest(m: &Manifest) -> Journal {
        Journal { size: m.size, segment_size: m.segment_size, hash: m.hash, done: vec![false; m.segments.len()] }
    }

    pub fn matches(&self, m: &Manifest) -> bool {
        (self.size, self.segment_size, self.hash, self.done.len()) == (m.size, m.segment_size, m.hash, m.segments.len())
    }

    pub fn encode(&self) -> Vec<u8> {
        let count = self.done.len();
        let mut v = Vec::with_capacity(FIXED + count.div_ceil(8) + HASH_LEN);
        v.extend_from_slice(&MAGIC);
        v.push(VERSION);
        v.extend_from_slice(&self.size.to_be_bytes());
        v.extend_from_slice(&self.segment_size.to_be_bytes());
        v.extend_from_slice(&(count as u32).to_be_bytes());
        v.extend_from_slice(&self.hash);
        let mut bitmap = vec![0u8; count.div_ceil(8)];
        for (i, _) in self.done.iter().enumerate().filter(|(_, d)| **d) {
            bitmap[i / 8] |= 1 << (i % 8);
        }
        v.extend_from_slice(&bitmap);
        let check = blake3::hash(&v);
        v.extend_from_slice(check.as_bytes());
        v
    }

    pub fn parse(b: &[u8]) -> Result<Journal, String> {
        if b.len() < FIXED + HASH_LEN {
            return Err(format!("journal of {} bytes is truncated", b.len()));
        }
        if b[0..4] != MAGIC {
            return Err("not a manyfold fetch journal".into());
        }
        if b[4] != VERSION {
            return Err(format!("journal version {} (this fetch writes version {VERSION})", b[4]));
        }
        let size = u64::from_be_bytes(b[5..13].try_into().expect("eight bytes"));
        let segment_size = u32::from_be_bytes(b[13..17].try_into().expect("four bytes"));
        let count = u32::from_be_bytes(b[17..21].try_into().expect("four bytes"));
        if count > MAX_SEGMENTS || segment_size == 0 || u64::from(count) != size.div_ceil(u64::from(segment_size)) {
            return Err(format!(
                "journal of {count} segments of {segment_size} bytes for {size} bytes is inconsistent"
            ));
        }
        let count = count as usize;
        let end = FIXED + count.div_ceil(8);
        if b.len() != end + HASH_LEN {
            return Err(format!("journal of {} bytes, expected {}", b.len(), end + HASH_LEN));
        }
        if blake3::hash(&b[..end]).as_bytes() != &b[end..] {
            return Err("journal damaged (its checksum does not match)".into());
        }
        let hash = b[21..FIXED].try_into().expect("32 bytes");
        let done = (0..count).map(|i| b[FIXED + i / 8] & (1 << (i % 8)) != 0).collect();
        Ok(Journal { size, segment_size, hash, done })
    }
}

/// The download on disk: the data file (locked) and its journal.
#[derive(Debug)]
pub struct Download {
    out: PathBuf,
    data_path: PathBuf,
    journal_path: PathBuf,
    file: File,
    journal: Journal,
    done: u32,
    unsaved: u32,
    saved_at: Instant,
}

/// How [`Download::open`] found things.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Start {
    /// Nothing to resume.
    Fresh,
    /// Segments kept from an earlier fetch, re-verified.
    Resumed { kept: u32, listed: u32 },
    /// Something was there but could not be used; why.
    StartedOver(String),
}

/// `.NAME.suffix` beside `out`.
fn beside(out: &Path, suffix: &str) -> Result<PathBuf> {
    let name = out.file_name().with_context(|| format!("{} has no file name", out.display()))?;
    Ok(out.with_file_name(crate::fsutil::hidden_name(&name.to_string_lossy(), &format!(".{suffix}"))))
}

/// The data file and journal names for `out`.
pub fn paths(out: &Path) -> Result<(PathBuf, PathBuf)> {
    Ok((beside(out, "manyfold-fetch-part")?, beside(out, "manyfold-fetch")?))
}

impl Download {
    /// Opens (or creates) the data file for `out`, locks it, and keeps
    /// whatever verified segments of `manifest` an earlier fetch left.
    pub fn open(out: &Path, manifest: &Manifest) -> Result<(Download, Start)> {
        let (data_path, journal_path) = paths(out)?;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&data_path)
            .with_context(|| format!("cannot open {}", data_path.display()))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                bail!("another fetch is writing {} (its data file {} is locked)", out.display(), data_path.display())
            }
            Err(TryLockError::Error(e)) => {
                return Err(e).with_context(|| format!("cannot lock {}", data_path.display()));
            }
        }
        let mut download = Download {
            out: out.to_path_buf(),
            data_path,
            journal_path,
            file,
            journal: Journal::for_manifest(manifest),
            done: 0,
            unsaved: 0,
            saved_at: Instant::now(),
        };
        let start = download.resume(manifest)?;
        if download.done == 0 {
            // Whatever was there is of no use: a clean, sized file.
            download.file.set_len(0).with_context(|| format!("cannot truncate {}", download.data_path.display()))?;
        }
        download
            .file
            .set_len(manifest.size)
            .with_context(|| format!("cannot size {}", download.data_path.display()))?;
        Ok((download, start))
    }

    fn resume(&mut self, manifest: &Manifest) -> Result<Start> {
        let bytes = match read_bounded(&self.journal_path, (FIXED + MAX_SEGMENTS as usize / 8 + HASH_LEN) as u64) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Start::Fresh),
            Err(e) => return Ok(Start::StartedOver(format!("cannot read {}: {e}", self.journal_path.display()))),
        };
        let old = match Journal::parse(&bytes) {
            Ok(j) => j,
            Err(why) => return Ok(Start::StartedOver(format!("{}: {why}", self.journal_path.display()))),
        };
        if !old.matches(manifest) {
            return Ok(Start::StartedOver(format!(
                "{} is of another version of the file (blake3 {}, {} bytes)",
                self.journal_path.display(),
                blake3::Hash::from(old.hash).to_hex(),
                old.size
            )));
        }
        let len = self.file.metadata().map(|m| m.len()).unwrap_or(0);
        let listed = old.done.iter().filter(|d| **d).count() as u32;
        let mut buf = Vec::new();
        for (i, _) in old.done.iter().enumerate().filter(|(_, d)| **d) {
            let i = i as u32;
            let (offset, n) = (manifest.offset(i), manifest.segment_len(i));
            if offset + n > len {
                continue;
            }
            buf.resize(n as usize, 0);
            if self.file.read_exact_at(&mut buf, offset).is_ok()
                && blake3::hash(&buf).as_bytes() == &manifest.segments[i as usize]
            {
                self.journal.done[i as usize] = true;
                self.done += 1;
            }
        }
        Ok(Start::Resumed { kept: self.done, listed })
    }

    /// The segments already verified, one flag each.
    pub fn done(&self) -> &[bool] {
        &self.journal.done
    }

    pub fn done_count(&self) -> u32 {
        self.done
    }

    /// Writes a verified segment at its offset and counts it.
    pub fn write_segment(&mut self, manifest: &Manifest, index: u32, data: &[u8]) -> Result<()> {
        if self.journal.done[index as usize] {
            return Ok(());
        }
        self.file
            .write_all_at(data, manifest.offset(index))
            .with_context(|| format!("cannot write segment {index} to {}", self.data_path.display()))?;
        self.journal.done[index as usize] = true;
        self.done += 1;
        self.unsaved += 1;
        if self.unsaved >= SAVE_SEGMENTS || self.saved_at.elapsed() >= SAVE_EVERY {
            self.save()?;
        }
        Ok(())
    }

    /// Saves the journal if any segment came since the last save and
    /// [`SAVE_EVERY`] has passed (called on a timer).
    pub fn save_if_due(&mut self) -> Result<()> {
        if self.unsaved > 0 && self.saved_at.elapsed() >= SAVE_EVERY {
            self.save()?;
        }
        Ok(())
    }

    /// Replaces the journal atomically with the current state.
    pub fn save(&mut self) -> Result<()> {
        let tmp = beside(&self.out, "manyfold-fetch-new")?;
        fs::write(&tmp, self.journal.encode()).with_context(|| format!("cannot write {}", tmp.display()))?;
        fs::rename(&tmp, &self.journal_path)
            .with_context(|| format!("cannot rename {} to {}", tmp.display(), self.journal_path.display()))?;
        self.unsaved = 0;
        self.saved_at = Instant::now();
        Ok(())
    }

    /// Stops without finishing: keeps the data and the journal for a later
    /// fetch if any segment is verified, removes both otherwise.
    pub fn keep_for_resume(mut self) -> Result<u32> {
        if self.done == 0 {
            self.discard();
            return Ok(0);
        }
        self.save()?;
        Ok(self.done)
    }

    /// Removes the data file and the journal.
    pub fn discard(self) {
        let _ = fs::remove_file(&self.journal_path);
        let _ = fs::remove_file(&self.data_path);
    }

    /// With every segment verified: syncs the data, checks the whole
    /// file's BLAKE3 read back from disk, and moves it to its name (not
    /// over an existing file unless `overwrite`). The journal goes last.
    /// A whole-file mismatch discards everything: every segment matched
    /// its hash, so the manifest itself was inconsistent.
    pub fn finish(mut self, manifest: &Manifest, overwrite: bool) -> Result<blake3::Hash> {
        if self.done as usize != manifest.segments.len() {
            bail!("{} of {} segments verified", self.done, manifest.segments.len());
        }
        self.file.sync_all().with_context(|| format!("cannot sync {}", self.data_path.display()))?;
        let mut hasher = blake3::Hasher::new();
        let mut buf = vec![0u8; 1 << 20];
        let mut offset = 0u64;
        while offset < manifest.size {
            let want = (manifest.size - offset).min(buf.len() as u64) as usize;
            self.file
                .read_exact_at(&mut buf[..want], offset)
                .with_context(|| format!("cannot read back {}", self.data_path.display()))?;
            hasher.update(&buf[..want]);
            offset += want as u64;
        }
        let hash = hasher.finalize();
        if hash.as_bytes() != &manifest.hash {
            let (data, journal) = (self.data_path.clone(), self.journal_path.clone());
            self.discard();
            bail!(
                "the assembled file's BLAKE3 is {}, the manifest says {}: the servers' manifest is inconsistent; \
                 {} and {} were removed",
                hash.to_hex(),
                blake3::Hash::from(manifest.hash).to_hex(),
                data.display(),
                journal.display()
            );
        }
        if let Err(e) = move_into_place(&self.data_path, &self.out, overwrite) {
            // Everything is verified: a later fetch (with --overwrite, say) only renames.
            let _ = self.save();
            return Err(e);
        }
        let _ = fs::remove_file(&self.journal_path);
        Ok(hash)
    }
}

/// Reads at most `limit` bytes of `path`; a longer file is an error.
fn read_bounded(path: &Path, limit: u64) -> io::Result<Vec<u8>> {
    let mut v = Vec::new();
    File::open(path)?.take(limit + 1).read_to_end(&mut v)?;
    if v.len() as u64 > limit {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "longer than any journal"));
    }
    Ok(v)
}

/// Renames `from` to `to`; without `overwrite`, fails if `to` exists, even
/// if it appeared meanwhile (a hard link fails atomically where "check,
/// then rename" would race), and leaves `from` in place.
fn move_into_place(from: &Path, to: &Path, overwrite: bool) -> Result<()> {
    let renamed =
        || fs::rename(from, to).with_context(|| format!("cannot rename {} to {}", from.display(), to.display()));
    if overwrite {
        renamed()?;
    } else {
        match fs::hard_link(from, to) {
            Ok(()) => {
                let _ = fs::remove_file(from);
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                bail!(
                    "{} exists (use --overwrite to replace it); the download stays in {}",
                    to.display(),
                    from.display()
                )
            }
            // File systems without hard links: the racy way.
            Err(_) => {
                if to.exists() {
                    bail!("{} exists (use --overwrite to replace it)", to.display());
                }
                renamed()?;
            }
        }
    }
    // Make the new directory entry durable too.
    if let Some(dir) = to.parent().filter(|p| !p.as_os_str().is_empty()) {
        if let Ok(d) = File::open(dir) {
            let _ = d.sync_all();
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest(data: &[u8], segment: u32) -> Manifest {
        Manifest {
            name: "f".into(),
            size: data.len() as u64,
            segment_size: segment,
            hash: *blake3::hash(data).as_bytes(),
            segments: data.chunks(segment as usize).map(|c| *blake3::hash(c).as_bytes()).collect(),
        }
    }

    fn sample(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 7 + i / 4096) as u8).collect()
    }

    fn entries(dir: &Path) -> Vec<String> {
        let mut v: Vec<_> =
            fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        v.sort();
        v
    }

    #[test]
    fn journal_literal_bytes_and_round_trip() {
        let j = Journal { size: 9000, segment_size: 4096, hash: [5; 32], done: vec![true, false, true] };
        let bytes = j.encode();
        let mut head = b"MFFJ\x01".to_vec();
        head.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0x23, 0x28, 0, 0, 0x10, 0, 0, 0, 0, 3]);
        head.extend_from_slice(&[5; 32]);
        head.push(0b101);
        assert_eq!(&bytes[..head.len()], &head[..]);
        assert_eq!(&bytes[head.len()..], blake3::hash(&head).as_bytes());
        assert_eq!(Journal::parse(&bytes), Ok(j));
    }

    #[test]
    fn every_truncated_or_damaged_journal_is_rejected() {
        let bytes = Journal { size: 9000, segment_size: 4096, hash: [5; 32], done: vec![true, false, true] }.encode();
        for n in 0..bytes.len() {
            assert!(Journal::parse(&bytes[..n]).is_err(), "{n}");
        }
        for at in [0, 4, 8, 14, 20, 30, FIXED, bytes.len() - 1] {
            let mut bad = bytes.clone();
            bad[at] ^= 0x40;
            assert!(Journal::parse(&bad).is_err(), "flipped byte {at}");
        }
    }

    #[test]
    fn a_download_resumes_only_segments_that_still_verify() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("f.bin");
        let data = sample(5 * 4096 + 100);
        let m = manifest(&data, 4096);
        let (mut d, start) = Download::open(&out, &m).unwrap();
        assert_eq!(start, Start::Fresh);
        for i in [0u32, 2, 3] {
            let at = m.offset(i) as usize;
            d.write_segment(&m, i, &data[at..at + m.segment_len(i) as usize]).unwrap();
        }
        assert_eq!(d.keep_for_resume().unwrap(), 3);
        assert_eq!(entries(dir.path()), [".f.bin.manyfold-fetch", ".f.bin.manyfold-fetch-part"]);

        // Damage segment 2 on disk: only 0 and 3 are kept.
        let part = dir.path().join(".f.bin.manyfold-fetch-part");
        let f = OpenOptions::new().write(true).open(&part).unwrap();
        f.write_all_at(b"XX", 2 * 4096 + 10).unwrap();
        let (mut d, start) = Download::open(&out, &m).unwrap();
        assert_eq!(start, Start::Resumed { kept: 2, listed: 3 });
        assert_eq!(d.done(), [true, false, false, true, false, false]);
        for i in [1u32, 2, 4, 5] {
            let at = m.offset(i) as usize;
            d.write_segment(&m, i, &data[at..at + m.segment_len(i) as usize]).unwrap();
        }
        assert_eq!(d.finish(&m, false).unwrap(), blake3::hash(&data));
        assert_eq!(entries(dir.path()), ["f.bin"]);
        assert!(fs::read(&out).unwrap() == data);
    }

    #[test]
    fn another_version_starts_over_and_a_second_fetch_is_locked_out() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("f.bin");
        let data = sample(3 * 4096);
        let m = manifest(&data, 4096);
        let (mut d, _) = Download::open(&out, &m).unwrap();
        let err = Download::open(&out, &m).unwrap_err().to_string();
        assert!(err.contains("another fetch"), "{err}");
        d.write_segment(&m, 1, &data[4096..8192]).unwrap();
        d.keep_for_resume().unwrap();

        let mut other = data.clone();
        other[0] ^= 1;
        let m2 = manifest(&other, 4096);
        let (d, start) = Download::open(&out, &m2).unwrap();
        assert!(matches!(&start, Start::StartedOver(why) if why.contains("another version")), "{start:?}");
        assert_eq!(d.done_count(), 0);
        d.discard();
        assert!(entries(dir.path()).is_empty());
    }

    #[test]
    fn finishing_refuses_an_existing_file_and_an_inconsistent_manifest() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("f.bin");
        fs::write(&out, b"old").unwrap();
        let data = sample(4096 + 1);
        let m = manifest(&data, 4096);
        let (mut d, _) = Download::open(&out, &m).unwrap();
        d.write_segment(&m, 0, &data[..4096]).unwrap();
        d.write_segment(&m, 1, &data[4096..]).unwrap();
        let err = d.finish(&m, false).unwrap_err().to_string();
        assert!(err.contains("exists"), "{err}");
        assert_eq!(fs::read(&out).unwrap(), b"old");
        assert_eq!(entries(dir.path()), [".f.bin.manyfold-fetch", ".f.bin.manyfold-fetch-part", "f.bin"]);

        // Every segment matches but the whole does not: nothing is kept.
        let (d, start) = Download::open(&out, &m).unwrap();
        assert_eq!(start, Start::Resumed { kept: 2, listed: 2 });
        let bad = Manifest { hash: [0; 32], ..m.clone() };
        let err = d.finish(&bad, true).unwrap_err().to_string();
        assert!(err.contains("inconsistent"), "{err}");
        assert_eq!(entries(dir.path()), ["f.bin"]);
        assert_eq!(fs::read(&out).unwrap(), b"old");
    }
}
