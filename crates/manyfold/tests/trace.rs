//! The packet trace (RUSP's debug mode): with `Config::trace`, every
//! datagram is logged on target `manyfold::packet` at DEBUG.

mod common;

use std::io::Write;
use std::sync::{Arc, Mutex};

use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::timeout;

/// A `MakeWriter` collecting everything into one buffer.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<u8>>>);

impl Write for Capture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Capture {
    type Writer = Capture;
    fn make_writer(&'a self) -> Capture {
        self.clone()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trace_logs_every_datagram_with_its_header_fields() {
    let capture = Capture::default();
    tracing_subscriber::fmt()
        .with_writer(capture.clone())
        .with_ansi(false)
        .with_env_filter("manyfold::packet=debug")
        .init();
    timeout(TEST_TIMEOUT, async {
        let mut traced = config();
        traced.trace = true;
        let (server, client) = pair(config(), traced).await;
        let mut conn = client.connect(server.local_addr().unwrap()).await.unwrap();
        let mut incoming = server.accept().await.unwrap();
        conn.write_all(b"ping").await.unwrap();
        conn.close().await.unwrap();
        let mut got = Vec::new();
        incoming.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, b"ping");
        incoming.close().await.unwrap();
        let sent = client.driver_stats().datagrams_sent;
        let received = client.driver_stats().datagrams_received;

        let log = String::from_utf8(capture.0.lock().unwrap().clone()).unwrap();
        let lines: Vec<&str> = log.lines().filter(|l| l.contains("manyfold::packet")).collect();
        // Only the client traces: one line per datagram it sent or received.
        let out = lines.iter().filter(|l| l.contains(" -> ")).count() as u64;
        let inn = lines.iter().filter(|l| l.contains(" <- ")).count() as u64;
        assert_eq!((out, inn), (sent, received), "{log}");
        let syn = lines.first().expect("a traced datagram");
        assert!(syn.contains("flags=SYN ") && syn.contains("conn=00000000") && syn.contains("len=32"), "{syn}");
        assert!(lines.iter().any(|l| l.contains("flags=SYN|ACK|SCK|CKE")), "{log}");
        assert!(lines.iter().any(|l| l.contains("FIN") && l.contains(" -> ")), "{log}");
        for field in ["seq=", "ack=", "wnd=", "ms "] {
            assert!(lines.iter().all(|l| l.contains(field)), "{field} missing: {log}");
        }
    })
    .await
    .expect("test timed out");
}
