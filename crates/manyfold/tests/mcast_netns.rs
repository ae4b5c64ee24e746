//! Interrupting a multicast session on real sockets (spec §16.7), root
//! only: sender and receiver in a network namespace the test creates and
//! always deletes, multicast group 239.78.0.1 on its loopback device
//! (127.0.0.1 only). An interrupted sender's receiver learns it at once,
//! with the sender's code; an interrupted receiver's sender reports which
//! receiver left and why, at once — both well before any timeout.

use std::io;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::{Duration, Instant};

mod common;

use common::netns;
use manyfold::mcast::{
    receive_until, send_until, ErrorCode, McastNet, McastSink, ReceiveOutcome, SenderError, SenderView,
};
use manyfold_proto::mcast::{Announcement, ReceiverConfig, ReceiverOutcome, SenderConfig};

/// Runs `test` on a thread inside a fresh namespace whose loopback carries
/// multicast; `tag` names the namespace.
fn in_namespace<T: Send + 'static>(tag: &str, test: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    if let Some(why) = netns::unavailable(&["ip"]) {
        eprintln!("skipped: {why}");
        return None;
    }
    let setup = |ns: &str| {
        netns::sh(&["ip", "-n", ns, "link", "set", "lo", "multicast", "on", "up"], None)?;
        netns::sh(&["ip", "-n", ns, "route", "add", "239.78.0.0/16", "dev", "lo"], None)
    };
    Some(netns::in_namespace(format!("mfmc{tag}{}", std::process::id()), setup, |_| test()))
}

/// Keeps nothing (the session is interrupted long before the end, or the
/// test is about something else), and takes `check` to verify: a large
/// file on a slow disk. Like a file sink, it refuses data before the
/// session was described to it (the driver's contract).
#[derive(Default)]
struct Discard {
    check: Duration,
    described: bool,
}

impl McastSink for Discard {
    fn announced(&mut self, _: &Announcement) -> io::Result<()> {
        self.described = true;
        Ok(())
    }
    fn write_at(&mut self, _: u64, _: &[u8]) -> io::Result<()> {
        if !self.described {
            return Err(io::Error::other("data before the session was described"));
        }
        Ok(())
    }
    fn read_at(&mut self, _: u64, out: &mut [u8]) -> io::Result<usize> {
        out.fill(0);
        Ok(out.len())
    }
    fn verify(&mut self, _: &Announcement) -> io::Result<bool> {
        std::thread::sleep(self.check);
        Ok(true)
    }
}

fn net(port: u16) -> McastNet {
    let mut net = McastNet::new(SocketAddrV4::new(Ipv4Addr::new(239, 78, 0, 1), port));
    net.iface = Some("lo".into());
    net
}

/// A sparse 4 GiB source (zeros): the transfer outlasts the test.
fn source(tag: &str) -> (std::fs::File, std::path::PathBuf) {
    let path = std::env::temp_dir().join(format!("mf-mcast-{tag}-{}", std::process::id()));
    let file = std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&path).unwrap();
    file.set_len(4 << 30).expect("set_len");
    (file, path)
}

fn info() -> Announcement {
    Announcement {
        size: Some(4 << 30),
        block: 0,
        artp_max_us: 0,
        repair_interval_ms: 0,
        fec_k: 0,
        hash: Some([9; 32]),
        name: "big.bin".into(),
    }
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime")
}

#[test]
fn an_interrupted_sender_ends_its_receiver_at_once_with_its_code() {
    let got = in_namespace("s", || {
        let (file, path) = source("s");
        let out = rt().block_on(async move {
            let net = net(7031);
            let rx_net = net.clone();
            let receiver = async move {
                let cfg = ReceiverConfig { network: 1, ..ReceiverConfig::default() };
                receive_until(
                    &rx_net,
                    cfg,
                    &mut Discard::default(),
                    Some(Duration::from_secs(20)),
                    std::future::pending(),
                    |_| {},
                )
                .await
                .map(|(o, _)| (o, Instant::now()))
            };
            // Interrupted 300 ms into the data phase.
            let (started, mut started_rx) = tokio::sync::watch::channel(false);
            let abort = async move {
                let _ = started_rx.wait_for(|s| *s).await;
                tokio::time::sleep(Duration::from_millis(300)).await;
                ErrorCode::INTERRUPTED
            };
            let cfg = SenderConfig { min_receivers: 1, ..SenderConfig::default() };
            let on_event = |e: &manyfold_proto::mcast::SenderEvent| {
                if *e == manyfold_proto::mcast::SenderEvent::DataStarted {
                    let _ = started.send(true);
                }
            };
            let sender = async move {
                let view: SenderView = send_until(&net, cfg, info(), file, None, abort, on_event, |_| {}).await?;
                Ok::<_, io::Error>((view, Instant::now()))
            };
            let both = async { tokio::join!(sender, receiver) };
            let (sent, received) = tokio::time::timeout(Duration::from_secs(30), both)
                .await
                .map_err(|_| io::Error::other("the session never ended"))?;
            let ((view, aborted_at), (outcome, ended_at)) = (sent?, received?);
            Ok::<_, io::Error>((view, outcome, ended_at.saturating_duration_since(aborted_at)))
        });
        let _ = std::fs::remove_file(path);
        out
    });
    let Some(got) = got else { return };
    let (view, outcome, after) = got.expect("the session");
    assert_eq!(view.failed, Some(SenderError::Aborted(ErrorCode::INTERRUPTED)));
    assert_eq!(outcome, ReceiveOutcome::Ended { code: Some(ErrorCode::INTERRUPTED.0) }, "the sender's code");
    assert!(after < Duration::from_secs(1), "the receiver knew after {after:?}, not a 30 s sender timeout");
}

#[test]
fn an_interrupted_receiver_is_reported_by_its_sender_at_once() {
    let got = in_namespace("r", || {
        let (file, path) = source("r");
        let out = rt().block_on(async move {
            let net = net(7032);
            let rx_net = net.clone();
            let (registered, mut registered_rx) = tokio::sync::watch::channel(false);
            let receiver = async move {
                let cfg = ReceiverConfig { network: 1, ..ReceiverConfig::default() };
                // Interrupted 300 ms after it started receiving data.
                let abort = async move {
                    let _ = registered_rx.wait_for(|s| *s).await;
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    ErrorCode::INTERRUPTED
                };
                let r =
                    receive_until(&rx_net, cfg, &mut Discard::default(), Some(Duration::from_secs(20)), abort, |_| {})
                        .await;
                (r.map(|_| ()), Instant::now())
            };
            let cfg = SenderConfig { min_receivers: 1, ..SenderConfig::default() };
            let on_event = |e: &manyfold_proto::mcast::SenderEvent| {
                if *e == manyfold_proto::mcast::SenderEvent::DataStarted {
                    let _ = registered.send(true);
                }
            };
            let sender = async move {
                let view = send_until(&net, cfg, info(), file, None, std::future::pending(), on_event, |_| {}).await?;
                Ok::<_, io::Error>((view, Instant::now()))
            };
            let both = async { tokio::join!(sender, receiver) };
            let (sent, (left, left_at)) = tokio::time::timeout(Duration::from_secs(30), both)
                .await
                .map_err(|_| io::Error::other("the session never ended"))?;
            let (view, sender_done) = sent?;
            Ok::<_, io::Error>((view, left, sender_done.saturating_duration_since(left_at)))
        });
        let _ = std::fs::remove_file(path);
        out
    });
    let Some(got) = got else { return };
    let (view, left, after) = got.expect("the session");
    let e = left.expect_err("an interrupted receive fails");
    assert_eq!(e.kind(), io::ErrorKind::Interrupted, "{e}");
    assert_eq!(view.receivers.len(), 1);
    assert_eq!(view.receivers[0].left, Some(ErrorCode::INTERRUPTED), "the sender says why it left");
    assert_eq!(view.failed, Some(SenderError::AllDropped), "its only receiver left");
    assert!(after < Duration::from_secs(1), "the sender knew after {after:?}, not a 5 s receiver timeout");
}

#[test]
fn a_receiver_checking_its_file_longer_than_the_senders_patience_stays_in_the_session() {
    let got = in_namespace("v", || {
        let path = std::env::temp_dir().join(format!("mf-mcast-v-{}", std::process::id()));
        let file = std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&path).unwrap();
        file.set_len(1 << 20).expect("set_len");
        let net = net(7033);
        let rx_net = net.clone();
        // Its own thread, as another host's receiver would be: the check
        // blocks the receiver's thread, not the sender's.
        let receiver = std::thread::spawn(move || {
            // The check takes three times the sender's receiver_timeout;
            // the receiver's STATUS keep-alives come thrice as often.
            let mut sink = Discard { check: Duration::from_secs(3), ..Discard::default() };
            let cfg =
                ReceiverConfig { network: 1, status_interval: Duration::from_millis(300), ..ReceiverConfig::default() };
            rt().block_on(receive_until(
                &rx_net,
                cfg,
                &mut sink,
                Some(Duration::from_secs(20)),
                std::future::pending(),
                |_| {},
            ))
            .map(|(o, _)| o)
        });
        let cfg =
            SenderConfig { min_receivers: 1, receiver_timeout: Duration::from_secs(1), ..SenderConfig::default() };
        let info = Announcement { size: Some(1 << 20), name: "small.bin".into(), ..info() };
        let sent = rt().block_on(async move {
            let sender = send_until(&net, cfg, info, file, None, std::future::pending(), |_| {}, |_| {});
            tokio::time::timeout(Duration::from_secs(30), sender)
                .await
                .map_err(|_| io::Error::other("the session never ended"))?
        });
        let _ = std::fs::remove_file(path);
        (sent, receiver.join().expect("the receiver's thread"))
    });
    let Some((sent, received)) = got else { return };
    let view = sent.expect("the sender");
    let outcomes: Vec<_> = view.receivers.iter().map(|r| r.outcome).collect();
    assert_eq!(outcomes, [ReceiverOutcome::Completed], "the sender's view of its receiver");
    assert_eq!(view.failed, None);
    assert_eq!(received.expect("the receiver"), ReceiveOutcome::Completed);
}
