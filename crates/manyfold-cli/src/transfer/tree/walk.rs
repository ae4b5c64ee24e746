//! The sender's list: the paths given to `send`, walked recursively like
//! `rsync -a` (directories before their contents, names sorted, mode and
//! mtime taken), symbolic links listed as links and never followed, and
//! `-` as standard input of unknown length.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use super::wire::{check_link, check_path, Entry, Kind, MAX_ENTRIES, UNKNOWN_SIZE};
use crate::transfer::wire::check_name;

/// Deepest directory nesting walked (a guard, far beyond real trees).
const MAX_DEPTH: usize = 256;

/// Where an entry's data comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// A file on disk, read without following links.
    Path(PathBuf),
    Stdin,
    /// Directories and links: the entry is all there is.
    Nothing,
}

/// An entry of the list and where its data is read from.
#[derive(Debug, Clone)]
pub struct Planned {
    pub entry: Entry,
    pub origin: Origin,
}

/// Lists `paths` (files, directories, links, `-`) for sending; `name`
/// renames the single path given. Things that cannot be sent faithfully
/// (devices, sockets, links leading out of the receiving directory) are
/// left out with a warning on stderr.
pub fn plan(paths: &[PathBuf], name: Option<&str>) -> Result<Vec<Planned>> {
    if name.is_some() && paths.len() > 1 {
        bail!("--name renames a single FILE; {} were given", paths.len());
    }
    if paths.iter().filter(|p| p.as_os_str() == "-").count() > 1 {
        bail!("- (standard input) can be given once");
    }
    let mut out = Vec::new();
    let mut tops = std::collections::HashSet::new();
    for path in paths {
        let top = match name {
            Some(n) => n.to_string(),
            None if path.as_os_str() == "-" => "stdin".to_string(),
            None => base_name(path)?,
        };
        check_name(&top).map_err(|why| anyhow::anyhow!("cannot send {} as {top:?}: {why}", path.display()))?;
        if !tops.insert(top.clone()) {
            bail!("two of the paths given would arrive under the same name {top:?}");
        }
        if path.as_os_str() == "-" {
            let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
            let mtime = (now.as_secs() as i64, now.subsec_nanos());
            let entry = Entry { kind: Kind::File, path: top, mode: 0o644, mtime, size: UNKNOWN_SIZE };
            out.push(Planned { entry, origin: Origin::Stdin });
            continue;
        }
        let meta = std::fs::symlink_metadata(path).with_context(|| format!("cannot open {}", path.display()))?;
        walk(path, top, &meta, 0, &mut out)?;
    }
    if out.is_empty() {
        bail!("nothing to send");
    }
    Ok(out)
}

fn walk(path: &Path, rel: String, meta: &std::fs::Metadata, depth: usize, out: &mut Vec<Planned>) -> Result<()> {
    if out.len() >= MAX_ENTRIES as usize {
        bail!("more than {MAX_ENTRIES} entries to send; send the tree in parts");
    }
    check_path(&rel).map_err(|why| anyhow::anyhow!("cannot send {}: {why}", path.display()))?;
    let ft = meta.file_type();
    let entry = |kind, size| Entry { kind, path: rel.clone(), mode: meta.mode(), mtime: mtime_of(meta), size };
    if ft.is_symlink() {
        let target = std::fs::read_link(path).with_context(|| format!("cannot read the link {}", path.display()))?;
        let Some(target) = target.to_str() else {
            warn(&format!("skipped the link {}: its target is not UTF-8", path.display()));
            return Ok(());
        };
        if let Err(why) = check_link(&rel, target) {
            warn(&format!("skipped {}: {why}", path.display()));
            return Ok(());
        }
        out.push(Planned { entry: entry(Kind::Link(target.to_string()), 0), origin: Origin::Nothing });
    } else if ft.is_file() {
        out.push(Planned { entry: entry(Kind::File, meta.len()), origin: Origin::Path(path.to_path_buf()) });
    } else if ft.is_dir() {
        if depth >= MAX_DEPTH {
            bail!("{} is nested more than {MAX_DEPTH} directories deep", path.display());
        }
        out.push(Planned { entry: entry(Kind::Dir, 0), origin: Origin::Nothing });
        let mut children: Vec<_> = std::fs::read_dir(path)
            .with_context(|| format!("cannot list {}", path.display()))?
            .collect::<std::io::Result<_>>()
            .with_context(|| format!("cannot list {}", path.display()))?;
        children.sort_by_key(|c| c.file_name());
        for child in children {
            let name = child.file_name();
            let Some(name) = name.to_str() else {
                bail!("{} has a name that is not UTF-8; rename it to send it", child.path().display());
            };
            let meta = child.metadata().with_context(|| format!("cannot read {}", child.path().display()))?;
            walk(&child.path(), format!("{rel}/{name}"), &meta, depth + 1, out)?;
        }
    } else {
        warn(&format!("skipped {}: not a regular file, directory or link", path.display()));
    }
    Ok(())
}

/// `send --unchecked-entry KIND:PATH[:TARGET]` (tests only): an entry
/// listed as given, without the checks of [`plan`].
pub fn unchecked(spec: &str) -> Result<Planned> {
    let mut parts = spec.splitn(3, ':');
    let (kind, path, target) = (parts.next(), parts.next(), parts.next());
    let kind = match (kind, target) {
        (Some("F"), None) => Kind::File,
        (Some("D"), None) => Kind::Dir,
        (Some("L"), Some(t)) => Kind::Link(t.to_string()),
        _ => bail!("--unchecked-entry {spec:?}: expected F:PATH, D:PATH or L:PATH:TARGET"),
    };
    let path = path.unwrap_or_default().to_string();
    let entry = Entry { kind, path, mode: 0o644, mtime: (0, 0), size: 0 };
    Ok(Planned { entry, origin: Origin::Nothing })
}

fn warn(text: &str) {
    eprintln!("warning: {text}");
}

/// Modification time as the wire carries it.
pub fn mtime_of(meta: &std::fs::Metadata) -> (i64, u32) {
    (meta.mtime(), meta.mtime_nsec().clamp(0, 999_999_999) as u32)
}

/// The last component of `path`, as the name it arrives under.
fn base_name(path: &Path) -> Result<String> {
    // `dir/` and `dir/.` name dir itself (canonicalize for `.` and `..`).
    let named = match path.file_name() {
        Some(_) => path.to_path_buf(),
        None => std::fs::canonicalize(path).with_context(|| format!("cannot open {}", path.display()))?,
    };
    let name = named.file_name().with_context(|| format!("{} has no name; give one with --name", path.display()))?;
    let name =
        name.to_str().with_context(|| format!("{} is not valid UTF-8; give a name with --name", path.display()))?;
    Ok(name.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_tree_is_listed_directories_first_links_as_links_and_unsafe_links_left_out() {
        let tmp = tempfile::tempdir().unwrap();
        let top = tmp.path().join("t");
        std::fs::create_dir_all(top.join("b/c")).unwrap();
        std::fs::write(top.join("b/c/f"), b"hello").unwrap();
        std::fs::set_permissions(top.join("b/c/f"), std::fs::Permissions::from_mode(0o640)).unwrap();
        std::os::unix::fs::symlink("c/f", top.join("b/inside")).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", top.join("b/outside")).unwrap();
        let list = plan(&[top], None).unwrap();
        let shown: Vec<(String, &Kind)> = list.iter().map(|p| (p.entry.path.clone(), &p.entry.kind)).collect();
        assert_eq!(
            shown,
            [
                ("t".to_string(), &Kind::Dir),
                ("t/b".to_string(), &Kind::Dir),
                ("t/b/c".to_string(), &Kind::Dir),
                ("t/b/c/f".to_string(), &Kind::File),
                ("t/b/inside".to_string(), &Kind::Link("c/f".into())),
            ]
        );
        assert_eq!((list[3].entry.size, list[3].entry.mode & 0o777), (5, 0o640));
    }

    #[test]
    fn names_given_twice_and_stdin_twice_are_refused() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir(tmp.path().join("x")).unwrap();
        std::fs::write(tmp.path().join("x/f"), b"").unwrap();
        std::fs::write(tmp.path().join("f"), b"").unwrap();
        let err = plan(&[tmp.path().join("f"), tmp.path().join("x/f")], None).unwrap_err();
        assert!(err.to_string().contains("same name"), "{err}");
        let err = plan(&["-".into(), "-".into()], None).unwrap_err();
        assert!(err.to_string().contains("once"), "{err}");
        let stdin = plan(&["-".into()], None).unwrap();
        assert_eq!((stdin[0].entry.path.as_str(), stdin[0].entry.size), ("stdin", UNKNOWN_SIZE));
    }
}
