//! What a small message costs the whole stack in heap allocations in the
//! steady state of a stream over real sockets (issue 21 item 2: "no
//! allocation per message on either side"): the sender hands batches of
//! borrowed 32-byte messages to `Streams::send_messages`, the receiver
//! reads them with `Streams::recv_messages_into` into one reused
//! `MessageBatch`. A counting global allocator counts every allocation in
//! the process (both endpoints, their drivers, tokio) while a measured
//! run of messages flows after a warm-up has grown every buffer.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use manyfold::{BatchItem, MessageBatch};
use tokio::time::timeout;

mod common;
use common::{config, pair, TEST_TIMEOUT};

#[global_allocator]
static GLOBAL: manyfold_testalloc::Counting = manyfold_testalloc::Counting;

const SIZE: usize = 32;
const BATCH: usize = 500;
const WARM: u32 = 40_000;
const MEASURED: u32 = 100_000;

/// Message `i`: its number, then bytes that depend on it.
fn fill(buf: &mut [u8], i: u32) {
    buf[..4].copy_from_slice(&i.to_be_bytes());
    for (k, b) in buf[4..].iter_mut().enumerate() {
        *b = (i as usize + k) as u8;
    }
}

/// Messages `start..start + n` in batches of borrowed slices of `buf`;
/// returns once the receiver has read them all.
async fn send(streams: &manyfold::Streams, got: &AtomicU64, buf: &mut [u8], start: u32, n: u32) {
    for first in (start..start + n).step_by(BATCH) {
        for (k, m) in buf.chunks_mut(SIZE).enumerate() {
            fill(m, first + k as u32);
        }
        streams.send_messages(1, buf.chunks(SIZE)).await.expect("send_messages");
    }
    while got.load(Ordering::Acquire) < u64::from(start + n) {
        tokio::task::yield_now().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_messages_cost_no_allocation_per_message_through_the_driver() {
    timeout(TEST_TIMEOUT, async {
        let (server, client) = pair(config(), config()).await;
        let addr = server.local_addr().unwrap();
        let got = Arc::new(AtomicU64::new(0));
        let got_r = got.clone();
        let receiver = tokio::spawn(async move {
            let conn = server.accept().await.expect("a connection");
            let streams = conn.streams();
            let mut batch = MessageBatch::with_capacity(1024, 1024 * SIZE);
            let mut want = [0u8; SIZE];
            let mut next = 0u32;
            while next < WARM + MEASURED {
                let n = streams.recv_messages_into(&mut batch, 1024).await.expect("recv_messages_into");
                assert!(n > 0, "the connection ended after {next} messages");
                for (stream, item) in batch.iter() {
                    assert_eq!(stream, 1);
                    fill(&mut want, next);
                    assert_eq!(item, BatchItem::Message(&want[..]), "message {next}");
                    next += 1;
                }
                got_r.store(u64::from(next), Ordering::Release);
            }
            (conn, server)
        });
        let conn = client.connect(addr).await.expect("connect");
        let streams = conn.streams();
        let mut buf = vec![0u8; SIZE * BATCH];
        send(&streams, &got, &mut buf, 0, WARM).await;
        manyfold_testalloc::record_sites_from_env();
        manyfold_testalloc::start();
        send(&streams, &got, &mut buf, WARM, MEASURED).await;
        let allocs = manyfold_testalloc::stop().allocs;
        manyfold_testalloc::print_sites(u64::from(MEASURED));
        let per = allocs as f64 / f64::from(MEASURED);
        let stats = conn.stats();
        println!(
            "allocations per {SIZE}-byte message, both ends with their drivers: {per:.4} ({} in all for {MEASURED}; {} datagrams sent in all)",
            allocs, stats.packets_sent
        );
        assert!(per < 0.1, "{per:.3} allocations per message");
        let (_conn, server) = receiver.await.unwrap();
        server.shutdown().await;
        client.shutdown().await;
    })
    .await
    .expect("test timed out");
}
