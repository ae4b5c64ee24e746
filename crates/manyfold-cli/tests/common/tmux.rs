//! A terminal driven through tmux (keys in, screen out), for the tests
//! of what a person sees: progress bars and their end.

use std::process::Command;
use std::time::{Duration, Instant};

/// Whether tmux is there; tests that need it say so and pass when not.
pub fn available() -> bool {
    Command::new("tmux").arg("-V").output().is_ok()
}

/// A tmux session running one command; killed on drop.
pub struct Tmux(String);

impl Tmux {
    pub fn run(name: &str, command: &str) -> Tmux {
        let ok = Command::new("tmux")
            .args(["new-session", "-d", "-s", name, "-x", "150", "-y", "10", &format!("{command}; sleep 30")])
            .status()
            .unwrap();
        assert!(ok.success(), "tmux new-session failed");
        Tmux(name.to_string())
    }

    pub fn screen(&self) -> String {
        let out = Command::new("tmux").args(["capture-pane", "-p", "-t", &self.0]).output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    pub fn wait_for(&self, text: &str, limit: Duration) -> String {
        let deadline = Instant::now() + limit;
        loop {
            let screen = self.screen();
            if screen.contains(text) {
                return screen;
            }
            assert!(Instant::now() < deadline, "{text:?} never appeared; the screen:\n{screen}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux").args(["kill-session", "-t", &self.0]).status();
    }
}
