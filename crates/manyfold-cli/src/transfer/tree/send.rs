//! The sending half of a tree transfer: the list, then each file's data
//! in chunks with its BLAKE3, while listening for the receiver's verdict
//! (which may come early, as a refusal, and ends the sending at once).

use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use bytes::Bytes;
use indicatif::ProgressBar;
use tokio::io::AsyncWriteExt;

use super::source::{accept_offers, stream_files, Sent, Sink};
use super::walk::Planned;
use super::wire::{self, MAX_CHUNK};
use crate::net::{Connection, SendHalf};
use crate::pace::Pacer;
use crate::report::{Direction, Report};
use crate::transfer::send::show_acked;
use crate::transfer::wire::Reply;

/// How often the bar is brought up to date while waiting on the receiver.
const BAR_TICK: Duration = Duration::from_millis(100);

/// What to try when the peer at `peer` does not answer as a receiver does.
fn wrong_kind(peer: std::net::SocketAddr) -> String {
    format!(
        "is {peer} a `manyfold recv`? (`manyfold serve` answers `fetch`, `manyfold ftp-server` answers `ftp`, \
         `manyfold echo-server` answers `echo`)"
    )
}

/// The receiver's answer to the list: a peer of another kind is named as
/// such (an echo server sends the list back; a `serve` or `ftp-server`
/// closes a client that sends no request of its own within 10 s). No
/// bound of its own: a receiver hashes what it holds of partial files
/// before it answers, about a second per 3 GB.
async fn first_answer<R: tokio::io::AsyncRead + Unpin>(rx: &mut R, peer: std::net::SocketAddr) -> Result<Reply> {
    match Reply::read(rx).await {
        Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
            bail!("the answer is not a receiver's ({e}): {}", wrong_kind(peer))
        }
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
            bail!("the peer closed without answering the list: {}", wrong_kind(peer))
        }
        r => r.context("connection lost while waiting for the receiver's answer"),
    }
}

/// Sends the listed entries on `conn` and closes it; fails unless the
/// receiver confirms it stored every one.
pub async fn send_tree(conn: Connection, items: Vec<Planned>, mut pacer: Pacer, bar: &ProgressBar) -> Result<Report> {
    let peer = conn.peer_addr();
    let (mut tx, mut rx) = conn.split();
    let start = Instant::now();
    let entries: Vec<wire::Entry> = items.iter().map(|p| p.entry.clone()).collect();
    tx.write_all(&wire::encode_request(&entries)).await.context("connection lost while sending the list")?;
    tx.flush().await.context("connection lost while sending the list")?;
    match first_answer(&mut rx, peer).await? {
        Reply::Ok(_) => {}
        Reply::Error(why) => bail!("receiver refused the transfer: {why}"),
    }
    let offers = wire::read_offers(&mut rx, entries.len()).await.context("cannot read the receiver's resume offers")?;
    let resumes = accept_offers(&items, offers).await?;

    let mut verdict = Box::pin(Reply::read(&mut rx));
    let mut sent = Sent::default();
    let streamed = {
        let mut sink = ConnSink { tx: &mut tx, bar };
        let stream = stream_files(&items, resumes, &mut sink, &mut pacer, &mut sent);
        tokio::pin!(stream);
        tokio::select! {
            r = &mut stream => r,
            // Before the end, only a refusal comes: stop sending at once.
            early = &mut verdict => {
                return match early.context("connection lost while sending data")? {
                    Reply::Error(why) => Err(anyhow::anyhow!("receiver did not save the files: {why}")),
                    Reply::Ok(text) => Err(anyhow::anyhow!("receiver answered before the end: {text}")),
                };
            }
        }
    };
    if let Err(e) = streamed {
        if crate::net::close_reason(&e).is_some() {
            return Err(e);
        }
        // The receiver learns it at once and keeps nothing of this file.
        let _ = tx.write_all(&wire::abandon(&format!("{e:#}"))).await;
        let _ = tx.flush().await;
        let _ = tokio::time::timeout(Duration::from_secs(5), verdict).await;
        let _ = tokio::time::timeout(Duration::from_secs(5), tx.close()).await;
        return Err(e);
    }
    // No FIN yet: the list's framing ends the data, and the receiver
    // closes first, right after its verdict (below).
    tx.flush().await.context("connection lost while sending data")?;
    let reply = {
        let mut tick = tokio::time::interval(BAR_TICK);
        loop {
            tokio::select! {
                reply = &mut verdict => break reply,
                _ = tick.tick() => show_acked(bar, sent.bytes, &tx),
            }
        }
    };
    drop(verdict);
    match reply.context("connection lost before the receiver confirmed the files")? {
        Reply::Ok(_) => {}
        Reply::Error(why) => bail!("receiver did not save the files: {why}"),
    }
    bar.set_position(sent.bytes);
    let elapsed = start.elapsed();
    let stats = tx.stats();
    let security = tx.protection();
    // The receiver's FIN follows its verdict. Closing only once it came
    // makes this side the passive closer, which is done when its own FIN
    // is acknowledged; the side that closes first must linger in
    // TIME-WAIT before its process may exit (spec §4.8: four RTOs, at
    // least 250 ms), and every send used to: a 10 kB file over a 50 ms
    // path took 0.71 s (RESULTS §39).
    let _ = tokio::time::timeout(END_WAIT, wait_for_end(&mut rx)).await;
    let _ = tokio::time::timeout(Duration::from_secs(5), tx.close()).await;
    Ok(super::report(Direction::Sent, peer, &entries, sent.files, elapsed, stats, security))
}

/// How long a sender waits for the receiver's FIN after its verdict.
const END_WAIT: Duration = Duration::from_secs(5);

/// Reads to the peer's FIN (what a receiver sends after its verdict is
/// nothing more), or to an error.
async fn wait_for_end(rx: &mut crate::net::RecvHalf) {
    use tokio::io::AsyncReadExt;
    let mut scratch = [0u8; 64];
    while let Ok(n) = rx.read(&mut scratch).await {
        if n == 0 {
            break;
        }
    }
}

/// One receiver's connection as the stream's sink; the bar follows what
/// the receiver acknowledged.
struct ConnSink<'a> {
    tx: &'a mut SendHalf,
    bar: &'a ProgressBar,
}

impl Sink for ConnSink<'_> {
    async fn put(&mut self, mut bytes: Bytes, done: u64) -> Result<()> {
        if self.bar.length().is_some_and(|len| done > len) {
            self.bar.set_length(done);
        }
        // Handed over piecewise with a deadline, so that the bar keeps
        // telling while the receiver is silent and the window is full (a
        // call still waiting has taken nothing: dropping it is safe).
        while !bytes.is_empty() {
            if let Ok(written) = tokio::time::timeout(BAR_TICK, self.tx.write_chunk_some(&mut bytes)).await {
                written.context("connection lost while sending data")?;
            }
            show_acked(self.bar, done.saturating_sub(bytes.len() as u64), self.tx);
        }
        Ok(())
    }

    fn chunk(&self) -> usize {
        MAX_CHUNK as usize
    }
}
