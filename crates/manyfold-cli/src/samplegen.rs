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
    println!(
        "wrote {} ({} bytes, seed {}) to {} in {}, {}",
        human_bytes(args.size),
        args.size,
        args.seed,
        args.file.display(),
        human_duration(elapsed),
        human_rate(args.size, elapsed),
    );
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

fn write_stream(file: &mut File, size: u64, seed: u64) -> std::io::Result<()> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut block = vec![0u8; BLOCK];
    let mut left = size;
    while left > 0 {
        let n = left.min(BLOCK as u64) as usize;
        rng.fill_bytes(&mut block[..n]);
        file.write_all(&block[..n])?;
        left -= n as u64;
    }
    file.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

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
