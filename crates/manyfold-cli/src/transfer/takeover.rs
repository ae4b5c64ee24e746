//! The newest attempt wins: a transfer that resumes a file whose partial
//! file an older transfer of this receiver still holds (its sender was
//! killed and its connection has not timed out yet) tells the older one
//! to let go, so a re-run does not wait for the older one's timeout.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

/// Final path -> the transfer claiming it (its ticket and its bell).
type Registry = HashMap<PathBuf, (u64, Arc<Notify>)>;

static REGISTRY: Mutex<Option<Registry>> = Mutex::new(None);
static TICKETS: AtomicU64 = AtomicU64::new(1);

/// The files one transfer writes; released when dropped.
#[derive(Debug)]
pub struct Claims {
    ticket: u64,
    bell: Arc<Notify>,
    paths: Vec<PathBuf>,
}

impl Claims {
    pub fn new() -> Claims {
        Claims { ticket: TICKETS.fetch_add(1, Ordering::Relaxed), bell: Arc::new(Notify::new()), paths: Vec::new() }
    }

    /// Claims `path`; an older transfer claiming it is told to stop.
    /// Returns whether there was one.
    pub fn claim(&mut self, path: PathBuf) -> bool {
        let mut registry = REGISTRY.lock().unwrap_or_else(|e| e.into_inner());
        let older =
            registry.get_or_insert_with(HashMap::new).insert(path.clone(), (self.ticket, Arc::clone(&self.bell)));
        self.paths.push(path);
        match older {
            Some((_, bell)) => {
                bell.notify_one();
                true
            }
            None => false,
        }
    }

    /// Completes when a newer transfer claimed one of our files.
    pub async fn taken_over(&self) {
        self.bell.notified().await;
    }
}

impl Drop for Claims {
    fn drop(&mut self) {
        let mut registry = REGISTRY.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(registry) = registry.as_mut() {
            for path in &self.paths {
                if registry.get(path).is_some_and(|(t, _)| *t == self.ticket) {
                    registry.remove(path);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_newer_claim_tells_the_older_and_a_released_path_is_free() {
        let path = PathBuf::from("/nonexistent/takeover-test");
        let mut older = Claims::new();
        assert!(!older.claim(path.clone()));
        let mut newer = Claims::new();
        assert!(newer.claim(path.clone()));
        tokio::time::timeout(std::time::Duration::from_secs(1), older.taken_over()).await.expect("older told");
        drop(older);
        drop(newer);
        assert!(!Claims::new().claim(path), "released with the newer claim");
    }
}
