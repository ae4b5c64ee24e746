//! Keys for protected connections (spec §19) as the CLI holds them: the
//! key file behind `--key-file`, the peers file behind `--peers-file`, the
//! [`SecurityConfig`] they make, `manyfold keygen` and `manyfold pubkey`,
//! and the words reports use for a connection's mode.
//!
//! # Key file
//!
//! Text, one item per line; blank lines and lines starting with `#` are
//! ignored; anything else is refused:
//!
//! ```text
//! # manyfold key file: keep it secret (mode 0600)
//! private-key 3f0c…(64 hex digits)   this host's X25519 private key
//! psk         9a41…(64 hex digits)   a key every peer holds too
//! ```
//!
//! Either line or both. With a `psk` line, only peers holding the same PSK
//! get through the handshake. With `private-key`, this host has a lasting
//! identity (its public key, printed by `manyfold pubkey`) that peers can
//! list in their peers file. Like ssh, the CLI refuses a key file that its
//! group or others may read.
//!
//! # Peers file
//!
//! One public key (64 hex digits) per line, optionally followed by
//! whitespace and a name for people; `#` comments and blank lines are
//! ignored. A peer whose static key is not listed fails authentication.
//! It needs a `private-key` of our own: the peers check ours the same way.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::Args;
use manyfold::{Protection, SecurityConfig};
use manyfold_proto::secure::{hex, public_key, KEY_LEN};

use crate::report::outln;

/// A 32-byte key.
pub type Key = [u8; KEY_LEN];

/// What a key file holds.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct KeyFile {
    pub private_key: Option<Key>,
    pub psk: Option<Key>,
}

impl std::fmt::Debug for KeyFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the secrets themselves.
        f.debug_struct("KeyFile")
            .field("public_key", &self.private_key.map(|k| hex(&public_key(&k))))
            .field("psk", &self.psk.map(|_| "<set>"))
            .finish()
    }
}

/// One line of a peers file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    pub key: Key,
    pub name: Option<String>,
}

/// 64 hex digits as a key.
fn parse_key(text: &str) -> Option<Key> {
    if text.len() != 2 * KEY_LEN || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let mut key = [0u8; KEY_LEN];
    for (i, b) in key.iter_mut().enumerate() {
        *b = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(key)
}

/// Lines that carry something: (line number, trimmed text).
fn content_lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines().enumerate().map(|(i, l)| (i + 1, l.trim())).filter(|(_, l)| !l.is_empty() && !l.starts_with('#'))
}

/// Parses a key file's text; `name` is how errors name the file.
pub fn parse_key_file(text: &str, name: &str) -> Result<KeyFile> {
    let mut keys = KeyFile::default();
    for (n, line) in content_lines(text) {
        let mut words = line.split_whitespace();
        let item = words.next().unwrap_or_default();
        let slot = match item {
            "private-key" => &mut keys.private_key,
            "psk" => &mut keys.psk,
            _ => bail!(
                "{name} line {n}: unknown line {:?}: expected `private-key HEX`, `psk HEX` or a # comment",
                shorten(line)
            ),
        };
        let Some(key) = words.next().and_then(parse_key) else {
            bail!("{name} line {n}: expected 64 hex digits after {item}");
        };
        if words.next().is_some() {
            bail!("{name} line {n}: unexpected text after the key of {item}");
        }
        if slot.replace(key).is_some() {
            bail!("{name} line {n}: a second {item} line (a key file holds one of each)");
        }
    }
    if keys.private_key.is_none() && keys.psk.is_none() {
        bail!("{name} holds no key: expected a `private-key HEX` line, a `psk HEX` line or both");
    }
    Ok(keys)
}

/// Parses a peers file's text; `name` is how errors name the file.
pub fn parse_peers(text: &str, name: &str) -> Result<Vec<Peer>> {
    let mut peers: Vec<(usize, Peer)> = Vec::new();
    for (n, line) in content_lines(text) {
        let (word, rest) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
        let Some(key) = parse_key(word) else {
            bail!(
                "{name} line {n}: expected a public key (64 hex digits), optionally followed by a name; got {:?}",
                shorten(line)
            );
        };
        if let Some((m, _)) = peers.iter().find(|(_, p)| p.key == key) {
            bail!("{name} line {n}: the same key as line {m}");
        }
        let rest = rest.trim();
        peers.push((n, Peer { key, name: (!rest.is_empty()).then(|| rest.to_string()) }));
    }
    if peers.is_empty() {
        // An empty list would mean "any peer that knows the PSK": never by accident.
        bail!("{name} lists no public key (one per line, 64 hex digits); to accept any peer holding the PSK, leave out --peers-file");
    }
    Ok(peers.into_iter().map(|(_, p)| p).collect())
}

/// A line as errors quote it: at most 40 characters.
fn shorten(line: &str) -> String {
    match line.char_indices().nth(40) {
        Some((i, _)) => format!("{}…", &line[..i]),
        None => line.to_string(),
    }
}

/// Reads a file of keys, naming it when that fails.
fn read(path: &Path, what: &str) -> Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("cannot read {what} {}", path.display()))
}

/// Refuses a key file that its group or others may read or write, as ssh
/// refuses such a private key.
fn check_permissions(path: &Path) -> Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let meta = std::fs::metadata(path).with_context(|| format!("cannot read key file {}", path.display()))?;
        let mode = meta.permissions().mode() & 0o7777;
        if mode & 0o077 != 0 {
            bail!(
                "permissions {mode:04o} for {} are too open: run chmod 600 {} (a key file must not be readable by others)",
                path.display(),
                path.display()
            );
        }
    }
    Ok(())
}

/// Loads and checks a key file.
pub fn load_key_file(path: &Path) -> Result<KeyFile> {
    check_permissions(path)?;
    parse_key_file(&read(path, "key file")?, &path.display().to_string())
}

/// Loads a peers file.
pub fn load_peers(path: &Path) -> Result<Vec<Peer>> {
    parse_peers(&read(path, "peers file")?, &path.display().to_string())
}

/// The security configuration `--key-file` and `--peers-file` ask for;
/// `None`: neither given, the papers' plain protocol.
pub fn security_config(key_file: Option<&Path>, peers_file: Option<&Path>) -> Result<Option<SecurityConfig>> {
    let Some(key_path) = key_file else {
        if let Some(p) = peers_file {
            bail!(
                "--peers-file {} needs --key-file: peers are checked during the encrypted handshake, and without \
                 a key file this process runs the plain protocol",
                p.display()
            );
        }
        return Ok(None);
    };
    let keys = load_key_file(key_path)?;
    let known_peers = match peers_file {
        Some(p) => load_peers(p)?.into_iter().map(|p| p.key).collect(),
        None => Vec::new(),
    };
    let config = SecurityConfig { psk: keys.psk, private_key: keys.private_key, known_peers };
    if let Err(why) = config.check() {
        let hint = match (config.psk.is_some(), peers_file.is_some()) {
            (false, false) => format!(": add a psk line to {}, or give --peers-file", key_path.display()),
            (_, true) => format!(": add a private-key line to {} (manyfold keygen writes one)", key_path.display()),
            _ => String::new(),
        };
        bail!("{}: {why}{hint}", key_path.display());
    }
    Ok(Some(config))
}

/// An endpoint's mode as banners give it: `encrypted: PSK + 3 known peers`, `plain`.
pub fn describe(config: Option<&SecurityConfig>) -> String {
    let Some(c) = config else { return "plain".into() };
    let mut parts = Vec::new();
    if c.psk.is_some() {
        parts.push("PSK".to_string());
    }
    match c.known_peers.len() {
        0 => {}
        1 => parts.push("1 known peer".into()),
        n => parts.push(format!("{n} known peers")),
    }
    format!("encrypted: {}", parts.join(" + "))
}

/// A connection's mode for the whole of an endpoint's connections: what
/// a group report says, where no single peer key applies.
pub fn endpoint_protection(config: Option<&SecurityConfig>) -> Protection {
    match config {
        Some(_) => Protection::Encrypted { peer_key: None },
        None => Protection::Plain,
    }
}

/// A connection's mode in a few words, for one-line summaries:
/// `encrypted, peer key 3f0c5a1e…` or `plain`.
pub fn short(p: Protection) -> String {
    match p {
        Protection::Plain => "plain".into(),
        Protection::Encrypted { peer_key: Some(k) } => format!("encrypted, peer key {}…", &hex(&k)[..16]),
        Protection::Encrypted { peer_key: None } => "encrypted".into(),
    }
}

#[derive(Args, Debug)]
pub struct KeygenArgs {
    /// Key file to create (mode 0600). An existing file is kept unless --force.
    #[arg(value_name = "FILE")]
    pub file: PathBuf,

    /// Also write a random pre-shared key (a `psk` line). Copy that line
    /// into the key file of every peer that should get in.
    #[arg(long)]
    pub psk: bool,

    /// Replace FILE if it exists.
    #[arg(long)]
    pub force: bool,
}

#[derive(Args, Debug)]
pub struct PubkeyArgs {
    /// Key file whose public key to print.
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
}

/// 32 bytes from the operating system's RNG; no fallback for keys.
fn random_key() -> Result<Key> {
    let mut key = [0u8; KEY_LEN];
    getrandom::getrandom(&mut key).map_err(|e| anyhow::anyhow!("the operating system's random source failed: {e}"))?;
    Ok(key)
}

/// The text of a new key file.
fn key_file_text(keys: &KeyFile) -> String {
    let mut text = String::from("# manyfold key file (see `manyfold keygen --help`): keep it secret, mode 0600.\n");
    if let Some(k) = keys.private_key {
        let _ = writeln!(text, "# public key: {} (`manyfold pubkey` prints it)", hex(&public_key(&k)));
        let _ = writeln!(text, "private-key {}", hex(&k));
    }
    if let Some(k) = keys.psk {
        let _ = writeln!(text, "# pre-shared key: every peer's key file needs this same line");
        let _ = writeln!(text, "psk {}", hex(&k));
    }
    text
}

/// Writes `text` to `path` with mode 0600, atomically: a temporary file
/// beside it, synced, then linked (or, with `force`, renamed) into place.
fn write_secret(path: &Path, text: &str, force: bool) -> Result<()> {
    use std::io::Write;
    if !force && std::fs::symlink_metadata(path).is_ok() {
        bail!("{} exists; keeping it (use --force to replace it)", path.display());
    }
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let mut builder = tempfile::Builder::new();
    builder.prefix(".manyfold-key-");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        builder.permissions(std::fs::Permissions::from_mode(0o600));
    }
    let mut tmp = builder.tempfile_in(dir).with_context(|| format!("cannot create a file in {}", dir.display()))?;
    tmp.write_all(text.as_bytes()).and_then(|()| tmp.as_file().sync_all()).context("cannot write the key file")?;
    let persisted = if force { tmp.persist(path) } else { tmp.persist_noclobber(path) };
    persisted.map_err(|e| match e.error.kind() {
        std::io::ErrorKind::AlreadyExists => {
            anyhow::anyhow!("{} exists; keeping it (use --force to replace it)", path.display())
        }
        _ => anyhow::Error::new(e.error).context(format!("cannot create {}", path.display())),
    })?;
    // The new name lasts only once its directory is synced.
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

/// `manyfold keygen FILE [--psk] [--force]`.
pub fn run_keygen(args: &KeygenArgs) -> Result<()> {
    let keys = KeyFile { private_key: Some(random_key()?), psk: if args.psk { Some(random_key()?) } else { None } };
    write_secret(&args.file, &key_file_text(&keys), args.force)?;
    let public = hex(&public_key(&keys.private_key.expect("just made")));
    outln!("wrote {} (mode 0600){}", args.file.display(), if args.psk { " with a private key and a PSK" } else { "" });
    outln!("public key: {public}  (add this key to the --peers-file of each peer)");
    if args.psk {
        outln!("copy its psk line into the key file of every peer that should get in");
    }
    Ok(())
}

/// `manyfold pubkey FILE`: the public key alone on stdout, so that
/// `manyfold pubkey keys.txt >> peers.txt` works.
pub fn run_pubkey(args: &PubkeyArgs) -> Result<()> {
    let keys = load_key_file(&args.file)?;
    match keys.private_key {
        Some(k) => {
            outln!("{}", hex(&public_key(&k)));
            Ok(())
        }
        None => bail!(
            "{} holds only a PSK, no private key, so it has no public key: peers authenticate it by the PSK alone \
             (`manyfold keygen` writes a private key)",
            args.file.display()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
    const B: &str = "ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100";

    #[test]
    fn key_files_take_comments_either_key_or_both() {
        let k = parse_key_file(&format!("# mine\n\nprivate-key {A}\n  psk   {B}  \n"), "k").unwrap();
        assert_eq!(k.private_key.map(|k| hex(&k)), Some(A.to_string()));
        assert_eq!(k.psk.map(|k| hex(&k)), Some(B.to_string()));
        let k = parse_key_file(&format!("psk {}", A.to_uppercase()), "k").unwrap();
        assert_eq!((k.private_key, k.psk.map(|k| hex(&k))), (None, Some(A.to_string())));
    }

    #[test]
    fn key_file_errors_name_the_file_and_the_line() {
        let err = |text: &str| parse_key_file(text, "keys.txt").unwrap_err().to_string();
        assert_eq!(
            err(&format!("# c\nprivate-key {A}\npsk 12ab\n")),
            "keys.txt line 3: expected 64 hex digits after psk"
        );
        assert!(err(&format!("psk {A}0")).contains("line 1: expected 64 hex digits after psk"));
        assert!(err("psk").contains("line 1: expected 64 hex digits after psk"));
        assert!(err(&format!("\n\nprivate {A}")).starts_with("keys.txt line 3: unknown line \"private"));
        assert!(err(&format!("psk {A} x")).contains("line 1: unexpected text"));
        assert!(err(&format!("psk {A}\npsk {B}")).contains("line 2: a second psk line"));
        assert!(err("# nothing\n").contains("keys.txt holds no key"));
    }

    #[test]
    fn peers_files_take_names_comments_and_refuse_the_rest() {
        let p = parse_peers(&format!("# team\n{A}  alice's laptop\n\n{B}\n"), "peers").unwrap();
        assert_eq!(p.len(), 2);
        assert_eq!(p[0].name.as_deref(), Some("alice's laptop"));
        assert_eq!(p[1].name, None);
        let err = |text: &str| parse_peers(text, "peers.txt").unwrap_err().to_string();
        assert!(err(&format!("{A}\nnot-a-key bob")).starts_with("peers.txt line 2: expected a public key"));
        assert!(err(&format!("{A}\n{A} again")).contains("line 2: the same key as line 1"));
        assert!(err("# none\n").contains("lists no public key"));
    }

    #[test]
    fn configs_that_cannot_authenticate_are_refused_with_a_hint() {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, text: &str| {
            let p = dir.path().join(name);
            std::fs::write(&p, text).unwrap();
            #[cfg(unix)]
            {
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
            }
            p
        };
        let key_only = write("key", &format!("private-key {A}\n"));
        let psk_only = write("psk", &format!("psk {A}\n"));
        let peers = write("peers", &format!("{B}\n"));
        let e = security_config(Some(&key_only), None).unwrap_err().to_string();
        assert!(e.contains("pre-shared key or a list of known peers") && e.contains("add a psk line"), "{e}");
        let e = security_config(Some(&psk_only), Some(&peers)).unwrap_err().to_string();
        assert!(e.contains("needs a private key of our own"), "{e}");
        let e = security_config(None, Some(&peers)).unwrap_err().to_string();
        assert!(e.contains("needs --key-file"), "{e}");
        let c = security_config(Some(&key_only), Some(&peers)).unwrap().unwrap();
        assert_eq!(describe(Some(&c)), "encrypted: 1 known peer");
        let c = security_config(Some(&psk_only), None).unwrap().unwrap();
        assert_eq!(describe(Some(&c)), "encrypted: PSK");
        assert_eq!(describe(None), "plain");
        assert!(security_config(None, None).unwrap().is_none());
    }

    #[cfg(unix)]
    #[test]
    fn a_key_file_others_can_read_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("keys.txt");
        std::fs::write(&p, format!("psk {A}\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = load_key_file(&p).unwrap_err().to_string();
        assert!(e.starts_with(&format!("permissions 0644 for {} are too open: run chmod 600", p.display())), "{e}");
    }

    #[test]
    fn keygen_text_reads_back() {
        let keys = KeyFile { private_key: Some([7; 32]), psk: Some([9; 32]) };
        assert_eq!(parse_key_file(&key_file_text(&keys), "k").unwrap(), keys);
        assert_eq!(short(Protection::Plain), "plain");
        assert_eq!(
            short(Protection::Encrypted { peer_key: Some([0xab; 32]) }),
            "encrypted, peer key abababababababab…"
        );
    }
}
