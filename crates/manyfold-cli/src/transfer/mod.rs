//! `manyfold send` / `manyfold recv`: upload one file over a manyfold
//! connection (paper 04 §3.2, librusp's `up`), verified end to end.
//!
//! # Application protocol
//!
//! One file per connection. Integers are big-endian.
//!
//! ```text
//! sender                                   receiver
//!   request  ───────────────────────────────▶  checks name, existence, space
//!            ◀──────────────────────────  reply  ok "go ahead" | error TEXT
//!   SIZE bytes of data, then the 32-byte
//!   BLAKE3 hash of them (trailer) ───────────▶  writes .NAME.manyfold-part-<hex>,
//!                                              fsyncs, verifies the hash,
//!                                              renames to NAME
//!            ◀──────────────────────────  reply  ok "saved ..." | error TEXT
//!   close                                       close
//!
//! request:  magic "MFXF" (4) | version 1 (1) | name length N (2) |
//!           size (8) | name (N bytes of UTF-8, 1 ≤ N ≤ 255)
//! reply:    status 0 = ok, 1 = error (1) | length M (2) | text (M ≤ 4096)
//! ```
//!
//! The hash travels as a trailer so that each side reads its file once:
//! the sender hashes while it reads, the receiver while it writes. The
//! first reply lets the receiver refuse (bad name, file exists, no space)
//! before any data is sent. If the receiver fails while data is arriving
//! (say, a write error), it reads and discards the rest, then says why in
//! the second reply, so the sender always learns the outcome. The file
//! appears under its final name only after the hash matched and the data
//! was synced; on any failure the temporary file is deleted.

mod group;
mod recv;
mod send;
mod shard;
pub mod wire;

pub use group::send_to_group;
pub use recv::{run as run_recv, serve_one, RecvArgs, RecvOptions};
pub use send::{run as run_send, SendArgs, Source};

/// Bytes read or written per I/O call on file and connection.
const CHUNK: usize = 256 * 1024;
