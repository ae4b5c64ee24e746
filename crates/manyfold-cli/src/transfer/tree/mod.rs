//! Tree transfers (`manyfold send A B DIR -`, protocol version 3): several
//! files, directories and symbolic links in one connection, with their
//! modes and modification times, like `rsync -a`; standard input as a file
//! of unknown length.
//!
//! # Wire
//!
//! Integers are big-endian. The sender first sends the whole list, so the
//! receiver judges every path before any data moves:
//!
//! ```text
//! request: magic "MFXF" (4) | version 3 (1) | entry count N (4, 1..=1,000,000)
//!          | N entries
//! entry:   kind (1): 'F' file, 'D' directory, 'L' symbolic link
//!          | mode (2): permission bits, rwxrwxrwx (set-id and sticky bits are not carried)
//!          | mtime (8): seconds since 1970, signed | nanoseconds (4, < 10^9)
//!          | size (8): a file's length; 2^64-1 = not known (stdin); 0 otherwise
//!          | path length P (2) | path (P bytes of UTF-8, 1 ≤ P ≤ 4096)
//!          | target length T (2) | target (T bytes of UTF-8: a link's target; T = 0 otherwise)
//! ```
//!
//! A path is relative and `/`-separated; each component is a plain name
//! (not empty, `.` or `..`, no control character, at most 255 bytes).
//! Every entry lies in a directory listed before it, or at the top. A
//! link's target is relative and, read from the link's directory, never
//! leads out of the receiving directory. All paths and targets of one
//! list hold at most 64 MiB. The receiver answers the list as in version 1
//! (ok "go ahead" | error TEXT): any bad path, a path listed twice, an
//! existing file without `--overwrite` (but see below: a file of the
//! listed size, mtime and mode), a directory where a file is (or the reverse),
//! or too little space for the known sizes is refused here.
//!
//! After its "go ahead" the receiver offers to resume files it holds
//! part of from an earlier attempt (a transfer killed or interrupted on
//! either side), found by name and tagged with the file's size and mtime.
//! It offers too, with H equal to the size, files it already holds whole:
//! without `--overwrite`, an existing regular file whose size, mtime and
//! permission bits are the entry's (the receiver gave it the sender's when
//! it stored it: rsync's quick check, with the mode) is taken to be the
//! same file, not refused. Once the list passed every other check, the
//! receiver hashes such files for their offers, up to 1 GiB in all, so
//! that hashing whole files adds about a second at most to its answer;
//! past that they are not offered. Offers of both kinds go in one
//! increasing index order:
//!
//! ```text
//! offers:  count K (4, ≤ N) | K offers in increasing index order
//! offer:   index of the entry (4) | bytes held H (8) | BLAKE3 of those H bytes (32)
//! ```
//!
//! Then, for each file entry in list order, the offset its data starts
//! at, and its data:
//!
//! ```text
//! from:    offset (8): 0, or H when the sender's own first H bytes hash
//!          the same (it then sends only the rest; nothing at all for a
//!          file held whole)
//! chunk:   length L (4, 1 ≤ L ≤ 1 MiB) | L bytes
//! end:     0 (4) | BLAKE3 of all the file's bytes, from offset 0 (32)
//! abandon: 0xFFFFFFFF (4) | length M (2) | text (M ≤ 4096): the sender gives up
//! ```
//!
//! A sender abandons when a source changed while it was read (its size,
//! mtime or ctime differ after the read, or its size from the list): the
//! receiver keeps nothing of that file and says so in its verdict. The
//! receiver answers once more after the last file: ok "saved ..." or the
//! error that stopped it; it may answer with an error at any time (a
//! write failure, a hash mismatch), and the sender, which reads while it
//! sends, stops at once.
//!
//! A file held whole whose data comes from offset 0 (it was not offered,
//! its hash differed, or a group sent it: a group sends every receiver
//! all of each file) is compared byte for byte with the file as it
//! arrives, and nothing is written. A difference is told only after the
//! file's last byte, never at the first (which would let a sender read the
//! file a byte at a time by guessing): the receiver then refuses the
//! transfer ("file exists: PATH (its content differs from the sender's
//! ...)"); otherwise it checks the sender's hash as for any file. Either
//! way the file it holds is left as it was. What a sender can learn of a
//! file already in the directory is what rsync's receiver tells any client
//! allowed to write: if it names the file's exact size, mtime and mode,
//! the file's BLAKE3 (in the offer), and whether a whole file it sends is
//! the same. A directory whose files no sender may learn anything of is
//! not one to receive into.
//!
//! The receiver closes the connection right after its last answer; the
//! sender closes only once that FIN came (the list's framing, not a FIN,
//! ends the data). The side that closes first lingers in TIME-WAIT before
//! its process may exit (spec §4.8: four RTOs, at least 250 ms); this way
//! that is the receiver, and `manyfold send` exits one round trip after
//! the verdict, as a TCP sender does.
//!
//! The receiver makes each directory as it comes (its mode and mtime are
//! set last, deepest first, so a read-only directory can still be
//! filled), each link under a temporary name then renamed, and each file
//! in `.NAME.manyfold-partial-<tag>` beside its final name (stdin: in
//! `.NAME.manyfold-part-<hex>`), renamed only after its hash matched. A
//! connection that breaks off keeps the partial file for a resume; any
//! other failure deletes it; `recv --partial-max-age` removes those no
//! transfer came back for. The transfer succeeds only if every entry did;
//! on a failure the files already verified stay.

mod send;
mod source;
mod store;
mod walk;
pub mod wire;

use std::net::SocketAddr;
use std::time::Duration;

use manyfold::Protection;
use manyfold_proto::ConnStats;

pub use send::send_tree;
pub use source::{stream_files, Sent, Sink, POOL_BUFFERS};
pub use store::receive_tree;
pub use walk::{plan, unchecked, Origin, Planned};

use crate::report::{Direction, Report};
use crate::size::human_bytes;

/// One file of a tree transfer, for the report.
#[derive(Debug, Clone)]
pub struct FileLine {
    pub path: String,
    /// The file's length.
    pub bytes: u64,
    /// Of which an earlier attempt had already moved (a resume).
    pub resumed: u64,
    pub hash: blake3::Hash,
}

/// What a tree transfer moved besides its totals.
#[derive(Debug, Clone, Default)]
pub struct TreeSummary {
    pub files: Vec<FileLine>,
    pub dirs: u64,
    pub links: u64,
}

impl TreeSummary {
    /// `2 files, 3 directories, 1 link`.
    pub fn counts(&self) -> String {
        format!(
            "{}, {}, {}",
            plural(self.files.len() as u64, "file"),
            plural(self.dirs, "directory"),
            plural(self.links, "link")
        )
    }

    /// A line per file, on `-v`.
    pub fn write_files(&self, f: &mut dyn std::fmt::Write) -> std::fmt::Result {
        if crate::net::verbose() > 0 {
            for file in &self.files {
                write!(f, "\n  file {}  {}  blake3 {}", file.path, human_bytes(file.bytes), file.hash.to_hex())?;
            }
        }
        Ok(())
    }

    /// Adds the files (path, bytes, blake3) and the other entries' counts
    /// to a report's JSON object.
    pub fn add_to_json(&self, v: &mut serde_json::Value) {
        let files: Vec<serde_json::Value> = self
            .files
            .iter()
            .map(|f| serde_json::json!({ "path": f.path, "bytes": f.bytes, "blake3": f.hash.to_hex().to_string() }))
            .collect();
        v["files"] = files.into();
        v["directories"] = self.dirs.into();
        v["links"] = self.links.into();
    }
}

/// `1 file`, `2 files`, `1 directory`, `3 directories`.
fn plural(n: u64, noun: &str) -> String {
    match (n, noun.strip_suffix('y')) {
        (1, _) => format!("1 {noun}"),
        (_, Some(stem)) => format!("{n} {stem}ies"),
        _ => format!("{n} {noun}s"),
    }
}

/// The names at the top of a list, as a report names the transfer.
pub fn top_names<'a>(entries: impl Iterator<Item = &'a wire::Entry>) -> String {
    let tops: Vec<&str> = entries.map(|e| e.path.as_str()).filter(|p| !p.contains('/')).collect();
    tops.join(", ")
}

/// What a list held besides its files.
pub fn summary<'a>(entries: impl Iterator<Item = &'a wire::Entry>, files: Vec<FileLine>) -> TreeSummary {
    let mut summary = TreeSummary { files, ..TreeSummary::default() };
    for e in entries {
        match e.kind {
            wire::Kind::Dir => summary.dirs += 1,
            wire::Kind::Link(_) => summary.links += 1,
            wire::Kind::File => {}
        }
    }
    summary
}

/// The report of a transfer of `entries`: a list that is one file reads
/// as a one-file transfer always did.
fn report(
    direction: Direction,
    peer: SocketAddr,
    entries: &[wire::Entry],
    files: Vec<FileLine>,
    elapsed: Duration,
    stats: ConnStats,
    security: Protection,
) -> Report {
    let bytes = files.iter().map(|f| f.bytes).sum();
    let resumed = files.iter().map(|f| f.resumed).sum();
    let (name, hash, tree) = match (entries, files.as_slice()) {
        ([only], [file]) if only.is_file() => (file.path.clone(), Some(file.hash), None),
        _ => (top_names(entries.iter()), None, Some(summary(entries.iter(), files))),
    };
    Report { direction, name, peer, bytes, resumed, elapsed, stats, hash, tree, security }
}
