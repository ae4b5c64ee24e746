//! What the scenarios that run children of this binary share to know a
//! child is up: the file a child writes once it is ready, and the wait
//! for it (fanout, handshake, sessions).

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

/// Waits until `path` exists (a child writes it once ready, by rename).
pub fn wait_for_file(path: &Path, limit: Duration) -> Result<()> {
    let start = Instant::now();
    while start.elapsed() < limit {
        if path.exists() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    bail!("{} did not appear within {limit:?}", path.display())
}

/// Writes `body` to `path` whole: a reader polling for `path` never sees
/// it half written.
pub fn write_ready(path: &Path, body: &str) -> Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, body).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("renaming to {}", path.display()))?;
    Ok(())
}
