//! Where `mcast recv` stores a session: a hidden temporary file renamed
//! once verified, a block device written in place, standard output, or a
//! directory bundle unpacked file by file (spec §16.10).

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use manyfold::mcast::McastSink;
use manyfold_proto::mcast::Announcement;

use super::bundle::Manifest;
use super::running::RunningHash;
use crate::fsutil::{PartFile, Writeback};

/// The receiver's store: a temporary file renamed once verified, or a
/// device written in place.
pub(super) struct Sink {
    pub target: Target,
    pub overwrite: bool,
    pub part: Option<PartFile>,
    pub device: Option<File>,
    pub size: Option<u64>,
    pub written: u64,
    /// The session was a bundle, unpacked under the directory (spec §16.10).
    pub bundle: Option<Manifest>,
    /// The name of the session described to us (its failures are the
    /// session's), once one was.
    pub heard: Option<String>,
    /// The hash of what was written, kept as it is written.
    pub running: RunningHash,
    /// Syncs what was written in the background, once the file is open.
    pub writeback: Option<Writeback>,
    /// The whole-file check: how long it took, and whether it read the
    /// file again (the hash kept while writing was missing or differed).
    pub check: Option<(std::time::Duration, bool)>,
}

#[derive(Debug, Clone)]
pub(super) enum Target {
    Dir(PathBuf),
    Path(PathBuf),
    Stdout,
}

impl Sink {
    pub fn new(target: Target, overwrite: bool) -> Sink {
        Sink {
            target,
            overwrite,
            part: None,
            device: None,
            size: None,
            written: 0,
            bundle: None,
            heard: None,
            running: RunningHash::default(),
            writeback: None,
            check: None,
        }
    }

    fn file(&self) -> Option<&File> {
        stored(&self.device, &self.part)
    }
}

/// The file written: the device, else the temporary file.
fn stored<'a>(device: &'a Option<File>, part: &'a Option<PartFile>) -> Option<&'a File> {
    device.as_ref().or(part.as_ref().map(|p| p.file()))
}

fn is_block_device(path: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    std::fs::metadata(path).is_ok_and(|m| m.file_type().is_block_device())
}

impl McastSink for Sink {
    fn announced(&mut self, info: &Announcement) -> std::io::Result<()> {
        self.heard = Some(info.name.clone());
        let io_err = |e: anyhow::Error| std::io::Error::other(format!("{e:#}"));
        if self.file().is_none() {
            match &self.target {
                Target::Path(p) if is_block_device(p) => {
                    self.device = Some(OpenOptions::new().write(true).read(true).open(p)?);
                }
                Target::Path(p) => self.part = Some(PartFile::create(p).map_err(io_err)?),
                Target::Dir(d) => {
                    let name = &info.name;
                    if name.is_empty() || name == "." || name == ".." || name.starts_with('.') {
                        return Err(std::io::Error::new(
                            std::io::ErrorKind::InvalidData,
                            format!("the sender announced an unacceptable file name {name:?}"),
                        ));
                    }
                    let path = d.join(name);
                    // A directory of that name may take a bundle's files
                    // (each checked when unpacked, spec §16.10).
                    if path.exists() && !path.is_dir() && !self.overwrite {
                        return Err(std::io::Error::new(
                            std::io::ErrorKind::AlreadyExists,
                            format!("file exists: {} (use --overwrite)", path.display()),
                        ));
                    }
                    self.part = Some(PartFile::create(&path).map_err(io_err)?);
                }
                Target::Stdout => {
                    let tmp = std::env::temp_dir().join(format!("manyfold-mcast-{:016x}", crate::net::random_u64()));
                    self.part = Some(PartFile::create(&tmp).map_err(io_err)?);
                }
            }
        }
        if let (None, Some(f)) = (&self.writeback, self.file()) {
            self.writeback = Some(Writeback::new(f)?);
        }
        if let (Some(size), None) = (info.size, self.size) {
            self.size = Some(size);
            if let Some(p) = &self.part {
                p.file().set_len(size)?;
            }
        }
        Ok(())
    }

    fn write_at(&mut self, offset: u64, data: &[u8]) -> std::io::Result<()> {
        let f = stored(&self.device, &self.part)
            .ok_or_else(|| std::io::Error::other("data before the session was described"))?;
        f.write_all_at(data, offset)?;
        self.running.wrote(f, offset, data)?;
        if let Some(w) = &mut self.writeback {
            w.wrote(data.len() as u64);
        }
        self.written += data.len() as u64;
        Ok(())
    }

    fn read_at(&mut self, offset: u64, out: &mut [u8]) -> std::io::Result<usize> {
        let f = self.file().ok_or_else(|| std::io::Error::other("no data stored yet"))?;
        let mut got = 0;
        while got < out.len() {
            match f.read_at(&mut out[got..], offset + got as u64)? {
                0 => break,
                n => got += n,
            }
        }
        Ok(got)
    }

    fn verify(&mut self, info: &Announcement) -> std::io::Result<bool> {
        let (Some(f), Some(size), Some(want)) = (self.file(), info.size, info.hash) else {
            return Ok(false);
        };
        if self.part.is_some() {
            f.set_len(size)?;
        }
        // A bundle: its header's hash is the announced one (spec §16.10).
        let io_err = |e: anyhow::Error| std::io::Error::other(format!("{e:#}"));
        if let Some((manifest, offset)) = Manifest::detect(f, size, &want).map_err(io_err)? {
            let Target::Dir(root) = &self.target else {
                let (n, bytes) = manifest.totals();
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("the session is a bundle of {n} file(s), {bytes} bytes: receive it with --dir"),
                ));
            };
            let all = manifest.unpack(f, offset, root, self.overwrite).map_err(io_err)?;
            self.bundle = Some(manifest);
            return Ok(all);
        }
        // What was hashed as it was written decides a match; a mismatch
        // (or no running hash) is decided by reading the file again.
        let started = std::time::Instant::now();
        if self.running.finish(size) == Some(want) {
            self.check = Some((started.elapsed(), false));
            return Ok(true);
        }
        let (hasher, at) = crate::fsutil::hash_prefix(f, size)?;
        self.check = Some((started.elapsed(), true));
        Ok(at == size && *hasher.finalize().as_bytes() == want)
    }
}
