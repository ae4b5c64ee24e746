//! The receiving half of a tree transfer: the list checked whole before
//! any data (paths and links inside the directory, nothing overwritten
//! without `--overwrite`, room for the known sizes), then each entry
//! made: directories, links (under a temporary name, then renamed), and
//! files through a [`PartFile`] renamed into place only after their hash
//! matched. Directories get their mode and mtime last, deepest first.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{anyhow, bail, Context, Result};
use indicatif::{MultiProgress, ProgressBar};
use tokio::io::AsyncWriteExt;

use super::wire::{self, Chunk, Entry, Kind};
use super::FileLine;
use crate::fsutil::{available_space, hidden_name, PartFile};
use crate::net::Connection;
use crate::report::{self, Direction, Report};
use crate::size::human_bytes;
use crate::transfer::recv::{refuse, RecvOptions};
use crate::transfer::wire::Reply;

/// Serves a tree transfer whose list follows on `conn` (magic and version
/// read); `start` is when the connection came.
pub async fn receive_tree(
    conn: &mut Connection,
    options: &RecvOptions,
    multi: &MultiProgress,
    start: Instant,
) -> Result<Report> {
    let peer = conn.peer_addr();
    let security = conn.protection();
    let entries = match wire::read_list(conn).await {
        Ok(entries) => entries,
        Err(e @ (wire::ListError::Truncated | wire::ListError::Io(_))) => {
            return Err(e).context("cannot read the list of entries")
        }
        Err(e) => return Err(refuse(conn, e.to_string()).await),
    };
    let dir = options.dir.clone();
    let overwrite = options.overwrite;
    let checked = {
        let entries = entries.clone();
        tokio::task::spawn_blocking(move || admit(&dir, &entries, overwrite))
            .await
            .map_err(|e| anyhow!("check task failed: {e}"))?
    };
    if let Err(why) = checked {
        return Err(refuse(conn, why).await);
    }
    Reply::Ok("go ahead".into()).write(conn).await.context("connection lost while answering the request")?;

    let known: u64 = entries.iter().filter_map(Entry::known_size).sum();
    let first = &entries[0].path;
    multi.suspend(|| {
        report::say(&format_args!(
            "receiving {} from {peer}: {} entr{}, {}",
            first,
            entries.len(),
            if entries.len() == 1 { "y" } else { "ies" },
            human_bytes(known)
        ));
    });
    let bar = report::transfer_bar(multi, known, &crate::transfer::recv::short_label(first));
    let made = make_all(conn, &options.dir, &entries, overwrite, &bar).await;
    bar.finish_and_clear();
    let files = match made {
        Ok(files) => files,
        // The connection is gone: no one to tell, and its reason says most.
        Err(e) if crate::net::close_reason(&e).is_some() => return Err(e),
        Err(e) => return Err(refuse(conn, format!("{e:#}")).await),
    };
    let bytes: u64 = files.iter().map(|f| f.bytes).sum();
    let text = format!("saved {} entr{} ({bytes} bytes)", entries.len(), if entries.len() == 1 { "y" } else { "ies" });
    let elapsed = start.elapsed();
    let _ = Reply::Ok(text).write(conn).await;
    let stats = conn.stats();
    let _ = tokio::time::timeout(std::time::Duration::from_secs(5), conn.close()).await;
    Ok(super::report(Direction::Received, peer, &entries, files, elapsed, stats, security))
}

/// Checks the list against the directory: safe paths, directories only
/// where directories are or nothing is, no file replaced unless
/// `overwrite`, and room for the sizes known.
fn admit(dir: &Path, entries: &[Entry], overwrite: bool) -> Result<(), String> {
    wire::check_entries(entries)?;
    for e in entries {
        let at = dir.join(&e.path);
        let Ok(meta) = std::fs::symlink_metadata(&at) else { continue };
        match (&e.kind, meta.is_dir()) {
            (Kind::Dir, true) => {}
            (Kind::Dir, false) => return Err(format!("{} exists and is not a directory", e.path)),
            (_, true) => return Err(format!("{} exists and is a directory", e.path)),
            (_, false) if !overwrite => {
                return Err(format!("file exists: {} (the receiver does not overwrite without --overwrite)", e.path))
            }
            (_, false) => {}
        }
    }
    let needed: u64 = entries.iter().filter_map(Entry::known_size).sum();
    match available_space(dir) {
        Some(free) if free < needed => Err(format!(
            "no space: the files need {}, the receiver has {} free",
            human_bytes(needed),
            human_bytes(free)
        )),
        _ => Ok(()),
    }
}

/// Makes every entry in list order; returns the files stored. The first
/// failure ends the transfer (files already verified stay).
async fn make_all(
    conn: &mut Connection,
    dir: &Path,
    entries: &[Entry],
    overwrite: bool,
    bar: &ProgressBar,
) -> Result<Vec<FileLine>> {
    let mut files = Vec::new();
    let mut dirs = Vec::new();
    let mut buf = Vec::new();
    for e in entries {
        let at = dir.join(&e.path);
        match &e.kind {
            Kind::Dir => {
                match std::fs::create_dir(&at) {
                    Err(err) if err.kind() != std::io::ErrorKind::AlreadyExists => {
                        return Err(err).with_context(|| format!("cannot create the directory {}", e.path));
                    }
                    _ => {}
                }
                // Not a link put there meanwhile: nothing is written through one.
                if !std::fs::symlink_metadata(&at).is_ok_and(|m| m.is_dir()) {
                    bail!("{} is not a directory", e.path);
                }
                dirs.push((at, e));
            }
            Kind::Link(target) => make_link(&at, target, e.mtime, overwrite)
                .with_context(|| format!("cannot create the link {} -> {target}", e.path))?,
            Kind::File => files.push(receive_file(conn, &at, e, overwrite, bar, &mut buf).await?),
        }
    }
    for (at, e) in dirs.iter().rev() {
        set_mode_and_mtime(at, e).with_context(|| format!("cannot set the mode and time of {}", e.path))?;
    }
    Ok(files)
}

/// Receives one file's chunks into a temporary file and moves it into
/// place once its hash matched, with its mode and mtime.
async fn receive_file(
    conn: &mut Connection,
    at: &Path,
    e: &Entry,
    overwrite: bool,
    bar: &ProgressBar,
    buf: &mut Vec<u8>,
) -> Result<FileLine> {
    let part = PartFile::create(at)?;
    let mut file = tokio::fs::File::from_std(part.file().try_clone().context("cannot duplicate the file handle")?);
    let mut hasher = blake3::Hasher::new();
    let mut got = 0u64;
    let theirs = loop {
        match wire::read_chunk(conn, buf).await.context("connection lost while receiving data")? {
            None => {
                got += buf.len() as u64;
                if e.known_size().is_some_and(|size| got > size) {
                    bail!("{}: more data than its size of {} bytes", e.path, e.size);
                }
                hasher.update(buf);
                file.write_all(buf).await.with_context(|| format!("writing {}", part.path().display()))?;
                if bar.length().is_some_and(|len| bar.position() + buf.len() as u64 > len) {
                    bar.inc_length(buf.len() as u64);
                }
                bar.inc(buf.len() as u64);
            }
            Some(Chunk::End(hash)) => break hash,
            Some(Chunk::Abandon(why)) => bail!("the sender gave up: {why}"),
        }
    };
    if e.known_size().is_some_and(|size| got != size) {
        bail!("{}: {got} bytes arrived of the {} announced", e.path, e.size);
    }
    file.flush().await.with_context(|| format!("writing {}", part.path().display()))?;
    let hash = hasher.finalize();
    if hash.as_bytes() != &theirs {
        bail!(
            "hash mismatch: the data received for {} does not match the sender's BLAKE3 (sender {}, received {}); \
             nothing of it was saved",
            e.path,
            blake3::Hash::from(theirs).to_hex(),
            hash.to_hex()
        );
    }
    let (mode, mtime) = (e.mode, e.mtime);
    tokio::task::spawn_blocking(move || -> Result<()> {
        use std::os::unix::fs::PermissionsExt;
        part.file().set_permissions(std::fs::Permissions::from_mode(mode & wire::MODE_BITS))?;
        part.file().set_modified(system_time(mtime))?;
        part.commit(overwrite)
    })
    .await
    .map_err(|err| anyhow!("commit task failed: {err}"))??;
    Ok(FileLine { path: e.path.clone(), bytes: got, hash })
}

/// Creates the link under a temporary name beside `at` and renames it
/// into place (replacing only with `overwrite`).
fn make_link(at: &Path, target: &str, mtime: (i64, u32), overwrite: bool) -> Result<()> {
    use rustix::fs::{renameat_with, symlinkat, RenameFlags, CWD};
    let name = at.file_name().context("a link without a name")?.to_string_lossy().into_owned();
    let tmp: PathBuf =
        at.with_file_name(hidden_name(&name, &format!(".manyfold-part-{:016x}", crate::net::random_u64())));
    symlinkat(target, CWD, &tmp)?;
    if let Err(e) = rustix::fs::utimensat(CWD, &tmp, &timestamps(mtime), rustix::fs::AtFlags::SYMLINK_NOFOLLOW) {
        let _ = std::fs::remove_file(&tmp);
        return Err(e.into());
    }
    let flags = if overwrite { RenameFlags::empty() } else { RenameFlags::NOREPLACE };
    if let Err(e) = renameat_with(CWD, &tmp, CWD, at, flags) {
        let _ = std::fs::remove_file(&tmp);
        if e == rustix::io::Errno::EXIST {
            bail!("file exists: {}", at.display());
        }
        return Err(e.into());
    }
    Ok(())
}

fn set_mode_and_mtime(at: &Path, e: &Entry) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(at, std::fs::Permissions::from_mode(e.mode & wire::MODE_BITS))?;
    rustix::fs::utimensat(rustix::fs::CWD, at, &timestamps(e.mtime), rustix::fs::AtFlags::SYMLINK_NOFOLLOW)?;
    Ok(())
}

/// Access time left alone, modification time set.
fn timestamps((secs, nanos): (i64, u32)) -> rustix::fs::Timestamps {
    rustix::fs::Timestamps {
        last_access: rustix::fs::Timespec { tv_sec: 0, tv_nsec: rustix::fs::UTIME_OMIT },
        last_modification: rustix::fs::Timespec { tv_sec: secs, tv_nsec: nanos.into() },
    }
}

fn system_time((secs, nanos): (i64, u32)) -> std::time::SystemTime {
    let epoch = std::time::UNIX_EPOCH;
    if secs >= 0 {
        epoch + std::time::Duration::new(secs as u64, nanos)
    } else {
        epoch - std::time::Duration::from_secs(secs.unsigned_abs()) + std::time::Duration::from_nanos(nanos.into())
    }
}
