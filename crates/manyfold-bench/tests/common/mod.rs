//! What the lab's root-only tests share.

use std::process::Command;

/// Why a scenario that builds network namespaces and TUN devices cannot
/// run here (not root, or no /dev/net/tun), if it cannot.
pub fn namespaces_unavailable(scenario: &str) -> Option<String> {
    let root = Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false);
    if !root {
        return Some(format!("not root (the {scenario} scenario creates network namespaces)"));
    }
    if !std::path::Path::new("/dev/net/tun").exists() {
        return Some("/dev/net/tun is missing".into());
    }
    None
}
