//! `manyfold samplegen`: sample files of pseudo-random bytes for transfer
//! tests (paper 04 §3, librusp's `samplegen`).
//!
//! The bytes are the ChaCha8 keystream of the seed, generated in large
//! blocks, so the same SIZE and `--seed` always give the same file. The file
//! is written under a temporary name in the target directory, synced, and
//! renamed into place: FILE is either absent or complete.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::Args;
use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::fsutil::PartFile;
use crate::size::{human_bytes, human_duration, human_rate, size_arg};

/// Bytes generated and written per block.
const BLOCK: usize = 4 << 20;

#[derive(Args, Debug)]
pub struct SamplegenArgs {
    /// Size of the file: plain bytes (4096) or with a unit: 512k, 10MB, 1.5G
    /// (powers of 1000), 64KiB, 1GiB (powers of 1024).
    #[arg(value_name = "SIZE", value_parser = size_arg)]
    pub size: u64,

    /// File to create (replaced if it exists).
    #[arg(value_name = "FILE")]
    pub file: PathBuf,

    /// Seed of the pseudo-random generator: the same seed and size always
    /// produce the same bytes.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
}

pub fn run(args: &SamplegenArgs) -> Result<()> {
    let start = Instant::now();
    generate(&args.file, args.size, args.seed)?;
    let elapsed = start.elapsed();
    // Text only: -q prints nothing.
    crate::report::say(&format_args!(
        "wrote {} ({} bytes, seed {}) to {} in {}, {}",
        human_bytes(args.size),
        args.size,
        args.seed,
        args.file.display(),
        human_duration(elapsed),
        human_rate(args.size, elapsed),
    ));
    Ok(())
}

/// Writes `size` pseudo-random bytes from `seed` to `path`, atomically.
pub fn generate(path: &Path, size: u64, seed: u64) -> Result<()> {
    if path.is_dir() {
        bail!("{} is a directory; give a file name", path.display());
    }
    let part = PartFile::create(path)?;
    let mut file = part.file().try_clone().context("cannot duplicate file handle")?;
    write_stream(&mut file, size, seed).with_context(|| format!("cannot write {}", part.path().display()))?;
    part.commit(true)
}

/// Generates on up to four threads and writes on this one: block `i` is
/// the keystream from byte `i * BLOCK` on, so the bytes do not depend on the
/// number of threads.
fn write_stream(file: &mut File, size: u64, seed: u64) -> std::io::Result<()> {
    let blocks = size.div_ceil(BLOCK as u64);
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).clamp(1, 4) as u64;
    std::thread::scope(|scope| {
        // One channel per generator, read round-robin: blocks arrive in order.
        let receivers: Vec<_> = (0..threads)
            .map(|t| {
                let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<u8>>(2);
                scope.spawn(move || {
                    let mut rng = ChaCha8Rng::seed_from_u64(seed);
                    for i in (t..blocks).step_by(threads as usize) {
                        let start = i * BLOCK as u64;
                        let len = (size - start).min(BLOCK as u64) as usize;
                        // ChaCha words are 4 bytes; BLOCK is a multiple of 4.
                        rng.set_word_pos(u128::from(start / 4));
                        let mut block = vec![0u8; len];
                        rng.fill_bytes(&mut block);
                        if tx.send(block).is_err() {
                            return; // the writer failed and stopped
                        }
                    }
                });
                rx
            })
            .collect();
        for i in 0..blocks {
            // `demo` generates inside the CLI's runtime: a signal stops it
            // (the generators stop when their channels close).
            if crate::net::lifecycle::signal().is_some() {
                return Err(std::io::Error::new(std::io::ErrorKind::Interrupted, "interrupted"));
            }
            let block = receivers[(i % threads) as usize].recv().expect("generator thread ended early");
            file.write_all(&block)?;
        }
        Ok::<(), std::io::Error>(())
    })?;
    file.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_continue_one_keystream() {
        // Generated in parallel blocks, the file is still one ChaCha8 stream.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let size = 2 * BLOCK as u64 + 12_345;
        generate(&path, size, 99).unwrap();
        let mut expected = vec![0u8; size as usize];
        ChaCha8Rng::seed_from_u64(99).fill_bytes(&mut expected);
        assert!(std::fs::read(&path).unwrap() == expected);
    }

    #[test]
    fn same_seed_same_bytes_and_prefix_stable() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a");
        let b = dir.path().join("b");
        let c = dir.path().join("c");
        generate(&a, 10_000, 7).unwrap();
        generate(&b, 10_000, 7).unwrap();
        generate(&c, 10_000, 8).unwrap();
        let a = std::fs::read(a).unwrap();
        assert_eq!(a.len(), 10_000);
        assert_eq!(a, std::fs::read(b).unwrap());
        assert_ne!(a, std::fs::read(c).unwrap());
        // No temporary file is left beside the result.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 3);
    }
}
