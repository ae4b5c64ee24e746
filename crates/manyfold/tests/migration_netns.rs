//! A NAT rebinding on real sockets (spec §6.8), root only: in a network
//! namespace of its own, nftables rewrites the client's source port the
//! way a NAT maps it, and mid-transfer the mapping changes to another port
//! (the old one is forgotten). The server must validate the new port and
//! follow it; every byte must arrive. Only 127.0.0.1 is used, inside a
//! namespace the test creates and always deletes.

mod common;

use std::time::Duration;

use common::netns::{self, sh};
use common::*;
use manyfold::Endpoint;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The NAT's mapping: the client's port `client` appears as `mapped` to the
/// server, and the server's answers to `mapped` reach the client. Nothing
/// is mapped to any other port: answers to an old mapping go nowhere.
fn nat_rules(client: u16, server: u16, mapped: u16) -> String {
    format!(
        "flush ruleset\n\
         table ip nat_rebind {{\n\
           chain out {{\n\
             type filter hook output priority -300; policy accept;\n\
             udp sport {client} udp dport {server} udp sport set {mapped}\n\
             udp sport {server} udp dport {mapped} udp dport set {client}\n\
           }}\n\
         }}\n"
    )
}

#[test]
fn a_file_arrives_intact_when_a_nat_rebinds_the_client_mid_transfer() {
    if let Some(why) = netns::unavailable(&["ip", "nft"]) {
        eprintln!("skipped: {why}");
        return;
    }
    let outcome = netns::in_namespace(
        format!("mfmig{}", std::process::id()),
        |_| Ok(()),
        |ns| {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            rt.block_on(transfer_through_rebinding(ns))
        },
    );
    outcome.expect("the transfer");
}

async fn transfer_through_rebinding(ns: &str) -> Result<(), String> {
    const SIZE: usize = 24 << 20;
    let (server, client) = pair(config(), config()).await;
    let (c_port, s_port) = (client.local_addr().unwrap().port(), server.local_addr().unwrap().port());
    let nft =
        |mapped: u16| sh(&["ip", "netns", "exec", ns, "nft", "-f", "-"], Some(&nat_rules(c_port, s_port, mapped)));
    nft(40_001)?;
    let data = payload(9, SIZE);
    let expected = blake3::hash(&data);
    let receiver = tokio::spawn(async move {
        let mut conn = server.accept().await.expect("accepted");
        let mut got = Vec::with_capacity(SIZE);
        conn.read_to_end(&mut got).await.map_err(|e| format!("read: {e}"))?;
        let remote = conn.peer_addr();
        let stats = conn.stats();
        Ok::<_, String>((blake3::hash(&got), got.len(), remote, stats, server))
    });
    let mut conn = client.connect(server_addr(s_port)).await.map_err(|e| format!("connect: {e}"))?;
    let (first, rest) = data.split_at(SIZE / 4);
    conn.write_all(first).await.map_err(|e| format!("write: {e}"))?;
    // The NAT forgets the first mapping and maps the client anew.
    tokio::time::sleep(Duration::from_millis(20)).await;
    nft(40_002)?;
    conn.write_all(rest).await.map_err(|e| format!("write after the rebinding: {e:?}"))?;
    conn.close().await.map_err(|e| format!("close: {e} ({:?})", e.close_reason()))?;
    let (hash, len, remote, stats, server) = tokio::time::timeout(Duration::from_secs(60), receiver)
        .await
        .map_err(|_| "the receiver did not finish".to_string())?
        .map_err(|e| e.to_string())??;
    assert_eq!((len, hash), (SIZE, expected), "every byte arrives, in order");
    assert_eq!(stats.path.migrations, 1, "the server followed the client once: {:?}", stats.path);
    assert_eq!(remote.port(), 40_002, "the connection's peer is the new mapping");
    client.wait_idle().await;
    drop::<Endpoint>(server);
    Ok(())
}

fn server_addr(port: u16) -> std::net::SocketAddr {
    std::net::SocketAddr::from(([127, 0, 0, 1], port))
}
