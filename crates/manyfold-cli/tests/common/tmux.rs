//! A terminal driven through tmux (keys in, screen out), for the tests
//! of what a person sees: progress bars and their end, and `ftp`'s
//! interactive shell.

use std::process::Command;
use std::time::{Duration, Instant};

/// Whether tmux is there; tests that need it say so and pass when not.
pub fn available() -> bool {
    Command::new("tmux").arg("-V").output().is_ok()
}

/// A tmux session running one command; killed on drop.
pub struct Tmux(String);

impl Tmux {
    /// `command` in a new session of 150 × 10 characters.
    pub fn run(name: &str, command: &str) -> Tmux {
        Tmux::run_sized(name, command, 150, 10)
    }

    /// `command` in a new session of `width` × `height` characters; the
    /// session stays 30 s after the command ends, so that its last screen
    /// can be read.
    pub fn run_sized(name: &str, command: &str, width: u16, height: u16) -> Tmux {
        let (x, y) = (width.to_string(), height.to_string());
        let ok = Command::new("tmux")
            .args(["new-session", "-d", "-s", name, "-x", &x, "-y", &y, &format!("{command}; sleep 30")])
            .status()
            .unwrap();
        assert!(ok.success(), "tmux new-session failed");
        Tmux(name.to_string())
    }

    /// Types `keys` (tmux key names: "Enter", "Tab", "C-c", or text).
    #[allow(dead_code)] // not every test file types
    pub fn keys(&self, keys: &[&str]) {
        let ok = Command::new("tmux").args(["send-keys", "-t", &self.0]).args(keys).status().unwrap();
        assert!(ok.success(), "tmux send-keys failed");
    }

    pub fn screen(&self) -> String {
        let out = Command::new("tmux").args(["capture-pane", "-p", "-t", &self.0]).output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Waits until the screen shows `text`, at most `limit`.
    pub fn wait_for(&self, text: &str, limit: Duration) -> String {
        self.wait_until(&format!("{text:?}"), limit, |screen| screen.contains(text))
    }

    /// Waits until `ready` holds of the screen, at most `limit`; `what`
    /// names it when it never does.
    pub fn wait_until(&self, what: &str, limit: Duration, ready: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + limit;
        loop {
            let screen = self.screen();
            if ready(&screen) {
                return screen;
            }
            assert!(Instant::now() < deadline, "{what} never appeared; the screen:\n{screen}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux").args(["kill-session", "-t", &self.0]).status();
    }
}
