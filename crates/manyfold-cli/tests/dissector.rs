//! The Wireshark dissector `tools/wireshark/manyfold.lua` (with its
//! multicast half, `manyfold_mcast.lua`, loaded from beside it) against real
//! traffic: tshark captures manyfold transfers (a lossy send/recv, an
//! encrypted one (spec §19), a group send, request/reply sessions on
//! 127.0.0.1, and a multicast session with loss in network namespaces),
//! then reads each capture back through the
//! dissector. Every captured datagram must be decoded as manyfold with a
//! good CRC32C, carry the fields of its packet type, raise no malformed
//! packet and no expert warning or error, and (for connections) agree field
//! by field with what the sending process traced (`--trace`). A crafted
//! capture checks each field's value and that exactly the broken datagrams
//! are flagged, not crashed on, both with `-X lua_script:` and with the
//! files copied into a plugins folder.
//!
//! Capturing needs root: without it the tests say so and pass without
//! running. tshark is required when root: `.ci/run` installs it.

mod common;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use common::netns::Lab;
use common::{manyfold, samplegen, Running};

const LIMIT: Duration = Duration::from_secs(90);
/// The dissector's directory: manyfold.lua, which loads manyfold_mcast.lua
/// from beside it.
const LUA_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tools/wireshark");
const LUA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tools/wireshark/manyfold.lua");
/// The files a plugins folder needs (tools/wireshark/README.md).
const LUA_FILES: &[&str] = &["manyfold.lua", "manyfold_mcast.lua"];

/// Expert severities as tshark prints `_ws.expert.severity` (PI_WARN, PI_ERROR).
const SEVERITY_WARN: u64 = 0x0060_0000;

fn is_root() -> bool {
    Command::new("id").arg("-u").output().is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

fn has_tshark() -> bool {
    Command::new("tshark").arg("-v").output().is_ok_and(|o| o.status.success())
}

/// Whether a test that captures can run: as root, with tshark (required).
fn can_capture() -> bool {
    if !is_root() {
        eprintln!("skipped: not root: capturing packets needs it");
        return false;
    }
    assert!(has_tshark(), "tshark is missing; .ci/run installs it (apt-get install tshark)");
    true
}

/// A running tshark writing a capture file; stopped (or killed) on drop.
struct Capture {
    child: Option<Child>,
    stderr: Option<thread::JoinHandle<String>>,
    path: PathBuf,
}

impl Capture {
    /// Starts capturing `filter` on `iface` (inside namespace `netns` if
    /// given) into `path`, and waits until tshark says it is capturing.
    fn start(netns: Option<&str>, iface: &str, filter: &str, path: &Path) -> Capture {
        let mut cmd = match netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns, "tshark"]);
                c
            }
            None => Command::new("tshark"),
        };
        // -a duration bounds the capture even if nothing stops it.
        cmd.args(["-i", iface, "-f", filter, "-B", "64", "-a", "duration:240", "-q", "-w"]).arg(path);
        cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("spawn tshark");
        let err = child.stderr.take().expect("piped stderr");
        let (tx, rx) = mpsc::channel();
        let stderr = thread::spawn(move || {
            let mut all = String::new();
            for line in BufReader::new(err).lines() {
                let Ok(line) = line else { break };
                all.push_str(&line);
                all.push('\n');
                let _ = tx.send(line);
            }
            all
        });
        let mut cap = Capture { child: Some(child), stderr: Some(stderr), path: path.to_path_buf() };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(line) if line.contains("Capturing on") => break,
                Ok(_) => continue,
                Err(_) => {
                    let err = cap.finish();
                    panic!("tshark did not start capturing on {iface}:\n{err}");
                }
            }
        }
        // tshark says "Capturing on" as it starts dumpcap, before dumpcap
        // has the interface open (200 ms later here, seconds under load).
        // dumpcap writes the file's header once its filter is attached:
        // until then packets pass uncaptured.
        loop {
            if std::fs::metadata(path).is_ok_and(|m| m.len() > 0) {
                break;
            }
            if Instant::now() >= deadline {
                let err = cap.finish();
                panic!("tshark said it was capturing on {iface} but wrote no file header in 30 s:\n{err}");
            }
            thread::sleep(Duration::from_millis(20));
        }
        thread::sleep(Duration::from_millis(100));
        cap
    }

    /// Stops the capture (SIGINT, so the file is complete) and returns
    /// tshark's stderr.
    fn finish(&mut self) -> String {
        let Some(mut child) = self.child.take() else { return String::new() };
        let _ = Command::new("kill").args(["-INT", &child.id().to_string()]).status();
        let deadline = Instant::now() + Duration::from_secs(20);
        while child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(50));
        }
        let _ = child.kill();
        let _ = child.wait();
        self.stderr.take().map(|h| h.join().unwrap_or_default()).unwrap_or_default()
    }

    /// Stops the capture; returns whether tshark reported dropping packets.
    fn stop(mut self) -> bool {
        thread::sleep(Duration::from_millis(300));
        let err = self.finish();
        assert!(self.path.exists(), "no capture file written:\n{err}");
        err.lines().any(|l| l.contains("dropped") && l.split_whitespace().next().is_some_and(|n| n != "0"))
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The fields read back from every frame.
const FIELDS: &[&str] = &[
    "frame.number",
    "frame.protocols",
    "udp.srcport",
    "udp.dstport",
    "_ws.malformed",
    "_ws.expert.severity",
    "_ws.expert.message",
    "manyfold.packet",
    "manyfold.type",
    "manyfold.flags",
    "manyfold.length",
    "manyfold.crc",
    "manyfold.crc.status",
    "manyfold.conn_id",
    "manyfold.seq",
    "manyfold.ack",
    "manyfold.window",
    "manyfold.sack.count",
    "manyfold.sack.start",
    "manyfold.sack.end",
    "manyfold.sack.echo",
    "manyfold.sack.echo.seq",
    "manyfold.sack.echo.count",
    "manyfold.params.conn_id",
    "manyfold.params.max_datagram",
    "manyfold.params.features.protected",
    "manyfold.params.features.ack_frequency",
    "manyfold.params.features.tx_echo",
    "manyfold.params.features.transmission",
    "manyfold.handshake.length",
    "manyfold.protected.pn",
    "manyfold.protected.payload_len",
    "manyfold.protected.tag",
    "manyfold.cookie.mac",
    "manyfold.error",
    "manyfold.chunk.kind",
    "manyfold.chunk.stream",
    "manyfold.chunk.offset",
    "manyfold.chunk.length",
    "manyfold.chunk.code",
    "manyfold.chunk.max",
    "manyfold.chunk.start",
    "manyfold.chunk.end",
    "manyfold.mc.session",
    "manyfold.mc.next_sn",
    "manyfold.mc.total",
    "manyfold.mc.phase",
    "manyfold.mc.size",
    "manyfold.mc.block_size",
    "manyfold.mc.fec_k",
    "manyfold.mc.hash",
    "manyfold.mc.name",
    "manyfold.mc.network",
    "manyfold.mc.client",
    "manyfold.mc.from_sn",
    "manyfold.mc.sn",
    "manyfold.mc.lwsn",
    "manyfold.mc.window",
    "manyfold.mc.repair",
    "manyfold.mc.data",
    "manyfold.mc.ranges.count",
    "manyfold.mc.highest",
    "manyfold.mc.round",
    "manyfold.mc.held",
    "manyfold.mc.block",
    "manyfold.mc.index",
    "manyfold.mc.k",
    "manyfold.mc.shard",
    "manyfold.mc.pattern",
    "manyfold.mc.sender_key",
    "manyfold.mc.noise",
    "manyfold.mc.source",
    "manyfold.mc.seq",
    "manyfold.mc.epoch",
    "manyfold.mc.group",
    "manyfold.mc.auto_group",
    "manyfold.mc.behind",
    "manyfold.mc.signatures.version",
    "manyfold.mc.signatures.count",
    "manyfold.mc.signature.block",
    "manyfold.mc.signature.losses",
    "manyfold.reason",
    "manyfold.reason.length",
    "manyfold.ackfreq.threshold",
    "manyfold.ackfreq.seq",
    "manyfold.ackfreq.max_delay",
    "manyfold.resent.count",
];

/// One frame of a capture: each field's occurrences, in order (a frame
/// holds several datagrams when the sender used UDP GSO).
struct Frame {
    values: HashMap<&'static str, Vec<String>>,
}

impl Frame {
    fn all(&self, field: &str) -> &[String] {
        self.values.get(field).map_or(&[], |v| v.as_slice())
    }

    fn one(&self, field: &str) -> &str {
        self.all(field).first().map_or("", |s| s.as_str())
    }

    fn number(&self) -> &str {
        self.one("frame.number")
    }

    /// Packet kinds of its datagrams; multicast ones (types 1-9) prefixed "mc ".
    fn kinds(&self) -> Vec<String> {
        let types = self.all("manyfold.type");
        let mcast = |t: &String| t != "0" && t != "10";
        self.all("manyfold.packet")
            .iter()
            .enumerate()
            .map(|(i, p)| if types.get(i).is_some_and(mcast) { format!("mc {p}") } else { p.clone() })
            .collect()
    }
}

/// How tshark gets the dissector.
#[derive(Clone, Copy)]
enum Load<'a> {
    /// `-X lua_script:…/manyfold.lua`, which finds its multicast half
    /// (`manyfold_mcast.lua`) beside it.
    Script,
    /// From the personal plugins folder of a home directory (both files
    /// copied there, as tools/wireshark/README.md says).
    Plugins { home: &'a Path },
}

/// Reads `pcap` through the dissector, with `extra` tshark arguments.
fn dissect(pcap: &Path, extra: &[&str]) -> Vec<Frame> {
    dissect_loaded(pcap, extra, Load::Script)
}

/// Reads `pcap` through the dissector loaded as `load` says.
fn dissect_loaded(pcap: &Path, extra: &[&str], load: Load) -> Vec<Frame> {
    let mut cmd = Command::new("tshark");
    cmd.args(["-n", "-r"]).arg(pcap);
    match load {
        Load::Script => {
            cmd.arg("-X").arg(format!("lua_script:{LUA}"));
        }
        Load::Plugins { home } => {
            cmd.env("HOME", home).env_remove("XDG_CONFIG_HOME").env_remove("WIRESHARK_PLUGIN_DIR");
        }
    }
    // The heuristic claims datagrams on any port; tried first so that no
    // port-based dissector of another protocol gets an ephemeral port.
    cmd.args(["-o", "udp.try_heuristic_first:TRUE"]).args(extra);
    cmd.args(["-T", "fields", "-E", "occurrence=a", "-E", "aggregator=;", "-E", "separator=/t"]);
    for f in FIELDS {
        cmd.args(["-e", f]);
    }
    let out = run_bounded(cmd, Duration::from_secs(180));
    let stderr: Vec<&str> = out.stderr.lines().filter(|l| !l.contains("Running as user")).collect();
    assert!(stderr.is_empty(), "tshark complained reading {}:\n{}", pcap.display(), stderr.join("\n"));
    assert!(out.status.success(), "tshark failed on {}:\n{}", pcap.display(), out.stderr);
    out.stdout
        .lines()
        .map(|line| {
            let values = FIELDS
                .iter()
                .zip(line.split('\t').chain(std::iter::repeat("")))
                .map(|(f, v)| (*f, if v.is_empty() { Vec::new() } else { v.split(';').map(str::to_string).collect() }))
                .collect();
            Frame { values }
        })
        .collect()
}

/// Runs a command to completion within `limit` (killed after it).
fn run_bounded(mut cmd: Command, limit: Duration) -> common::Output {
    cmd.stdin(Stdio::null());
    Running::spawn(cmd).wait(limit)
}

/// Fields each packet kind must carry (beyond the header's own).
fn required(kind: &str) -> &'static [&'static str] {
    const SEGMENT: &[&str] = &["manyfold.conn_id", "manyfold.seq", "manyfold.ack", "manyfold.window"];
    match kind {
        "SYN" => &["manyfold.conn_id", "manyfold.seq", "manyfold.params.conn_id", "manyfold.params.max_datagram"],
        "SYN-ACK" => &["manyfold.conn_id", "manyfold.ack", "manyfold.params.conn_id", "manyfold.cookie.mac"],
        "COOKIE-ECHO" => &["manyfold.conn_id", "manyfold.ack", "manyfold.cookie.mac"],
        "DATA" => &["manyfold.conn_id", "manyfold.chunk.kind", "manyfold.chunk.stream", "manyfold.chunk.offset"],
        "CONTROL" => &["manyfold.conn_id", "manyfold.chunk.kind"],
        "ABORT" | "REFUSAL" => &["manyfold.conn_id", "manyfold.error"],
        "HANDSHAKE" => &["manyfold.conn_id", "manyfold.chunk.kind", "manyfold.handshake.length"],
        "PROTECTED" => &[
            "manyfold.conn_id",
            "manyfold.seq",
            "manyfold.ack",
            "manyfold.window",
            "manyfold.protected.pn",
            "manyfold.protected.payload_len",
            "manyfold.protected.tag",
        ],
        "FIN" | "ACK" | "PROBE" | "RST" => SEGMENT,
        "mc ANNOUNCE" => &[
            "manyfold.mc.session",
            "manyfold.mc.next_sn",
            "manyfold.mc.total",
            "manyfold.mc.phase",
            "manyfold.mc.size",
            "manyfold.mc.block_size",
            "manyfold.mc.fec_k",
            "manyfold.mc.hash",
            "manyfold.mc.name",
        ],
        "mc REGISTER" => &["manyfold.mc.session", "manyfold.mc.network", "manyfold.mc.client"],
        "mc REGISTER+ACK" => &["manyfold.mc.session", "manyfold.mc.client", "manyfold.mc.from_sn"],
        "mc GROUP" => &["manyfold.mc.session", "manyfold.mc.epoch", "manyfold.mc.group", "manyfold.mc.client"],
        "mc DATA" => {
            &["manyfold.mc.session", "manyfold.mc.sn", "manyfold.mc.lwsn", "manyfold.mc.window", "manyfold.mc.data"]
        }
        "mc ACK" => &["manyfold.mc.session", "manyfold.mc.client", "manyfold.mc.lwsn", "manyfold.mc.ranges.count"],
        "mc NACK" => &["manyfold.mc.session", "manyfold.mc.client", "manyfold.mc.highest", "manyfold.mc.ranges.count"],
        "mc REPAIR" => &["manyfold.mc.session", "manyfold.mc.client", "manyfold.mc.round", "manyfold.mc.ranges.count"],
        "mc STATUS" | "mc STATUS+ACK" => &["manyfold.mc.session", "manyfold.mc.client", "manyfold.mc.held"],
        "mc END" => &["manyfold.mc.session", "manyfold.mc.total"],
        "mc PARITY" => {
            &["manyfold.mc.session", "manyfold.mc.block", "manyfold.mc.index", "manyfold.mc.k", "manyfold.mc.shard"]
        }
        "mc INVITE" => &["manyfold.mc.session", "manyfold.mc.pattern", "manyfold.mc.sender_key"],
        "mc REGISTER+CKE" | "mc REGISTER+ACK+CKE" => {
            &["manyfold.mc.session", "manyfold.mc.network", "manyfold.mc.client", "manyfold.mc.noise"]
        }
        "mc SEALED" => &[
            "manyfold.mc.session",
            "manyfold.mc.seq",
            "manyfold.mc.source",
            "manyfold.protected.pn",
            "manyfold.protected.payload_len",
            "manyfold.protected.tag",
        ],
        other => panic!("the dissector named an unknown packet kind {other:?}"),
    }
}

/// Checks every frame of a capture of manyfold traffic and counts the
/// packet kinds seen.
fn check_all_dissected(frames: &[Frame]) -> BTreeMap<String, usize> {
    assert!(!frames.is_empty(), "nothing was captured");
    let mut seen = BTreeMap::new();
    for fr in frames {
        let n = fr.number();
        assert!(
            fr.one("frame.protocols").ends_with(":udp:manyfold"),
            "frame {n} not dissected as manyfold: {}",
            fr.one("frame.protocols")
        );
        assert!(fr.all("_ws.malformed").is_empty(), "frame {n} is malformed: {:?}", fr.all("_ws.expert.message"));
        for (sev, msg) in fr.all("_ws.expert.severity").iter().zip(fr.all("_ws.expert.message")) {
            let sev: u64 = sev.parse().unwrap_or(u64::MAX);
            assert!(sev < SEVERITY_WARN, "frame {n}: expert warning or error: {msg}");
        }
        let kinds = fr.kinds();
        assert!(!kinds.is_empty(), "frame {n}: no manyfold.packet");
        let crcs = fr.all("manyfold.crc.status");
        assert_eq!(crcs.len(), kinds.len(), "frame {n}: one CRC status per datagram");
        assert!(crcs.iter().all(|c| c == "1"), "frame {n}: CRC32C not verified good: {crcs:?}");
        let mut need: BTreeMap<&str, usize> = BTreeMap::new();
        for k in &kinds {
            for f in required(k) {
                *need.entry(f).or_default() += 1;
            }
            *seen.entry(k.clone()).or_default() += 1;
        }
        // A SACK block on any plain segment (a protected one's is encrypted):
        // its count, as many ranges as it counts, and an echo where its ECHO
        // bit is set (spec §3.3.1, §5.4.2). "SACK": one with ranges.
        let types = fr.all("manyfold.type");
        let sacks =
            fr.all("manyfold.flags").iter().zip(types).filter(|(f, t)| *t == "0" && flags_value(f) & 0x40 != 0).count();
        let counts: Vec<usize> =
            fr.all("manyfold.sack.count").iter().map(|c| c.parse().unwrap_or_else(|_| panic!("count {c:?}"))).collect();
        assert_eq!(counts.len(), sacks, "frame {n}: one SACK count per SACK block");
        let ranges: usize = counts.iter().sum();
        for f in ["manyfold.sack.start", "manyfold.sack.end"] {
            assert_eq!(fr.all(f).len(), ranges, "frame {n}: {f} once per range counted");
        }
        let echoes = fr.all("manyfold.sack.echo").iter().filter(|e| is_set(e)).count();
        for f in ["manyfold.sack.echo.seq", "manyfold.sack.echo.count"] {
            assert_eq!(fr.all(f).len(), echoes, "frame {n}: {f} once per ECHO bit");
        }
        let resent = fr.all("manyfold.resent.count").len();
        for (k, times) in [("SACK", counts.iter().filter(|c| **c > 0).count()), ("ECHO", echoes), ("RESENT", resent)] {
            if times > 0 {
                *seen.entry(k.to_string()).or_default() += times;
            }
        }
        for (f, want) in need {
            let got = fr.all(f).len();
            assert!(got >= want, "frame {n} ({kinds:?}): {f} {got} times, want at least {want}");
        }
    }
    seen
}

/// A boolean field's value as tshark prints it set (1, or True in newer
/// versions).
fn is_set(v: &str) -> bool {
    v == "1" || v == "True"
}

fn flags_value(s: &str) -> u8 {
    u8::from_str_radix(s.trim_start_matches("0x"), 16).unwrap_or_else(|_| panic!("flags {s:?}"))
}

/// A segment as the trace prints it and as the dissector decodes it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Seg {
    flags: u8,
    conn: u32,
    seq: u32,
    ack: u32,
    window: u32,
    len: usize,
}

/// Segments a process traced (`--trace`): (sent, received). Sends the
/// emulated loss dropped (`-x`) never reached the socket; receives it
/// dropped (`x-`) did.
fn traced(stderr: &str) -> (Vec<Seg>, Vec<Seg>) {
    let (mut sent, mut received) = (Vec::new(), Vec::new());
    for line in stderr.lines().filter(|l| l.contains("manyfold::packet")) {
        let words: Vec<&str> = line.split_whitespace().collect();
        let Some(dir) = words.iter().find(|w| ["->", "-x", "<-", "x-"].contains(w)) else { continue };
        let field = |key: &str| {
            words.iter().find_map(|w| w.strip_prefix(key)).unwrap_or_else(|| panic!("no {key} in trace line {line:?}"))
        };
        let flags = field("flags=")
            .split('|')
            .map(|name| match name {
                "SYN" => 0x01,
                "ACK" => 0x02,
                "FIN" => 0x04,
                "RST" => 0x08,
                "KLV" => 0x10,
                "ERR" => 0x20,
                "SCK" => 0x40,
                "CKE" => 0x80,
                "-" => 0,
                other => panic!("flag {other:?} in {line:?}"),
            })
            .fold(0u8, |a, b| a | b);
        let seg = Seg {
            flags,
            conn: u32::from_str_radix(field("conn="), 16).expect("conn"),
            seq: field("seq=").parse().expect("seq"),
            ack: field("ack=").parse().expect("ack"),
            window: field("wnd=").parse().expect("wnd"),
            len: field("len=").parse().expect("len"),
        };
        match *dir {
            "->" => sent.push(seg),
            "<-" | "x-" => received.push(seg),
            _ => {}
        }
    }
    (sent, received)
}

/// The captured segments, split by whether they come from `server_ports`.
fn captured(frames: &[Frame], server_ports: &BTreeSet<String>) -> (Vec<Seg>, Vec<Seg>) {
    let (mut from_client, mut to_client) = (Vec::new(), Vec::new());
    for fr in frames {
        let n = fr.number();
        let col = |f: &str| fr.all(f).to_vec();
        let (flags, conn, seq, ack, window, len) = (
            col("manyfold.flags"),
            col("manyfold.conn_id"),
            col("manyfold.seq"),
            col("manyfold.ack"),
            col("manyfold.window"),
            col("manyfold.length"),
        );
        assert!(
            [&conn, &seq, &ack, &window, &len].iter().all(|c| c.len() == flags.len()),
            "frame {n}: header fields not one per datagram"
        );
        for i in 0..flags.len() {
            let seg = Seg {
                flags: flags_value(&flags[i]),
                conn: u32::from_str_radix(conn[i].trim_start_matches("0x"), 16).expect("conn id"),
                seq: seq[i].parse().expect("seq"),
                ack: ack[i].parse().expect("ack"),
                window: window[i].parse().expect("window"),
                len: 24 + len[i].parse::<usize>().expect("length"),
            };
            if server_ports.contains(fr.one("udp.srcport")) {
                to_client.push(seg);
            } else {
                from_client.push(seg);
            }
        }
    }
    (from_client, to_client)
}

/// The dissector decoded exactly what the client process traced: every
/// datagram it sent (and no other), and every one it received.
fn check_against_trace(frames: &[Frame], server_ports: &BTreeSet<String>, client_stderr: &str, capture_dropped: bool) {
    let (mut sent, mut received) = traced(client_stderr);
    let (mut from_client, to_client) = captured(frames, server_ports);
    assert!(!sent.is_empty() && !received.is_empty(), "no packets traced:\n{client_stderr}");
    sent.sort();
    from_client.sort();
    if capture_dropped {
        eprintln!("note: tshark dropped packets; checking only that what it kept was traced");
        let traced_set: BTreeSet<&Seg> = sent.iter().collect();
        assert!(from_client.iter().all(|s| traced_set.contains(s)), "a captured datagram the client never sent");
    } else {
        let first_diff = sent.iter().zip(&from_client).find(|(a, b)| a != b);
        assert!(
            sent == from_client,
            "the client traced {} datagrams sent, the capture holds {} from it; first difference {first_diff:?}",
            sent.len(),
            from_client.len()
        );
    }
    // Everything the client received crossed the wire; a datagram that
    // arrived after it stopped reading was captured but not traced.
    let mut pool: BTreeMap<&Seg, usize> = BTreeMap::new();
    for s in &to_client {
        *pool.entry(s).or_default() += 1;
    }
    received.sort();
    for s in &received {
        match pool.get_mut(s) {
            Some(n) if *n > 0 => *n -= 1,
            _ if capture_dropped => {}
            _ => panic!("the client traced receiving {s:?}, which the capture does not hold as dissected"),
        }
    }
}

fn assert_seen(seen: &BTreeMap<String, usize>, kinds: &[&str]) {
    for k in kinds {
        assert!(seen.contains_key(*k), "no {k} packet seen; seen: {seen:?}");
    }
}

/// `manyfold recv --once` into a new directory under `root` with `extra`
/// flags; its address.
fn receiver(root: &Path, name: &str, extra: &[&str]) -> (Running, String) {
    let dir = root.join(name);
    std::fs::create_dir(&dir).unwrap();
    let mut cmd = manyfold();
    cmd.args(["recv", "--listen", "127.0.0.1:0", "--once", "--dir"]).arg(&dir).args(extra);
    let mut r = Running::spawn(cmd);
    let addr = r.listening_addr().to_string();
    (r, addr)
}

fn port_of(addr: &str) -> String {
    addr.rsplit(':').next().expect("port").to_string()
}

fn port_filter(ports: &BTreeSet<String>) -> String {
    let ports: Vec<String> = ports.iter().map(|p| format!("udp port {p}")).collect();
    ports.join(" or ")
}

/// What [`capture_send`] captured.
struct Sent {
    frames: Vec<Frame>,
    seen: BTreeMap<String, usize>,
    pcap: Vec<u8>,
    source: Vec<u8>,
}

/// Sends `size` from one sender to `n` receivers through `loss` % emulated
/// loss while tshark captures, every process with `extra` flags; checks
/// the capture; returns it with the kinds seen.
fn capture_send(n: usize, size: &str, loss: &str, extra: &[&str]) -> Sent {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("sample.bin");
    samplegen(&src, size, 9);
    let rx: Vec<(Running, String)> = (0..n).map(|i| receiver(tmp.path(), &format!("inbox{i}"), extra)).collect();
    let ports: BTreeSet<String> = rx.iter().map(|r| port_of(&r.1)).collect();
    let pcap = tmp.path().join("send.pcap");
    let cap = Capture::start(None, "lo", &port_filter(&ports), &pcap);
    let to: Vec<&str> = rx.iter().map(|r| r.1.as_str()).collect();
    let mut cmd = manyfold();
    cmd.arg("send").arg(&src).args(["--to", &to.join(","), "--loss", loss, "--trace"]).args(extra);
    let sent = Running::spawn(cmd).wait(LIMIT);
    for (r, _) in rx {
        r.wait(LIMIT).assert_success();
    }
    let dropped = cap.stop();
    sent.assert_success();
    let started = Instant::now();
    let frames = dissect(&pcap, &[]);
    eprintln!("dissected {} frames in {:?}", frames.len(), started.elapsed());
    let seen = check_all_dissected(&frames);
    check_against_trace(&frames, &ports, &sent.stderr, dropped);
    eprintln!("packet kinds seen: {seen:?}");
    Sent { frames, seen, pcap: std::fs::read(&pcap).unwrap(), source: std::fs::read(&src).unwrap() }
}

/// Whether tshark is missing, so the test is skipped (said on stderr);
/// as root (CI, which installs it) a missing tshark fails the test.
fn skipped_without_tshark() -> bool {
    if has_tshark() {
        return false;
    }
    assert!(!is_root(), "tshark is missing; .ci/run installs it (apt-get install tshark)");
    eprintln!("skipped: tshark is missing (.ci/run installs it as root)");
    true
}

#[test]
fn every_packet_of_a_lossy_transfer_is_dissected_as_the_sender_traced_it() {
    if !can_capture() {
        return;
    }
    // 1,452-byte datagrams: 1 MB in ~700 packets, so that 5% loss surely
    // leaves gaps (SACK); in 64 KiB datagrams it is only ~16 packets.
    let sent = capture_send(1, "1MB", "5", &["--max-datagram", "1452"]);
    let seen = &sent.seen;
    // spec §5.4.2: both ends announce TX_ECHO, so resends say which they
    // are and acks echo what drew them.
    assert_seen(seen, &["SYN", "SYN-ACK", "COOKIE-ECHO", "DATA", "ACK", "SACK", "FIN", "RESENT", "ECHO"]);
    assert!(!seen.contains_key("PROTECTED") && !seen.contains_key("HANDSHAKE"), "plain: {seen:?}");
    for fr in &sent.frames {
        if fr.kinds().iter().any(|k| k == "SYN" || k == "SYN-ACK") {
            let bits =
                ["manyfold.params.features.ack_frequency", "manyfold.params.features.tx_echo"].map(|f| fr.all(f));
            assert!(bits.iter().all(|b| b.len() == 1 && is_set(&b[0])), "frame {}: features {bits:?}", fr.number());
        }
    }
}

#[test]
fn every_packet_of_an_encrypted_transfer_is_dissected_handshake_in_the_clear_then_protected() {
    if !can_capture() {
        return;
    }
    let keys = tempfile::tempdir().unwrap();
    let key = keys.path().join("psk.key");
    common::run_args(&["keygen", key.to_str().unwrap(), "--psk"], LIMIT).assert_success();
    let sent = capture_send(1, "1MB", "5", &["--key-file", key.to_str().unwrap()]);
    assert_seen(&sent.seen, &["SYN", "SYN-ACK", "COOKIE-ECHO", "HANDSHAKE", "PROTECTED"]);
    let mut messages = BTreeSet::new();
    for fr in &sent.frames {
        let (n, kinds) = (fr.number(), fr.kinds());
        // Each side announces protection in its handshake parameters.
        if kinds.iter().any(|k| k == "SYN" || k == "SYN-ACK") {
            assert_eq!(fr.all("manyfold.params.features.protected"), ["1"], "frame {n}: PROTECTED bit");
        }
        // In the clear only the handshake: no DATA, ACK, FIN or other chunks.
        match kinds.as_slice() {
            [k] if k == "PROTECTED" => {}
            [k] if k == "SYN" || k == "SYN-ACK" => assert!(fr.all("manyfold.chunk.kind").is_empty(), "frame {n}"),
            [k] if k == "COOKIE-ECHO" || k == "HANDSHAKE" => {
                assert_eq!(fr.all("manyfold.chunk.kind"), ["6"], "frame {n}: one HANDSHAKE chunk, nothing else");
                messages.insert(fr.one("manyfold.handshake.length").to_string());
            }
            other => panic!("frame {n}: {other:?} in the clear on an encrypted connection"),
        }
    }
    // XXpsk3's three messages: the client's e (+ tag), the listener's, the client's s.
    assert_eq!(messages, BTreeSet::from(["48".to_string(), "64".to_string(), "96".to_string()]));
    let sample = &sent.source[100_000..100_032];
    assert!(!sent.pcap.windows(sample.len()).any(|w| w == sample), "the file's bytes crossed the wire readable");
}

#[test]
fn every_packet_of_a_lossy_group_transfer_is_dissected_as_the_sender_traced_it() {
    if !can_capture() {
        return;
    }
    let seen = capture_send(3, "600kB", "3", &[]).seen;
    assert_seen(&seen, &["SYN", "SYN-ACK", "COOKIE-ECHO", "DATA", "ACK", "SACK", "FIN", "ECHO"]);
    assert!(seen["SYN"] >= 3, "one handshake per receiver: {seen:?}");
}

#[test]
fn every_packet_of_request_reply_sessions_is_dissected_as_the_client_traced_it() {
    if !can_capture() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let mut cmd = manyfold();
    cmd.args(["rr-server", "--listen", "127.0.0.1:0", "--reply-size", "3000", "--sockets", "1"]);
    let mut server = Running::spawn(cmd);
    let addr = server.listening_addr().to_string();
    let ports = BTreeSet::from([port_of(&addr)]);
    let pcap = tmp.path().join("rr.pcap");
    let cap = Capture::start(None, "lo", &port_filter(&ports), &pcap);
    let mut cmd = manyfold();
    cmd.args(["rr-client", &addr, "--clients", "30", "--concurrency", "6", "--size", "700", "--reply-size", "3000"]);
    cmd.args(["--trace"]);
    let out = Running::spawn(cmd).wait(LIMIT);
    out.assert_success();
    assert!(out.stdout.contains("failures  0"), "{out}");
    let dropped = cap.stop();
    drop(server.kill());
    let frames = dissect(&pcap, &[]);
    let seen = check_all_dissected(&frames);
    check_against_trace(&frames, &ports, &out.stderr, dropped);
    eprintln!("packet kinds seen: {seen:?}");
    // spec §15.1: the request and the client's FIN ride on the cookie echo.
    assert_seen(&seen, &["SYN", "SYN-ACK", "COOKIE-ECHO", "FIN", "ACK"]);
    assert!(seen["SYN"] >= 30, "one handshake per session: {seen:?}");
}

/// A multicast session of a 1 MiB sample from namespace 0 to two receivers
/// (5% loss at each, when nft is there) captured on the sender's link, with
/// `extra` flags on every command; `None` where it cannot run.
fn multicast_capture(extra: &[&str]) -> Option<McastCapture> {
    if !can_capture() {
        return None;
    }
    if Command::new("ip").arg("-V").output().is_err() {
        eprintln!("skipped: the ip command is missing (namespaces)");
        return None;
    }
    let lab = Lab::new(3).expect("namespaces");
    // Loss at both receivers makes NACKs, REPAIRs and repair DATA; without
    // nft the session runs clean and those kinds are not required.
    let lossy = Command::new("nft").arg("-v").output().is_ok_and(|o| o.status.success());
    if lossy {
        lab.random_loss(1, 5).expect("nftables rule");
        lab.random_loss(2, 5).expect("nftables rule");
    } else {
        eprintln!("note: nft is missing; the multicast session runs without loss");
    }
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("image.bin");
    samplegen(&file, "1MiB", 11);
    let pcap = tmp.path().join("mcast.pcap");
    // The sender's link sees all it sends and all the receivers send it.
    let cap = Capture::start(Some(&lab.host(0)), &lab.iface(0), "udp", &pcap);
    let group = "239.77.0.9:7020";
    let receivers: Vec<Running> = (1..=2)
        .map(|i| {
            let dir = tmp.path().join(format!("r{i}"));
            std::fs::create_dir(&dir).unwrap();
            let mut c = lab.exec(i);
            c.args(["mcast", "recv", "--group", group, "--wait", "60", "--dir"]).arg(&dir).args(extra);
            Running::spawn(c)
        })
        .collect();
    let json = tmp.path().join("report.json");
    let mut s = lab.exec(0);
    s.args(["mcast", "send", "--group", group, "--receivers", "2", "--wait", "20", "--fec", "16"]);
    s.args(["--fec-proactive", "1", "--json"]).arg(&json).args(extra).arg(&file);
    let sent = Running::spawn(s).wait(LIMIT);
    let got: Vec<_> = receivers.into_iter().map(|r| r.wait(LIMIT)).collect();
    let dropped = cap.stop();
    sent.assert_success();
    for g in &got {
        g.assert_success();
    }
    let frames = dissect(&pcap, &[]);
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).expect("JSON report");
    Some(McastCapture { frames, report, dropped, lossy, raw: std::fs::read(&pcap).unwrap() })
}

/// What `multicast_capture` saw.
struct McastCapture {
    frames: Vec<Frame>,
    /// The sender's `--json` report.
    report: serde_json::Value,
    /// tshark reported dropping packets.
    dropped: bool,
    /// nftables loss was in force.
    lossy: bool,
    /// The capture file's bytes.
    raw: Vec<u8>,
}

#[test]
fn every_packet_of_a_lossy_multicast_session_is_dissected_and_counted_as_the_sender_reports() {
    let Some(McastCapture { frames, report, dropped, lossy, .. }) = multicast_capture(&[]) else { return };
    let seen = check_all_dissected(&frames);
    eprintln!("packet kinds seen: {seen:?}");
    let kinds = [
        "mc ANNOUNCE",
        "mc REGISTER",
        "mc REGISTER+ACK",
        "mc DATA",
        "mc ACK",
        "mc PARITY",
        "mc STATUS",
        "mc STATUS+ACK",
        "mc END",
    ];
    assert_seen(&seen, &kinds);
    // spec §16.12: receivers given no --network register with KLV (the
    // sender may regroup them), and the dissector says so on each REGISTER.
    for fr in &frames {
        let registers = fr.kinds().iter().filter(|k| *k == "mc REGISTER").count();
        let auto = fr.all("manyfold.mc.auto_group");
        assert_eq!(auto.len(), registers, "frame {}: auto_group on REGISTER only", fr.number());
        assert!(auto.iter().all(|a| a == "1"), "frame {}: a REGISTER without --network lacks KLV", fr.number());
    }

    // The dissected counts agree with the sender's own report.
    let stat = |k: &str| report[k].as_u64().unwrap_or_else(|| panic!("no {k} in {report}"));
    let (mut first, mut repairs, mut parity) = (0u64, 0u64, 0u64);
    for fr in &frames {
        let repair_flags = fr.all("manyfold.mc.repair");
        let mut d = 0;
        for k in fr.kinds() {
            match k.as_str() {
                "mc DATA" => {
                    if repair_flags.get(d).is_some_and(|r| r == "1" || r == "True") {
                        repairs += 1;
                    } else {
                        first += 1;
                    }
                    d += 1;
                }
                "mc PARITY" => parity += 1,
                _ => {}
            }
        }
    }
    // Loss makes REPAIR requests, unless parity rebuilt everything first.
    if stat("repair_requests") > 0 && !dropped {
        assert_seen(&seen, &["mc REPAIR"]);
    }
    let repair_sent = stat("repair_multicast") + stat("repair_unicast");
    if dropped {
        eprintln!("note: tshark dropped packets; counts checked as upper bounds");
        assert!(parity <= stat("parity_packets") && repairs <= repair_sent);
    } else {
        assert_eq!(parity, stat("parity_packets"), "PARITY packets");
        assert_eq!(repairs, repair_sent, "repair DATA packets (KLV)");
        // A window's last packet may be sent again as a probe (not counted).
        assert!(first >= stat("data_packets"), "first-sent DATA: {first} < {}", stat("data_packets"));
    }
    if lossy {
        // 5% loss is reported; proactive parity (1 shard per 16 packets)
        // may rebuild all of it, so neither repairs nor requests are
        // required (a run of CI's had losses and no repair).
        let lost: u64 = report["receivers"]
            .as_array()
            .expect("receivers")
            .iter()
            .map(|r| r["reported_lost"].as_u64().unwrap_or(0))
            .sum();
        // Parity first (spec §16.9): parity that rebuilt a receiver's
        // losses before its ACK leaves nothing to report.
        assert!(lost > 0 || parity > 0, "5% loss at both receivers was reported or repaired by parity: {report}");
    }
}

#[test]
fn every_packet_of_an_encrypted_multicast_session_is_dissected_key_exchange_in_the_clear_then_sealed() {
    let keydir = tempfile::tempdir().unwrap();
    let key = keydir.path().join("group.key");
    common::run_args(&["keygen", key.to_str().unwrap(), "--psk"], LIMIT).assert_success();
    let Some(McastCapture { frames, report, dropped, raw, .. }) =
        multicast_capture(&["--key-file", key.to_str().unwrap()])
    else {
        return;
    };
    let seen = check_all_dissected(&frames);
    eprintln!("packet kinds seen: {seen:?}");
    assert_seen(&seen, &["mc INVITE", "mc REGISTER+CKE", "mc REGISTER+ACK+CKE", "mc SEALED"]);
    let plain: Vec<_> = seen.keys().filter(|k| !k.ends_with("CKE") && *k != "mc INVITE" && *k != "mc SEALED").collect();
    assert!(plain.is_empty(), "packets in the clear besides the key exchange: {plain:?}");
    assert!(!raw.windows(9).any(|w| w == b"image.bin"), "the file's name crosses the wire in the clear");
    // The same sample the session sent (samplegen is deterministic).
    let sample = keydir.path().join("same.bin");
    samplegen(&sample, "1MiB", 11);
    let file = std::fs::read(&sample).unwrap();
    assert!(!raw.windows(32).any(|w| w == &file[1 << 19..(1 << 19) + 32]), "file bytes cross the wire in the clear");
    // The sender's sealed packets (source 0) are at least its DATA and
    // PARITY packets; every sealed one has its packet number and tag.
    let from_sender: u64 =
        frames.iter().map(|fr| fr.all("manyfold.mc.source").iter().filter(|s| *s == "0").count() as u64).sum();
    let stat = |k: &str| report[k].as_u64().unwrap_or_else(|| panic!("no {k} in {report}"));
    if !dropped {
        assert!(from_sender >= stat("data_packets") + stat("parity_packets"), "{from_sender} sealed from the sender");
    }
    assert!(report["mode"].as_str().is_some_and(|m| m.starts_with("encrypted")), "{report}");
}

/// A pcap (LINKTYPE_RAW: IPv4 packets) of UDP datagrams to `port`.
fn write_pcap(path: &Path, port: u16, datagrams: &[Vec<u8>]) {
    let mut out = Vec::new();
    for v in [0xa1b2_c3d4u32.to_le_bytes(), [2, 0, 4, 0]] {
        out.extend_from_slice(&v);
    }
    out.extend_from_slice(&[0; 8]); // thiszone, sigfigs
    out.extend_from_slice(&65_535u32.to_le_bytes());
    out.extend_from_slice(&101u32.to_le_bytes()); // LINKTYPE_RAW
    for (i, d) in datagrams.iter().enumerate() {
        let total = 20 + 8 + d.len();
        let mut ip =
            vec![0x45, 0, (total >> 8) as u8, total as u8, 0, 0, 0x40, 0, 64, 17, 0, 0, 127, 0, 0, 1, 127, 0, 0, 2];
        let sum = ip.chunks(2).map(|w| u32::from(u16::from_be_bytes([w[0], w[1]]))).sum::<u32>();
        let sum = !(((sum & 0xffff) + (sum >> 16)) as u16);
        ip[10..12].copy_from_slice(&sum.to_be_bytes());
        ip.extend_from_slice(&40_000u16.to_be_bytes());
        ip.extend_from_slice(&port.to_be_bytes());
        ip.extend_from_slice(&((8 + d.len()) as u16).to_be_bytes());
        ip.extend_from_slice(&[0, 0]); // no UDP checksum
        ip.extend_from_slice(d);
        out.extend_from_slice(&(i as u32 + 1).to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
        out.extend_from_slice(&(ip.len() as u32).to_le_bytes());
        out.extend_from_slice(&(ip.len() as u32).to_le_bytes());
        out.extend_from_slice(&ip);
    }
    std::fs::write(path, out).unwrap();
}

/// Datagrams built with manyfold-proto's encoders, each with the packet
/// kind and the expert message the dissector must give it (empty: none
/// of warning level or above).
fn crafted() -> Vec<(Vec<u8>, &'static str, &'static str)> {
    use bytes::Bytes;
    use manyfold_proto::mcast::wire::{
        emit, emit_announcement, emit_bytes, emit_code, emit_invitation, emit_ranges, emit_signatures, Announcement,
        Signature,
    };
    use manyfold_proto::mcast::Pattern;
    use manyfold_proto::wire::chunk::{Chunk, DataChunk};
    use manyfold_proto::wire::{seal, Cookie, Echo, ErrorCode, Flags, HandshakeParams, Packet, PacketType, SackBlock};
    use manyfold_proto::StreamId;

    let encode = |p: &Packet| {
        let mut v = vec![0u8; p.len()];
        p.emit(&mut v);
        v
    };
    let mut syn = Packet::bare(PacketType::Segment, Flags::SYN, 0, 7, 0, 65536);
    syn.params = Some(HandshakeParams::new(0x1234, 1452));
    let syn = encode(&syn);

    let chunks: Vec<Chunk<Bytes>> = vec![
        Chunk::Reset { stream: StreamId::new(3), code: 413, final_size: 1 << 40 },
        Chunk::Stop { stream: StreamId::new(4), code: 5 },
        Chunk::Credit { stream: StreamId::new(5), unordered: true, max: 123_456_789 },
        Chunk::Abandon { stream: StreamId::new(6), unordered: false, start: 10, end: 20 },
        Chunk::Pad,
        Chunk::Data(DataChunk {
            stream: StreamId::new(7),
            flags: 0x0f,
            offset: 100,
            in_msg: 100,
            data: Bytes::from_static(b"hi"),
            msg: 0,
        }),
    ];
    let mut area = Vec::new();
    for c in &chunks {
        let mut b = vec![0u8; c.encoded_len()];
        c.emit(&mut b);
        area.extend_from_slice(&b);
    }
    let mut sack = SackBlock::new();
    sack.push(10, 12);
    sack.push(20, 25);
    let mut full = Packet::bare(PacketType::Segment, Flags::ACK | Flags::FIN, 9, 100, 5, 4096);
    full.sack = Some(sack);
    full.cookie = Some(Cookie { timestamp: 1, client_id: 2, client_max_datagram: 3, echo_delay: 5, mac: 4 });
    full.data = &area;
    let full = encode(&full);

    let mut abort = Packet::bare(PacketType::Segment, Flags::RST, 9, 1, 0, 0);
    abort.error = Some(ErrorCode::REFUSED);
    let abort = encode(&abort);

    let resealed = |mut v: Vec<u8>, f: &dyn Fn(&mut Vec<u8>)| {
        f(&mut v);
        seal(&mut v);
        v
    };
    let mut bad_crc = syn.clone();
    bad_crc[26] ^= 1;
    let mut trailing = syn.clone();
    trailing.push(0xee);

    let mc = |ptype, flags, seq, ack, window, body: &dyn Fn(&mut [u8]) -> usize| {
        let mut b = vec![0u8; 1500];
        let n = emit(&mut b, ptype, flags, 0xabcd, seq, ack, window, body).expect("fits");
        b.truncate(n);
        b
    };
    let info = Announcement {
        size: Some(10_000),
        block: 1428,
        artp_max_us: 600,
        repair_interval_ms: 50,
        fec_k: 16,
        hash: Some([7; 32]),
        name: "disk.img".into(),
    };
    let mut slash = info.clone();
    slash.name = "a/b".into();
    let data = mc(PacketType::McData, Flags::FIN | Flags::KLV, 41, 41, 12, &|o| {
        o[..3].copy_from_slice(b"abc");
        3
    });
    let mut gso = data.clone();
    gso.extend_from_slice(&data);

    // spec §19: the PROTECTED feature bit, HANDSHAKE chunks, protected packets.
    let mut psyn = Packet::bare(PacketType::Segment, Flags::SYN, 0, 7, 0, 65536);
    psyn.params = Some(HandshakeParams { conn_id: 0x1234, max_datagram: 1452, features: HandshakeParams::PROTECTED });
    let psyn = encode(&psyn);
    let handshake = |flags, message: &[u8]| {
        let c: Chunk<Bytes> = Chunk::Handshake(Bytes::copy_from_slice(message));
        let mut area = vec![0u8; c.encoded_len()];
        c.emit(&mut area);
        let mut p = Packet::bare(PacketType::Segment, flags, 9, 100, 5, 4096);
        if flags.contains(Flags::CKE) {
            p.cookie = Some(Cookie { timestamp: 1, client_id: 2, client_max_datagram: 3, echo_delay: 5, mac: 4 });
        }
        p.data = &area;
        encode(&p)
    };
    let echo = handshake(Flags::ACK | Flags::CKE, &[0x11; 48]);
    let second = handshake(Flags::ACK, &[0x22; 96]);
    // A length running past the payload, and a non-zero second byte.
    let past = resealed(handshake(Flags::ACK, &[0x33; 10]), &|v| v[26..28].copy_from_slice(&200u16.to_be_bytes()));
    let nonzero = resealed(handshake(Flags::ACK, &[0x33; 10]), &|v| v[25] = 1);
    // Type 10, packet number 5, then `payload - 8` bytes standing for the
    // ciphertext and tag (cut to `payload` bytes in all).
    let protected = |payload: usize| {
        resealed(encode(&Packet::bare(PacketType::Segment, Flags::ACK, 9, 100, 5, 4096)), &|v| {
            v[0] = 0x1a;
            v.extend_from_slice(&5u64.to_be_bytes());
            v.extend((0..payload).map(|i| i as u8));
            v.truncate(24 + payload);
            v[2..4].copy_from_slice(&(payload as u16).to_be_bytes());
        })
    };
    // Type 11: source 0, packet number 7, then `payload` bytes standing for
    // the encrypted inner packet and the tag.
    let sealed = |payload: usize| {
        resealed(mc(PacketType::McData, Flags::empty(), 5, 5, 1, &|_| 0), &|v| {
            v[0] = 0x1b;
            v.extend_from_slice(&0u32.to_be_bytes());
            v.extend_from_slice(&7u64.to_be_bytes());
            v.extend((0..payload).map(|i| i as u8));
            let plen = (v.len() - 24) as u16;
            v[2..4].copy_from_slice(&plen.to_be_bytes());
        })
    };
    // spec §16.12: a STATUS from client 4 holding 10 packets, with the
    // error code when given, then `trailer`.
    let status = |flags: Flags, code: Option<ErrorCode>, trailer: &dyn Fn(&mut [u8]) -> usize| {
        mc(PacketType::McStatus, flags, 10, 3, 4, &|o| {
            let at = code.map_or(0, |c| emit_code(o, c));
            at + trailer(&mut o[at..])
        })
    };
    // Bits set: 1; 65 (all of word 0, and bit 255); 3; none.
    let sigs = [
        Signature { block: 5, bits: [1, 0, 0, 0] },
        Signature { block: 6, bits: [u64::MAX, 0, 0, 1 << 63] },
        Signature { block: 7, bits: [0, 0b101, 0, 1 << 63] },
        Signature { block: 8, bits: [0; 4] },
    ];
    let rst = |code| {
        let mut p = Packet::bare(PacketType::Segment, Flags::RST, 9, 1, 0, 0);
        p.error = Some(code);
        encode(&p)
    };

    // spec §5.4.2: the TX_ECHO feature bit, RESENT chunks and echoes.
    let mut esyn = Packet::bare(PacketType::Segment, Flags::SYN, 0, 7, 0, 65536);
    esyn.params = Some(HandshakeParams {
        conn_id: 0x1234,
        max_datagram: 1452,
        features: HandshakeParams::ACK_FREQUENCY | HandshakeParams::TX_ECHO,
    });
    let esyn = encode(&esyn);
    // A sequenced packet of `chunks`: a resend puts its RESENT chunk first.
    let sequenced = |flags, chunks: &[Chunk<Bytes>]| {
        let mut area = Vec::new();
        for c in chunks {
            let mut b = vec![0u8; c.encoded_len()];
            c.emit(&mut b);
            area.extend_from_slice(&b);
        }
        let mut p = Packet::bare(PacketType::Segment, flags, 9, 100, 5, 4096);
        p.data = &area;
        encode(&p)
    };
    let hi = || {
        Chunk::Data(DataChunk {
            stream: StreamId::new(7),
            flags: 0x01,
            offset: 0,
            in_msg: 0,
            data: Bytes::from_static(b"hi"),
            msg: 0,
        })
    };
    let resent_data = sequenced(Flags::ACK | Flags::KLV, &[Chunk::Resent { count: 2 }, hi()]);
    // A lone FIN's repeat: 26 bytes (spec §5.4).
    let resent_fin = sequenced(Flags::ACK | Flags::FIN | Flags::KLV, &[Chunk::Resent { count: 1 }]);
    let resent_zero = resealed(resent_fin.clone(), &|v| v[25] = 0);
    let resent_later = sequenced(Flags::ACK, &[hi(), Chunk::Resent { count: 1 }]);
    let acking = |sack: SackBlock| {
        let mut p = Packet::bare(PacketType::Segment, Flags::ACK, 9, 101, 100, 4096);
        p.sack = Some(sack);
        encode(&p)
    };
    // spec §3.6's pure ack: no range, only the echo (30 bytes).
    let pure_echo = acking(SackBlock::new().with_echo(Echo { seq: 0x7340_24da, count: 0 }));
    let mut two = SackBlock::new();
    two.push(10, 12);
    two.push(20, 25);
    let ranges_echo = acking(two.with_echo(Echo { seq: 9, count: 3 }));
    // spec §3.3.2, §6.2: a resent SYN names its transmission in its
    // parameters, and the listener's SYN-ACK echoes it ahead of its own.
    let resent_syn = {
        let mut p = Packet::bare(PacketType::Segment, Flags::SYN | Flags::KLV, 0, 7, 0, 65536);
        let params = HandshakeParams { conn_id: 0x1234, max_datagram: 1452, features: HandshakeParams::TX_ECHO };
        p.params = Some(params.with_transmission(2));
        encode(&p)
    };
    let syn_ack = {
        let mut p = Packet::bare(PacketType::Segment, Flags::SYN | Flags::ACK, 0x1234, 900, 8, 65536);
        p.sack = Some(SackBlock::new().with_echo(Echo { seq: 7, count: 2 }));
        p.params = Some(HandshakeParams { conn_id: 0x5678, max_datagram: 1452, features: HandshakeParams::TX_ECHO });
        p.cookie = Some(Cookie { timestamp: 1, client_id: 0x1234, client_max_datagram: 1452, echo_delay: 0, mac: 4 });
        encode(&p)
    };
    // An ACK whose SACK section is `section`, as it stands.
    let sack_section = |section: &[u8]| {
        let mut p = Packet::bare(PacketType::Segment, Flags::ACK, 9, 101, 100, 4096);
        p.data = section;
        resealed(encode(&p), &|v| v[1] |= Flags::SCK.0)
    };

    vec![
        (syn.clone(), "SYN", ""),
        (full, "COOKIE-ECHO", ""),
        (abort, "REFUSAL", ""),
        (bad_crc, "SYN", "Bad CRC32C"),
        (syn[..syn.len() - 3].to_vec(), "SYN", "payload length 8 needs 32 bytes"),
        (trailing, "SYN", "1 bytes after 24 + payload length"),
        (syn[..10].to_vec(), "", "shorter than the 24-byte header"),
        (resealed(syn.clone(), &|v| v[0] = 0x20), "", "version 2"),
        (resealed(syn.clone(), &|v| v[0] = 0x1d), "", "packet type 13 is reserved"),
        (resealed(syn.clone(), &|v| v[1] |= 0x40), "SYN", "SACK count 0"),
        (resealed(syn.clone(), &|v| v[24..28].copy_from_slice(&[0; 4])), "SYN", "connection id 0"),
        (mc(PacketType::McAnnounce, Flags::empty(), 5, 8, 1, &|o| emit_announcement(o, &info)), "ANNOUNCE", ""),
        (mc(PacketType::McAnnounce, Flags::empty(), 5, 8, 1, &|o| emit_announcement(o, &slash)), "ANNOUNCE", "'/'"),
        (mc(PacketType::McRegister, Flags::empty(), 0, 3, 4, &|_| 0), "REGISTER", ""),
        (mc(PacketType::McRegister, Flags::ACK, 9, 3, 4, &|o| emit_announcement(o, &info)), "REGISTER+ACK", ""),
        (data, "DATA", ""),
        (gso, "DATA", ""),
        (mc(PacketType::McAck, Flags::empty(), 99, 3, 4, &|o| emit_ranges(o, [2..5, 7..8]).0), "ACK", ""),
        (mc(PacketType::McNack, Flags::empty(), 99, 3, 4, &|o| emit_ranges(o, [5..9, 8..10]).0), "NACK", "overlapping"),
        (mc(PacketType::McRepair, Flags::empty(), 1, 3, 4, &|o| emit_ranges(o, [1..2, 4..6]).0), "REPAIR", ""),
        (
            mc(PacketType::McStatus, Flags::FIN | Flags::ERR, 10, 3, 4, &|o| {
                o[..2].copy_from_slice(&20u16.to_be_bytes());
                2
            }),
            "STATUS",
            "",
        ),
        (mc(PacketType::McEnd, Flags::empty(), 10, 0, 0, &|_| 0), "END", ""),
        (
            mc(PacketType::McParity, Flags::empty(), 2, 130, 16, &|o| {
                o[..4].copy_from_slice(b"abcd");
                4
            }),
            "PARITY",
            "",
        ),
        (mc(PacketType::McParity, Flags::empty(), 2, 1, 0, &|_| 0), "PARITY", "empty parity shard"),
        (psyn, "SYN", ""),
        (echo, "COOKIE-ECHO", ""),
        (second, "HANDSHAKE", ""),
        (past, "HANDSHAKE", "HANDSHAKE chunk of 204 bytes runs past the payload (14 left)"),
        (nonzero, "HANDSHAKE", "second byte must be 0"),
        (protected(8 + 33 + 16), "PROTECTED", ""),
        (protected(10), "PROTECTED", "needs 24 bytes after the header (packet number and tag), has 10"),
        (rst(ErrorCode::PROTECTION_MISMATCH), "REFUSAL", ""),
        (rst(ErrorCode::AUTHENTICATION_FAILED), "ABORT", ""),
        (
            mc(PacketType::McAnnounce, Flags::CKE, 0, 0, 0, &|o| emit_invitation(o, Pattern::IkPsk1, &[7; 32])),
            "INVITE",
            "",
        ),
        (mc(PacketType::McAnnounce, Flags::CKE, 0, 0, 0, &|_| 0), "INVITE", "an invitation carries 33 bytes"),
        (
            mc(PacketType::McRegister, Flags::CKE, 0, 3, 4, &|o| {
                o[..104].fill(9);
                104
            }),
            "REGISTER+CKE",
            "",
        ),
        (sealed(1 + 40 + 16), "SEALED", ""),
        (sealed(10), "SEALED", "a sealed packet needs 29 bytes after the header"),
        // spec §16.12: the grouping fields (frames 38 to 52, checked below).
        (group_from_spec(), "GROUP", ""),
        (mc(PacketType::McRegister, Flags::ACK | Flags::KLV, 7, 0xa000_0002, 4, &|_| 0), "GROUP", ""),
        (
            mc(PacketType::McRegister, Flags::ACK | Flags::KLV, 7, 0xa000_0002, 4, &|o| emit_bytes(o, b"x")),
            "GROUP",
            "a group assignment carries no payload",
        ),
        (mc(PacketType::McRegister, Flags::KLV, 0, 0x0a0b0c, 4, &|_| 0), "REGISTER", ""),
        (mc(PacketType::McAck, Flags::KLV, 99, 3, 4, &|o| emit_ranges(o, [2..5, 7..8]).0), "ACK", ""),
        (status(Flags::empty(), None, &|o| emit_signatures(o, sigs[..1].iter().copied())), "STATUS", ""),
        (status(Flags::empty(), None, &|o| emit_signatures(o, sigs.iter().copied())), "STATUS", ""),
        (
            status(Flags::ERR, Some(ErrorCode::TOO_SLOW), &|o| emit_signatures(o, sigs[..1].iter().copied())),
            "STATUS",
            "",
        ),
        (status(Flags::empty(), None, &|o| emit_bytes(o, &trailer_from_spec())), "STATUS", ""),
        // The last entry cut short by one byte.
        (
            status(Flags::empty(), None, &|o| emit_signatures(o, sigs[..2].iter().copied()) - 1),
            "STATUS",
            "2 signatures run past the payload",
        ),
        (status(Flags::empty(), None, &|o| emit_bytes(o, &[1, 0])), "STATUS", "0 signatures (1 to 4)"),
        (
            status(Flags::empty(), None, &|o| {
                let n = emit_signatures(o, sigs.iter().copied());
                o[1] = 5;
                n
            }),
            "STATUS",
            "5 signatures (1 to 4)",
        ),
        (status(Flags::empty(), None, &|o| emit_bytes(o, &[1])), "STATUS", "loss-signature trailer without its count"),
        // Another version: ignored, the STATUS stands (a note, no warning).
        (status(Flags::empty(), None, &|o| emit_bytes(o, &[2, 9, 9])), "STATUS", ""),
        (status(Flags::FIN, None, &|_| 0), "STATUS", ""),
        // spec §3.3.4: an abort's reason in words, within and over the limit.
        (reason_rst("disk full on /srv"), "ABORT", ""),
        (reason_rst(&"x".repeat(300)), "ABORT", ""),
        // spec §5.6: an ack-frequency request, a control chunk.
        (ack_frequency(), "CONTROL", ""),
        // spec §5.4.2 (frames 56 to 65, checked below): TX_ECHO, RESENT, echoes.
        (esyn, "SYN", ""),
        (resent_data, "DATA", ""),
        (resent_fin, "FIN", ""),
        (resent_zero, "FIN", "RESENT count of 0"),
        (resent_later, "DATA", ""),
        (pure_echo, "ACK", ""),
        (ranges_echo, "ACK", ""),
        (sack_section(&[0x00, 0, 0, 0, 9, 0]), "ACK", "SACK count 0 without ECHO"),
        (sack_section(&[0x91; 200]), "ACK", "SACK count 17 with ECHO"),
        (sack_section(&[0x80, 1, 2, 3]), "ACK", "SACK block needs 6 bytes, 4 left"),
        // spec §4.2, §6.2 (frames 66 and 67, checked below).
        (resent_syn, "SYN", ""),
        (syn_ack, "SYN-ACK", ""),
    ]
}

/// spec §16.12's GROUP, byte by byte: client 4 of session 9 assigned to
/// group 0xa0000001 at epoch 3 (the CRC32C sealed in).
fn group_from_spec() -> Vec<u8> {
    let mut v = vec![
        0x12, 0x12, 0x00, 0x00, 0x00, 0x00, 0x00, 0x09, 0x00, 0x00, 0x00, 0x03, 0xa0, 0x00, 0x00, 0x01, 0x00, 0x00,
        0x00, 0x04, 0, 0, 0, 0,
    ];
    manyfold_proto::wire::seal(&mut v);
    v
}

/// spec §16.12's trailer example: one block, 5, whose only loss sets bit 0.
fn trailer_from_spec() -> Vec<u8> {
    let mut v = vec![0x01, 0x01, 0x00, 0x00, 0x00, 0x05, 0, 0, 0, 0, 0, 0, 0, 0x01];
    v.extend_from_slice(&[0; 24]);
    v
}

/// A sequenced packet carrying one ACK_FREQUENCY chunk (spec §5.6).
fn ack_frequency() -> Vec<u8> {
    use manyfold_proto::wire::chunk::Chunk;
    use manyfold_proto::wire::{Flags, Packet, PacketType};
    let c: Chunk<&[u8]> = Chunk::AckFrequency { seq: 3, threshold: 10, max_delay_us: 25_000 };
    let mut area = vec![0u8; c.encoded_len()];
    c.emit(&mut area);
    let mut p = Packet::bare(PacketType::Segment, Flags::ACK, 9, 100, 5, 4096);
    p.data = &area;
    let mut v = vec![0u8; p.len()];
    p.emit(&mut v);
    v
}

/// An abort's RST with a REASON chunk (spec §3.3.4).
fn reason_rst(text: &str) -> Vec<u8> {
    use manyfold_proto::wire::chunk::Chunk;
    use manyfold_proto::wire::{ErrorCode, Flags, Packet, PacketType};
    let mut p = Packet::bare(PacketType::Segment, Flags::RST, 9, 1, 0, 0);
    p.error = Some(ErrorCode(300));
    let c = Chunk::Reason(text.as_bytes());
    let mut v = vec![0u8; p.len_with(c.encoded_len())];
    p.emit_with(&mut v, c.encoded_len(), |d| {
        c.emit(d);
    });
    v
}

#[test]
fn crafted_datagrams_of_every_kind_are_decoded_and_broken_ones_flagged_without_lua_errors() {
    if skipped_without_tshark() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let pcap = tmp.path().join("crafted.pcap");
    let cases = crafted();
    let datagrams: Vec<Vec<u8>> = cases.iter().map(|c| c.0.clone()).collect();
    // Port 7008 (the preference's default range) reaches the dissector
    // even for datagrams the heuristic rightly refuses.
    write_pcap(&pcap, 7008, &datagrams);
    let frames = dissect(&pcap, &[]);
    assert_eq!(frames.len(), cases.len(), "one frame per datagram");
    for (fr, (_, kind, expect)) in frames.iter().zip(&cases) {
        let n = fr.number();
        assert!(fr.one("frame.protocols").ends_with(":udp:manyfold"), "frame {n}: {}", fr.one("frame.protocols"));
        // A Lua error, or a read out of bounds, would show as one of these.
        let messages = fr.all("_ws.expert.message");
        for sign in ["manyfold.lua", "Lua Error", "Exception occurred"] {
            assert!(!messages.iter().any(|m| m.contains(sign)), "frame {n}: dissector bug: {messages:?}");
        }
        assert_eq!(fr.one("manyfold.packet"), *kind, "frame {n}");
        let bad: Vec<&String> = fr
            .all("_ws.expert.severity")
            .iter()
            .zip(messages)
            .filter(|(s, _)| s.parse::<u64>().unwrap_or(u64::MAX) >= SEVERITY_WARN)
            .map(|(_, m)| m)
            .collect();
        if expect.is_empty() {
            assert!(bad.is_empty(), "frame {n} ({kind}): unexpected {bad:?}");
            assert!(fr.all("_ws.malformed").is_empty(), "frame {n} ({kind}): flagged malformed");
            assert!(fr.all("manyfold.crc.status").iter().all(|s| s == "1"), "frame {n}: CRC");
        } else {
            assert!(bad.iter().any(|m| m.contains(expect)), "frame {n} ({kind}): want {expect:?}, got {bad:?}");
        }
    }
    // Every field of the full segment and of the GSO pair is there.
    let full = &frames[1];
    for f in ["manyfold.sack.count", "manyfold.cookie.mac", "manyfold.chunk.code", "manyfold.chunk.max"] {
        assert!(!full.all(f).is_empty(), "{f} missing");
    }
    assert_eq!(full.all("manyfold.chunk.kind"), ["1", "2", "3", "4", "5", "0"]);
    assert_eq!(frames[16].kinds(), ["mc DATA", "mc DATA"], "a GSO pair is two datagrams");
    // spec §19: the feature bit, the Noise messages, the packet number.
    assert_eq!(frames[24].all("manyfold.params.features.protected"), ["1"]);
    assert_eq!(frames[0].all("manyfold.params.features.protected"), ["0"]);
    assert_eq!((frames[25].one("manyfold.chunk.kind"), frames[25].one("manyfold.handshake.length")), ("6", "48"));
    assert_eq!(frames[26].one("manyfold.handshake.length"), "96");
    let p = &frames[29];
    let got =
        ["manyfold.protected.pn", "manyfold.protected.payload_len", "manyfold.seq", "manyfold.ack"].map(|f| p.one(f));
    assert_eq!(got, ["5", "33", "100", "5"]);
    assert_eq!(p.one("manyfold.protected.tag").len(), 32, "16 bytes of tag");
    assert_eq!((frames[31].one("manyfold.error"), frames[32].one("manyfold.error")), ("8", "9"));
    // spec §3.3.4: the reason's text, and a note on one manyfold would drop.
    let (said, long) = (&frames[53], &frames[54]);
    assert_eq!((said.one("manyfold.chunk.kind"), said.one("manyfold.reason")), ("8", "disk full on /srv"));
    assert_eq!(long.one("manyfold.reason.length"), "300");
    assert!(
        long.all("_ws.expert.message").iter().any(|m| m.contains("drops reasons over 256 bytes")),
        "{:?}",
        long.all("_ws.expert.message")
    );
    let freq = &frames[55];
    let got =
        ["manyfold.chunk.kind", "manyfold.ackfreq.threshold", "manyfold.ackfreq.seq", "manyfold.ackfreq.max_delay"]
            .map(|f| freq.one(f));
    assert_eq!(got, ["7", "10", "3", "25000"]);
    // spec §19.7: the invitation's pattern, message 1's length, the source.
    assert_eq!(frames[33].one("manyfold.mc.pattern"), "2");
    assert_eq!(frames[35].one("manyfold.mc.noise").len(), 2 * 104);
    let p = &frames[36];
    let got = ["manyfold.mc.source", "manyfold.protected.pn", "manyfold.protected.payload_len"].map(|f| p.one(f));
    assert_eq!(got, ["0", "7", "41"], "57 bytes: 41 encrypted, 16 of tag");
    // spec §16.12: the group assignment's fields, the spec's own example first.
    for (i, want) in
        [(38, ["0x00000009", "3", "0xa0000001", "0x00000004"]), (39, ["0x0000abcd", "7", "0xa0000002", "0x00000004"])]
    {
        let got = ["manyfold.mc.session", "manyfold.mc.epoch", "manyfold.mc.group", "manyfold.mc.client"]
            .map(|f| frames[i].one(f));
        assert_eq!(got, want, "frame {i}");
        assert!(frames[i].all("manyfold.mc.network").is_empty(), "frame {i}: a GROUP has no network id");
    }
    // REGISTER's KLV (auto-group) and ACK's KLV (behind), set and clear.
    let flag = |i: usize, f: &str| frames[i].one(f).to_string();
    assert_eq!((flag(41, "manyfold.mc.auto_group"), flag(13, "manyfold.mc.auto_group")), ("1".into(), "0".into()));
    assert_eq!(frames[41].one("manyfold.mc.network"), "0x000a0b0c");
    assert_eq!((flag(42, "manyfold.mc.behind"), flag(17, "manyfold.mc.behind")), ("1".into(), "0".into()));
    // The loss-signature trailers: version, count, each block and its bits set.
    let trailer = |i: usize| {
        let fr = &frames[i];
        (
            fr.one("manyfold.mc.signatures.version"),
            fr.one("manyfold.mc.signatures.count"),
            fr.all("manyfold.mc.signature.block").join(","),
            fr.all("manyfold.mc.signature.losses").join(","),
        )
    };
    assert_eq!(trailer(43), ("1", "1", "5".into(), "1".into()));
    assert_eq!(trailer(44), ("1", "4", "5,6,7,8".into(), "1,65,3,0".into()));
    assert_eq!(trailer(45), ("1", "1", "5".into(), "1".into()), "after the error code");
    assert_eq!(frames[45].one("manyfold.error"), "26");
    assert_eq!(trailer(46), ("1", "1", "5".into(), "1".into()), "spec §16.12's example");
    // Malformed ones show the count they carry and decode no entry.
    assert_eq!(trailer(47), ("1", "2", String::new(), String::new()));
    assert_eq!(trailer(48), ("1", "0", String::new(), String::new()));
    assert_eq!(trailer(49), ("1", "5", String::new(), String::new()));
    // Another version is named, noted and not decoded.
    assert_eq!(trailer(51), ("2", "", String::new(), String::new()));
    assert!(
        frames[51].all("_ws.expert.message").iter().any(|m| m.contains("a trailer of another version")),
        "{:?}",
        frames[51].all("_ws.expert.message")
    );
    assert_eq!(trailer(52), ("", "", String::new(), String::new()), "no payload, no trailer");
    for (i, fr) in frames.iter().enumerate().take(53).skip(38) {
        let held = fr.all("manyfold.mc.held").len();
        assert_eq!(held, usize::from(i >= 43), "frame {i}: held only on STATUS");
    }
    // spec §3.3.2: the TX_ECHO feature bit, beside ACK_FREQUENCY.
    let features = |i: usize| {
        ["manyfold.params.features.ack_frequency", "manyfold.params.features.tx_echo"].map(|f| frames[i].one(f))
    };
    assert_eq!(features(56), ["1", "1"]);
    assert_eq!(features(0), ["0", "0"]);
    // spec §5.4.2: a RESENT chunk first, with its count; a lone FIN's
    // repeat is still a FIN; a count of 0 is shown and flagged; one that
    // is not first is noted as ignored.
    let resent = |i: usize| (frames[i].all("manyfold.chunk.kind").join(","), frames[i].one("manyfold.resent.count"));
    assert_eq!(resent(57), ("9,0".into(), "2"));
    assert_eq!(resent(58), ("9".into(), "1"));
    assert_eq!(frames[58].one("manyfold.length"), "2");
    assert_eq!(resent(59), ("9".into(), "0"));
    assert_eq!(resent(60), ("0,9".into(), "1"));
    assert!(
        frames[60].all("_ws.expert.message").iter().any(|m| m.contains("not the first chunk: manyfold ignores it")),
        "{:?}",
        frames[60].all("_ws.expert.message")
    );
    // spec §3.3.1: the count byte's ECHO bit and ranges, then the echo.
    let sack = |i: usize| {
        [
            "manyfold.sack.echo",
            "manyfold.sack.count",
            "manyfold.sack.start",
            "manyfold.sack.end",
            "manyfold.sack.echo.seq",
            "manyfold.sack.echo.count",
        ]
        .map(|f| frames[i].all(f).join(","))
    };
    assert_eq!(sack(1), ["0", "2", "10,20", "12,25", "", ""], "no echo");
    assert_eq!(sack(61), ["1", "0", "", "", "1933583578", "0"], "only the echo");
    assert_eq!(frames[61].one("manyfold.length"), "6", "a pure ack of 30 bytes");
    assert_eq!(sack(62), ["1", "2", "10,20", "12,25", "9", "3"]);
    // Broken count bytes show the bit and the count they carry.
    assert_eq!(sack(63), ["0", "0", "", "", "", ""]);
    assert_eq!(sack(64), ["1", "17", "", "", "", ""]);
    // The handshake: a resent SYN's transmission in its parameters, and
    // the SYN-ACK's echo of it before its own.
    assert_eq!(frames[66].one("manyfold.params.features.transmission"), "2");
    assert_eq!(frames[66].one("manyfold.params.conn_id"), "0x00001234");
    assert_eq!(frames[0].one("manyfold.params.features.transmission"), "0");
    assert_eq!(sack(67), ["1", "0", "", "", "7", "2"]);
    assert_eq!(frames[67].all("manyfold.params.conn_id"), ["0x00005678"]);
    assert!(!frames[67].all("manyfold.cookie.mac").is_empty());
    // The Info column names them as it does SACK ranges and ACK_FREQUENCY.
    let info = info_column(&pcap);
    assert_eq!(info.len(), frames.len());
    for (i, want) in [
        (55, "ACKFREQ#3 10pkts/25000us"),
        (57, "RESENT#2 s7@0+2"),
        (58, "RESENT#1"),
        (61, " ECHO=1933583578/0"),
        (62, " SACK=10-12,20-25 ECHO=9/3"),
    ] {
        assert!(info[i].contains(want), "frame {i}: {want:?} not in {:?}", info[i]);
    }
    assert!(!info[1].contains(" ECHO=") && !info[61].contains("SACK="), "{:?} {:?}", info[1], info[61]);
}

/// Each frame's Info column, as the dissector sets it.
fn info_column(pcap: &Path) -> Vec<String> {
    let mut cmd = Command::new("tshark");
    cmd.args(["-n", "-r"]).arg(pcap).arg("-X").arg(format!("lua_script:{LUA}"));
    cmd.args(["-o", "udp.try_heuristic_first:TRUE", "-o", r#"gui.column.format:"Info","%i""#]);
    let out = run_bounded(cmd, Duration::from_secs(60));
    assert!(out.status.success(), "tshark failed on {}:\n{}", pcap.display(), out.stderr);
    out.stdout.lines().map(|l| l.trim().to_string()).collect()
}

#[test]
fn copying_both_lua_files_into_a_plugins_folder_installs_the_whole_dissector() {
    if skipped_without_tshark() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let pcap = tmp.path().join("crafted.pcap");
    let datagrams: Vec<Vec<u8>> = crafted().into_iter().map(|c| c.0).collect();
    write_pcap(&pcap, 7008, &datagrams);
    // Every .lua file of the directory is one README.md tells to copy.
    let mut found: Vec<String> = std::fs::read_dir(LUA_DIR)
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".lua"))
        .collect();
    found.sort();
    assert_eq!(found, LUA_FILES, "tools/wireshark's files changed: update LUA_FILES and README.md");
    let home = tmp.path().join("home");
    let plugins = home.join(".local/lib/wireshark/plugins");
    std::fs::create_dir_all(&plugins).unwrap();
    for name in LUA_FILES {
        std::fs::copy(Path::new(LUA_DIR).join(name), plugins.join(name)).unwrap();
    }
    // Installed, it decodes every field exactly as when loaded for one run
    // (and `dissect_loaded` asserts tshark said nothing on stderr).
    let by_script = dissect(&pcap, &[]);
    let installed = dissect_loaded(&pcap, &[], Load::Plugins { home: &home });
    assert_eq!(installed.len(), by_script.len());
    for (a, b) in installed.iter().zip(&by_script) {
        let protocols = a.one("frame.protocols");
        assert!(protocols.ends_with(":udp:manyfold"), "frame {}: {protocols} when installed", a.number());
        for f in FIELDS {
            assert_eq!(a.all(f), b.all(f), "frame {}: {f} differs installed and by script", a.number());
        }
    }
    // manyfold.lua alone: tshark names the missing file.
    std::fs::remove_file(plugins.join("manyfold_mcast.lua")).unwrap();
    let mut cmd = Command::new("tshark");
    cmd.args(["-n", "-c", "1", "-r"]).arg(&pcap).env("HOME", &home).env_remove("XDG_CONFIG_HOME");
    let out = run_bounded(cmd, Duration::from_secs(60));
    assert!(
        out.stderr.contains("manyfold.lua needs manyfold_mcast.lua in its own directory"),
        "no error naming the missing file:\n{}",
        out.stderr
    );
}
