//! `manyfold serve` / `manyfold fetch`: a segmented download from several
//! servers at once (paper 00 §5.2). The client opens one group (spec §14)
//! whose destinations are the servers, one stream to each, and asks each
//! server for different segments of the same file.
//!
//! # Application protocol
//!
//! Whole messages on stream 0 (spec §13.5), each starting with a type
//! byte; integers are big-endian. Layouts in [`wire`].
//!
//! ```text
//! fetch                                         serve
//!   'M' manifest request (name) ─────────────▶  checks the name, hashes the
//!                                               file once (cached by name,
//!                                               size and mtime)
//!       ◀───────────────  'm' manifest: name, size, segment size, count,
//!                             BLAKE3 of the file, BLAKE3 of each segment
//!                          | 'e' error TEXT (not found, name refused, ...)
//!   'S' segment request (index) ×N ──────────▶  reads it at its offset,
//!                                               checks it against the manifest
//!       ◀───────────────  'd' segment: index, length, data | 'e' error
//!   close                                       close
//! ```
//!
//! Segment requests are for the file of the last manifest given on the
//! connection, so a request is 5 bytes and a server never serves a segment
//! of another version than the one it described: it re-checks each
//! segment's hash as it reads it, and answers an error if the file
//! changed. The client keeps only servers whose manifests agree with the
//! majority's ([`agree`]), schedules segments over them
//! ([`schedule`]), checks every segment's hash before writing it, the
//! whole file's hash before the rename, and leaves a journal to resume
//! from if it stops early ([`journal`]).

mod agree;
mod client;
mod journal;
mod schedule;
mod serve;
pub mod wire;

pub use client::{run as run_fetch, FetchArgs};
pub use serve::{run as run_serve, ServeArgs};
