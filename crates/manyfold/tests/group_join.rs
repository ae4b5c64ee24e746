//! Late joiners of a group over real sockets on 127.0.0.1 (spec §14.7):
//! `Group::join` reports where a peer came in or why it could not, and a
//! close while a peer is still joining waits for it instead of dropping it.

mod common;

use common::*;
use std::time::Duration;

use manyfold::{Endpoint, FaultConfig, GroupConfig, GroupError, GroupEvent, Unreachable};
use tokio::io::AsyncReadExt;
use tokio::time::timeout;

async fn listening() -> Endpoint {
    let ep = Endpoint::bind(localhost(), config()).await.expect("bind");
    ep.listen();
    ep
}

/// Accepts one connection and reads it to the end.
async fn read_all(ep: Endpoint) -> std::io::Result<Vec<u8>> {
    let mut conn = ep.accept().await.expect("a connection");
    let mut got = Vec::new();
    conn.read_to_end(&mut got).await?;
    Ok(got)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_close_right_after_add_destination_still_delivers_to_the_joiner() {
    timeout(TEST_TIMEOUT, async {
        let (first, late) = (listening().await, listening().await);
        let (first_addr, late_addr) = (first.local_addr().unwrap(), late.local_addr().unwrap());
        let r0 = tokio::spawn(read_all(first));
        let r1 = tokio::spawn(read_all(late));
        // 20 ms on each datagram the sender sends: the join takes a while.
        let mut slow = config();
        slow.faults = FaultConfig { delay: Duration::from_millis(20), ..FaultConfig::default() };
        let sender = Endpoint::bind(localhost(), slow).await.unwrap();
        let (group, _) = sender.group(&[first_addr], GroupConfig::default()).await.unwrap();
        group.send(&b"before"[..]).await.unwrap();
        let dest = group.add_destination(late_addr).unwrap();
        // Its handshake is under way: the close waits for it.
        group.close().await.unwrap();
        assert_eq!(r0.await.unwrap().unwrap(), b"before");
        assert_eq!(r1.await.unwrap().unwrap(), b"", "the joiner sees a clean end, not an abort");
        let mut events = Vec::new();
        while let Some(ev) = group.try_event() {
            events.push(ev);
        }
        assert!(
            events.iter().any(|e| matches!(e, GroupEvent::PeerJoined { peer, first_msg: 1, .. } if *peer == dest.peer)),
            "the join was reported: {events:?}"
        );
        sender.wait_idle().await;
    })
    .await
    .expect("test timed out");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn join_reports_the_first_message_the_peer_receives() {
    timeout(TEST_TIMEOUT, async {
        let (first, late) = (listening().await, listening().await);
        let (first_addr, late_addr) = (first.local_addr().unwrap(), late.local_addr().unwrap());
        let r1 = tokio::spawn(read_all(late));
        let _r0 = tokio::spawn(read_all(first));
        let sender = Endpoint::bind(localhost(), config()).await.unwrap();
        let (group, _) = sender.group(&[first_addr], GroupConfig::default()).await.unwrap();
        for _ in 0..3 {
            group.send(&b"old "[..]).await.unwrap();
        }
        let joined = group.join(late_addr).await.expect("joined");
        assert_eq!(joined.first_msg, 3);
        group.send(&b"new"[..]).await.unwrap();
        // The event is still there for whoever watches events.
        assert!(matches!(group.next_event().await, Some(GroupEvent::PeerJoined { first_msg: 3, .. })));
        group.close().await.unwrap();
        assert_eq!(r1.await.unwrap().unwrap(), b"new");
    })
    .await
    .expect("test timed out");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn join_to_a_port_where_nothing_listens_fails_naming_it() {
    timeout(TEST_TIMEOUT, async {
        let first = listening().await;
        let first_addr = first.local_addr().unwrap();
        let _r0 = tokio::spawn(read_all(first));
        // Bound but not listening: it refuses.
        let closed = Endpoint::bind(localhost(), config()).await.unwrap();
        let closed_addr = closed.local_addr().unwrap();
        let sender = Endpoint::bind(localhost(), config()).await.unwrap();
        let (group, _) = sender.group(&[first_addr], GroupConfig::default()).await.unwrap();
        match group.join(closed_addr).await {
            Err(GroupError::Unreachable(list)) => assert_eq!(list, vec![(closed_addr, Unreachable::Refused)]),
            other => panic!("expected Unreachable, got {other:?}"),
        }
        group.close().await.unwrap();
    })
    .await
    .expect("test timed out");
}
