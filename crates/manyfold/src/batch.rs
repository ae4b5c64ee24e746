//! The send batch (issue 21: a session is cheap when its datagrams share
//! syscalls): single datagrams the engine produces for different peers —
//! a server's replies, acks and SYN-ACKs to many clients, which GSO
//! cannot combine — are gathered and handed to the kernel in one
//! `sendmmsg(2)` call where the OS has it (Linux, Android, FreeBSD,
//! NetBSD), one `sendmsg` each elsewhere. GSO batches to one peer still go
//! through quinn-udp one call each.
//!
//! The batch owns one buffer, allocated once: the datagrams are copied in
//! back to back, which costs a memcpy of a few KiB at most each (the
//! driver sends larger ones on their own), far less than the system call
//! it saves.

use std::io;
use std::net::SocketAddr;

use crate::socket::UdpIo;

/// Most datagrams in one batch: what one `sendmmsg` call takes (quinn-udp's
/// receive batch is as large, so that a batch of requests read in one call
/// can be answered in one).
pub(crate) const MAX_BATCH: usize = 32;

/// Datagrams waiting to be sent, in order; the front ones may already be
/// out when the kernel took only part of the last call.
#[derive(Debug)]
pub(crate) struct SendBatch {
    buf: Vec<u8>,
    /// (destination, start in `buf`, length) of each datagram.
    items: Vec<(SocketAddr, usize, usize)>,
    /// Items already sent (from the front).
    sent: usize,
    /// Datagrams sent and refused since [`SendBatch::take_counts`].
    counts: (u64, u64),
}

impl SendBatch {
    /// A batch for datagrams of at most `max_datagram` bytes.
    pub(crate) fn new(max_datagram: usize) -> Self {
        SendBatch {
            buf: Vec::with_capacity(MAX_BATCH * max_datagram),
            items: Vec::with_capacity(MAX_BATCH),
            sent: 0,
            counts: (0, 0),
        }
    }

    /// Whether nothing waits.
    pub(crate) fn is_empty(&self) -> bool {
        self.sent == self.items.len()
    }

    /// Whether no more datagrams may join before a flush.
    pub(crate) fn is_full(&self) -> bool {
        self.items.len() >= MAX_BATCH
    }

    /// Datagrams sent and refused since the last call.
    pub(crate) fn take_counts(&mut self) -> (u64, u64) {
        std::mem::take(&mut self.counts)
    }

    /// Adds one datagram for `to`.
    pub(crate) fn push(&mut self, to: SocketAddr, datagram: &[u8]) {
        let start = self.buf.len();
        self.buf.extend_from_slice(datagram);
        self.items.push((to, start, datagram.len()));
    }

    /// Sends what waits, in as few calls as the kernel allows. `sent` is
    /// told of each datagram the kernel took, `failed` of each it refused
    /// with an error other than would-block (lost, as on the wire: the
    /// engine's recovery repairs it), `multi` of each call that carried
    /// more than one, with their number. `Err(WouldBlock)`: the socket's
    /// buffer is full; the rest waits for the next flush.
    pub(crate) fn flush(
        &mut self,
        io: &UdpIo,
        mut sent: impl FnMut(SocketAddr, &[u8]),
        mut failed: impl FnMut(SocketAddr, &io::Error),
        mut multi: impl FnMut(usize),
    ) -> io::Result<()> {
        while !self.is_empty() {
            let pending = &self.items[self.sent..];
            let datagrams = pending.iter().map(|&(to, start, len)| (to, &self.buf[start..start + len]));
            match io.send_many(datagrams) {
                Ok(n) => {
                    if n > 1 {
                        multi(n);
                    }
                    for &(to, start, len) in &pending[..n] {
                        sent(to, &self.buf[start..start + len]);
                    }
                    self.sent += n;
                    self.counts.0 += n as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Err(e),
                Err(e) => {
                    // The first datagram was refused (e.g. EMSGSIZE, or an
                    // unreachable destination): drop it, go on with the rest.
                    failed(pending[0].0, &e);
                    self.sent += 1;
                    self.counts.1 += 1;
                }
            }
        }
        self.buf.clear();
        self.items.clear();
        self.sent = 0;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::socket::bind;

    /// Datagrams to three peers leave in one batch, each to its peer, in
    /// order, and the batch is empty and reusable afterwards.
    #[tokio::test]
    async fn a_batch_reaches_every_peer_in_order() {
        let io = UdpIo::new(bind("127.0.0.1:0".parse().expect("literal"), false).expect("bind")).expect("io");
        let peers: Vec<std::net::UdpSocket> =
            (0..3).map(|_| std::net::UdpSocket::bind("127.0.0.1:0").expect("bind peer")).collect();
        let mut batch = SendBatch::new(1452);
        for round in 0..2u8 {
            for (i, p) in peers.iter().enumerate() {
                for k in 0..2u8 {
                    batch.push(p.local_addr().expect("addr"), &[round, i as u8, k]);
                }
            }
            let mut out = Vec::new();
            loop {
                let mut calls = 0;
                let flushed = batch.flush(
                    &io,
                    |to, d| out.push((to, d.to_vec())),
                    |_, e| panic!("send failed: {e}"),
                    |_| calls += 1,
                );
                #[cfg(target_os = "linux")]
                if flushed.is_ok() {
                    assert!(calls >= 1, "one sendmmsg carried several datagrams");
                }
                match flushed {
                    Ok(()) => break,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => io.writable().await.expect("writable"),
                    Err(e) => panic!("flush failed: {e}"),
                }
            }
            assert!(batch.is_empty());
            assert_eq!(out.len(), 6);
            for (i, p) in peers.iter().enumerate() {
                p.set_read_timeout(Some(std::time::Duration::from_secs(5))).expect("timeout");
                let mut buf = [0u8; 16];
                for k in 0..2u8 {
                    let (n, from) = p.recv_from(&mut buf).expect("a datagram");
                    assert_eq!((&buf[..n], from), (&[round, i as u8, k][..], io.local_addr().expect("addr")));
                }
            }
        }
    }

    /// A datagram the kernel refuses (larger than UDP allows) is reported
    /// and dropped; the ones after it still go.
    #[tokio::test]
    async fn a_refused_datagram_is_dropped_and_the_rest_sent() {
        let io = UdpIo::new(bind("127.0.0.1:0".parse().expect("literal"), false).expect("bind")).expect("io");
        let peer = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind peer");
        let to = peer.local_addr().expect("addr");
        let mut batch = SendBatch::new(1452);
        batch.push(to, &vec![7u8; 70_000]);
        batch.push(to, b"after");
        let (mut sent, mut failed) = (0, 0);
        io.writable().await.expect("writable");
        loop {
            match batch.flush(&io, |_, _| sent += 1, |_, _| failed += 1, |_| {}) {
                Ok(()) => break,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => io.writable().await.expect("writable"),
                Err(e) => panic!("flush failed: {e}"),
            }
        }
        assert_eq!((sent, failed), (1, 1));
        peer.set_read_timeout(Some(std::time::Duration::from_secs(5))).expect("timeout");
        let mut buf = [0u8; 16];
        let (n, _) = peer.recv_from(&mut buf).expect("the datagram after");
        assert_eq!(&buf[..n], b"after");
    }
}
