//! Defects a user review found in the CLI, each tried as a user would on
//! 127.0.0.1 (multicast: in network namespaces, as root) and shown fixed:
//! output into a pipe whose reader is gone, -q, the help's exit statuses,
//! negative values, and a datagram too long for the interface's MTU.

mod common;

use std::io::Read;
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use common::netns::{sh, Lab};
use common::{manyfold, recv_into, run_args, samplegen, Running};

const LIMIT: Duration = Duration::from_secs(60);

/// Runs `cmd` with its standard output a pipe whose reader is already
/// closed (`manyfold ... | true`); its status and stderr, within `LIMIT`.
fn into_closed_pipe(mut cmd: Command) -> (ExitStatus, String) {
    let (reader, writer) = std::io::pipe().expect("pipe");
    drop(reader);
    let mut child = cmd.stdout(writer).stderr(Stdio::piped()).spawn().expect("spawn manyfold");
    let mut err = child.stderr.take().expect("piped stderr");
    let stderr = thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let deadline = Instant::now() + LIMIT;
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            panic!("did not finish within {LIMIT:?}");
        }
        thread::sleep(Duration::from_millis(20));
    };
    (status, stderr.join().unwrap_or_default())
}

fn assert_quiet_end((status, stderr): (ExitStatus, String)) {
    assert_ne!(status.code(), Some(101), "panicked:\n{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(!stderr.contains("Broken pipe"), "{stderr}");
}

#[test]
fn samplegen_into_a_closed_pipe_ends_quietly() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("xx");
    let mut cmd = manyfold();
    cmd.args(["samplegen", "1k"]).arg(&file);
    assert_quiet_end(into_closed_pipe(cmd));
    assert_eq!(std::fs::metadata(&file).unwrap().len(), 1000, "the file is written all the same");
}

#[test]
fn send_json_into_a_closed_pipe_ends_quietly() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("m.bin");
    samplegen(&src, "10k", 1);
    let inbox = tmp.path().join("inbox");
    std::fs::create_dir(&inbox).unwrap();
    let (receiver, addr) = recv_into(&inbox, &["--once"]);
    let mut cmd = manyfold();
    cmd.args(["send", "--json", "--to", &addr]).arg(&src);
    assert_quiet_end(into_closed_pipe(cmd));
    receiver.wait(LIMIT).assert_success();
}

#[test]
fn ftp_ls_into_a_closed_pipe_ends_quietly() {
    let tmp = tempfile::tempdir().unwrap();
    for i in 0..20 {
        std::fs::write(tmp.path().join(format!("f{i}")), b"x").unwrap();
    }
    let mut server = Running::spawn(ftp_server(tmp.path()));
    let addr = server.listening_addr().to_string();
    let mut cmd = manyfold();
    cmd.args(["ftp", &addr, "ls"]);
    assert_quiet_end(into_closed_pipe(cmd));
    // And the listing itself is there for a reader that stays.
    let listed = run_args(&["ftp", &addr, "ls"], LIMIT);
    assert!(listed.assert_success().stdout.contains("f19"), "{listed}");
}

fn ftp_server(root: &Path) -> Command {
    let mut cmd = manyfold();
    cmd.args(["ftp-server", "--listen", "127.0.0.1:0", "--root"]).arg(root);
    cmd
}

#[test]
fn samplegen_quiet_prints_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("yy");
    let out = run_args(&["-q", "samplegen", "1k", file.to_str().unwrap()], LIMIT);
    out.assert_success();
    assert_eq!(out.stdout, "", "{out}");
    assert_eq!(std::fs::metadata(&file).unwrap().len(), 1000);
    // Without -q, it says what it wrote.
    let out = run_args(&["samplegen", "1k", file.to_str().unwrap()], LIMIT);
    assert!(out.assert_success().stdout.starts_with("wrote 1.00 kB"), "{out}");
}

#[test]
fn help_names_every_exit_status_and_the_demo_its_receivers() {
    let help = run_args(&["--help"], LIMIT);
    let text = help.assert_success().stdout.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(text.contains("2 usage error"), "{help}");
    assert!(text.contains("Send a generated file to three receivers"), "{help}");
    // And a usage error does exit 2.
    assert_eq!(run_args(&["send", "--no-such-flag"], LIMIT).status.code(), Some(2));
}

#[test]
fn negative_rates_and_counts_are_refused_naming_the_option_and_range() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("f");
    std::fs::write(&file, b"x").unwrap();
    let f = file.to_str().unwrap();
    for (args, option) in [
        (&["send", f, "--to", "127.0.0.1:9", "--rate", "-5MB"][..], "'--rate <RATE>'"),
        (&["mcast", "send", "--group", "239.1.2.3:7020", "--rate", "-5MB", f], "'--rate <RATE>'"),
        (&["mcast", "send", "--group", "239.1.2.3:7020", "--min-rate", "-1Mbit", f], "'--min-rate <RATE>'"),
    ] {
        let out = run_args(args, LIMIT);
        assert_eq!(out.status.code(), Some(2), "{out}");
        assert!(out.stderr.contains(option) && out.stderr.contains("must be above 0"), "{out}");
    }
    let out = run_args(&["mcast", "send", "--group", "239.1.2.3:7020", "--receivers", "-1", f], LIMIT);
    assert_eq!(out.status.code(), Some(2), "{out}");
    assert!(out.stderr.contains("--receivers <N>': -1 is out of range: at least 1 receiver"), "{out}");
}

/// Multicast out an interface of MTU 1400 with the default --max-datagram
/// (1452): the send error names the flag and the size that fits.
#[test]
fn mcast_datagrams_too_long_for_the_mtu_name_max_datagram() {
    let root = Command::new("id").arg("-u").output().is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
    if !root || Command::new("ip").arg("-V").output().is_err() {
        eprintln!("skipped: network namespaces need root and the ip command");
        return;
    }
    let lab = Lab::new(2).expect("namespaces");
    sh(&["ip", "-n", &lab.host(0), "link", "set", "dev", &lab.iface(0), "mtu", "1400"]).expect("set the MTU");
    let tmp = tempfile::tempdir().unwrap();
    let (file, dir) = (tmp.path().join("big.bin"), tmp.path().join("r1"));
    samplegen(&file, "200k", 3);
    std::fs::create_dir(&dir).unwrap();
    let group = "239.77.9.1:7190";
    let mut recv = lab.exec(1);
    recv.args(["mcast", "recv", "--group", group, "--iface", &lab.iface(1), "--wait", "30", "--dir"]).arg(&dir);
    let _receiver = Running::spawn(recv);
    let mut send = lab.exec(0);
    send.args(["mcast", "send", "--group", group, "--iface", &lab.iface(0), "--receivers", "1", "--wait", "10"]);
    send.arg(&file);
    let sent = Running::spawn(send).wait(LIMIT);
    sent.assert_failure();
    let hint = format!("{}'s MTU of 1400 bytes: give --max-datagram 1372 or less", lab.iface(0));
    assert!(sent.stderr.contains(&hint), "{sent}");
}
