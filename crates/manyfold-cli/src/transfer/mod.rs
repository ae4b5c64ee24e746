//! `manyfold send` / `manyfold recv`: upload files over a manyfold
//! connection (paper 04 §3.2, librusp's `up`), verified end to end.
//!
//! # Application protocol
//!
//! `send` to one receiver speaks version 3 ([`tree`]: a list of files,
//! directories and links, then each file's data); a receiver also takes
//! versions 1 and 2, which a group send uses. Version 1 carries one file
//! per connection. Integers are big-endian.
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
//! With several receivers (`send --to A,B,C`, [`group`]) the sender opens
//! one group; in `all` mode every receiver runs exactly this protocol, the
//! request, data and trailer being group messages held once for all.
//!
//! Version 2, a spread file (`--mode any|at-least=P|subset=K/P`,
//! [`shard`]): the request carries the block size after the name, and
//! the data comes as whole messages instead of a byte stream:
//!
//! ```text
//! request:  as above with version 2 | block size (4)
//! block:    'B' | offset (8) | BLAKE3 of the data (32) | data
//! end:      'E' | BLAKE3 of the whole file (32)
//! ```
//!
//! The request and the end go to each receiver alone; each block is a
//! group message the mode delivers to some of them. A receiver checks each
//! block's hash, writes it at its offset, and at the end keeps what it got
//! (`NAME` if that is the whole file and its hash matches, else
//! `NAME.shard` and the index `NAME.shard.blocks`), then replies as above.
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
mod takeover;
mod tree;
pub mod wire;

pub use group::{send_to_group, Payload};
pub use recv::{run as run_recv, serve_one, RecvArgs, RecvOptions};
pub use send::{run as run_send, SendArgs, Source};
pub use tree::TreeSummary;

/// Bytes read or written per I/O call on file and connection.
const CHUNK: usize = 256 * 1024;
