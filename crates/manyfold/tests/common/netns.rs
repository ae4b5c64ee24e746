//! A network namespace of a test's own (root only), created and always
//! deleted, and a thread that runs inside it: every socket that thread
//! makes lives in the namespace. Only its loopback (127.0.0.1) is used.

use std::process::{Command, Stdio};

/// Runs a command, with `input` on its stdin; its stderr is the error.
pub fn sh(args: &[&str], input: Option<&str>) -> Result<(), String> {
    let mut child = Command::new(args[0])
        .args(&args[1..])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("{}: {e}", args.join(" ")))?;
    if let (Some(text), Some(mut stdin)) = (input, child.stdin.take()) {
        use std::io::Write;
        stdin.write_all(text.as_bytes()).map_err(|e| e.to_string())?;
    }
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!("{}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()));
    }
    Ok(())
}

/// The namespace, deleted on drop (also when the test fails).
pub struct Netns(pub String);

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = sh(&["ip", "netns", "del", &self.0], None);
    }
}

/// Why a namespace test cannot run here, if it cannot: not root, or one
/// of `tools` missing.
pub fn unavailable(tools: &[&'static str]) -> Option<String> {
    let root = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("Uid:")).map(|l| l.split_whitespace().nth(2) == Some("0")))
        .unwrap_or(false);
    if !root {
        return Some("needs root (network namespaces)".into());
    }
    tools.iter().find(|t| Command::new(t).arg("-V").output().is_err()).map(|t| format!("needs {t}"))
}

/// Creates namespace `name` with its loopback up, lets `setup` configure
/// it (by name), then runs `test` on a thread inside it and deletes it.
pub fn in_namespace<T: Send + 'static>(
    name: String,
    setup: impl FnOnce(&str) -> Result<(), String>,
    test: impl FnOnce(&str) -> T + Send + 'static,
) -> T {
    sh(&["ip", "netns", "add", &name], None).expect("ip netns add");
    let ns = Netns(name);
    sh(&["ip", "-n", &ns.0, "link", "set", "lo", "up"], None).expect("lo up");
    setup(&ns.0).expect("namespace setup");
    let inside = ns.0.clone();
    let out = std::thread::spawn(move || {
        let file = std::fs::File::open(format!("/var/run/netns/{inside}")).expect("the namespace");
        nix::sched::setns(file, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
        test(&inside)
    })
    .join();
    drop(ns);
    out.expect("the test thread")
}
