//! The counting global allocator of the allocation tests (issue 21: "no
//! malloc per session on the hot path", "no allocation per message"):
//! manyfold-proto's tests/session_allocs.rs and manyfold's
//! tests/{session,message}_allocs.rs install [`Counting`] as their
//! `#[global_allocator]` and count what a measured run allocates.
//!
//! Every call goes to the system allocator unchanged; while counting is on
//! ([`start`] … [`stop`]), each allocation and reallocation in the process
//! is counted with its size, and apart for the side [`set_side`] last
//! named (a test that drives a sender's and a receiver's calls in turn
//! counts them apart). With [`record_sites`] on, each counted
//! allocation also records where it came from (the first frames of its
//! backtrace inside manyfold's crates), and [`sites`] lists them most
//! frequent first: how a test finds what is left to remove.
//!
//! Dev-only (`publish = false`): never a normal dependency of a library.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

/// The counting allocator: install it with
/// `#[global_allocator] static GLOBAL: manyfold_testalloc::Counting = manyfold_testalloc::Counting;`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Counting;

static COUNTING: AtomicBool = AtomicBool::new(false);
static RECORDING: AtomicBool = AtomicBool::new(false);
static ALLOCS: AtomicU64 = AtomicU64::new(0);
static BYTES: AtomicU64 = AtomicU64::new(0);
/// Bytes allocated and not yet freed, in the whole process, always kept
/// (counting on or off): what a test reads to see how much memory a
/// state it built holds ([`live_bytes`]).
static LIVE: AtomicI64 = AtomicI64::new(0);
/// The side whose calls run now, and the allocations counted for each.
static SIDE: AtomicUsize = AtomicUsize::new(0);
static BY_SIDE: [AtomicU64; 2] = [AtomicU64::new(0), AtomicU64::new(0)];
/// Allocation sites while recording: the backtrace's manyfold frames, and
/// how many allocations came from there.
static SITES: Mutex<Option<HashMap<String, u64>>> = Mutex::new(None);

thread_local! {
    /// Set while this thread records a site: the backtrace and the map
    /// allocate themselves, and those are neither counted nor recorded.
    static IN_RECORD: Cell<bool> = const { Cell::new(false) };
}

/// What a measured run allocated.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Allocations and reallocations.
    pub allocs: u64,
    /// Bytes asked for by them (a reallocation counts its new size).
    pub bytes: u64,
    /// The allocations of each side (see [`set_side`]).
    pub by_side: [u64; 2],
}

/// Counts what follows for side `side` (0 or 1) until the next call.
pub fn set_side(side: usize) {
    SIDE.store(side & 1, Ordering::Relaxed);
}

/// Zeroes the counters and starts counting every allocation in the process.
pub fn start() {
    ALLOCS.store(0, Ordering::Relaxed);
    BYTES.store(0, Ordering::Relaxed);
    BY_SIDE.iter().for_each(|a| a.store(0, Ordering::Relaxed));
    if RECORDING.load(Ordering::Relaxed) {
        IN_RECORD.with(|r| r.set(true));
        *SITES.lock().unwrap_or_else(|e| e.into_inner()) = Some(HashMap::new());
        IN_RECORD.with(|r| r.set(false));
    }
    COUNTING.store(true, Ordering::SeqCst);
}

/// Stops counting; what was counted since [`start`].
pub fn stop() -> Counts {
    COUNTING.store(false, Ordering::SeqCst);
    Counts {
        allocs: ALLOCS.load(Ordering::Relaxed),
        bytes: BYTES.load(Ordering::Relaxed),
        by_side: [BY_SIDE[0].load(Ordering::Relaxed), BY_SIDE[1].load(Ordering::Relaxed)],
    }
}

/// Heap bytes the process holds now (asked for, not yet freed; the
/// allocator's own rounding and headers not included): the difference
/// across building some state is what that state holds.
pub fn live_bytes() -> i64 {
    LIVE.load(Ordering::Relaxed)
}

/// Whether counted allocations also record their sites (slow: a
/// backtrace each). A test turns it on when `MANYFOLD_ALLOC_SITES` is set
/// in its environment (see [`record_sites_from_env`]).
pub fn record_sites(on: bool) {
    RECORDING.store(on, Ordering::SeqCst);
}

/// [`record_sites`] on when the environment variable `MANYFOLD_ALLOC_SITES`
/// is set: `MANYFOLD_ALLOC_SITES=1 cargo test --test session_allocs -- --nocapture`.
pub fn record_sites_from_env() -> bool {
    let on = std::env::var_os("MANYFOLD_ALLOC_SITES").is_some();
    record_sites(on);
    on
}

/// The sites recorded by the last run, most allocations first.
pub fn sites() -> Vec<(String, u64)> {
    IN_RECORD.with(|r| r.set(true));
    let mut v: Vec<(String, u64)> = SITES
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
        .map(|m| m.iter().map(|(k, n)| (k.clone(), *n)).collect())
        .unwrap_or_default();
    IN_RECORD.with(|r| r.set(false));
    v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    v
}

/// Prints the recorded sites, `per` runs (sessions, messages) dividing
/// their counts; nothing when sites were not recorded.
pub fn print_sites(per: u64) {
    let sites = sites();
    for (site, n) in sites.iter().take(60) {
        println!("{:>8.2} per run  {site}", *n as f64 / per.max(1) as f64);
    }
}

/// Frames of the backtrace that name manyfold's code, innermost first, the
/// allocator's own and std's left out: at most six, joined by " < ".
fn site() -> String {
    let bt = std::backtrace::Backtrace::force_capture().to_string();
    let mut frames: Vec<&str> = Vec::new();
    let mut lines = bt.lines();
    while let Some(line) = lines.next() {
        let line = line.trim();
        // "N: symbol" then "at path:line:col".
        let Some((_, symbol)) = line.split_once(": ") else { continue };
        if !symbol.contains("manyfold") || symbol.contains("manyfold_testalloc") {
            continue;
        }
        let at = lines.clone().next().map(str::trim).filter(|l| l.starts_with("at "));
        let place = at.and_then(|l| l.rsplit_once("/src/").map(|(_, p)| p)).unwrap_or("");
        frames.push(if place.is_empty() { symbol } else { place });
        if frames.len() == 6 {
            break;
        }
    }
    if frames.is_empty() {
        "(outside manyfold)".to_owned()
    } else {
        frames.join(" < ")
    }
}

fn count(size: usize) {
    if !COUNTING.load(Ordering::Relaxed) {
        return;
    }
    if IN_RECORD.try_with(Cell::get).unwrap_or(true) {
        return;
    }
    ALLOCS.fetch_add(1, Ordering::Relaxed);
    BYTES.fetch_add(size as u64, Ordering::Relaxed);
    BY_SIDE[SIDE.load(Ordering::Relaxed) & 1].fetch_add(1, Ordering::Relaxed);
    if RECORDING.load(Ordering::Relaxed) {
        IN_RECORD.with(|r| r.set(true));
        let s = site();
        if let Some(map) = SITES.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
            *map.entry(s).or_insert(0) += 1;
        }
        IN_RECORD.with(|r| r.set(false));
    }
}

// SAFETY: every call is passed to the system allocator unchanged; the
// wrapper only counts (relaxed atomics). Its own allocations (a site's
// backtrace and map entry, only while recording) happen with the
// thread's IN_RECORD flag set, so they re-enter here without recursing.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        LIVE.fetch_add(layout.size() as i64, Ordering::Relaxed);
        // SAFETY: the caller's layout contract is the system allocator's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        LIVE.fetch_add(layout.size() as i64, Ordering::Relaxed);
        // SAFETY: as for `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as i64, Ordering::Relaxed);
        // SAFETY: `ptr` came from `System.alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(new_size);
        LIVE.fetch_add(new_size as i64 - layout.size() as i64, Ordering::Relaxed);
        // SAFETY: as for `dealloc`, and `new_size` is the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}
