//! The manifest phase of `manyfold fetch`: every server is asked for the
//! file's manifest, and the servers must agree. The manifest most of them
//! gave is used; a server whose manifest differs, or that cannot serve the
//! file, is left out with the reason; with no majority (one against one,
//! two against two) the fetch fails, naming what each server said.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{bail, Result};
use manyfold::{Group, GroupEvent, PeerId, StreamItem};

use super::wire::{Manifest, Reply};
use crate::net;
use crate::size::human_duration;

/// How long the servers may take to give their manifests (a server hashes
/// a file it has not described before, about a second per GB).
const MANIFEST_TIMEOUT: Duration = Duration::from_secs(120);
/// Once one server gave its manifest, how long the others have (at least;
/// four times what the first took if that is longer).
const MANIFEST_GRACE: Duration = Duration::from_secs(10);

/// Reads one manifest (or refusal) from each of `up`, within
/// [`MANIFEST_TIMEOUT`], and once the first manifest came, within
/// [`MANIFEST_GRACE`] or four times what it took, whichever is longer (a
/// server that died meanwhile must not hold the others up). Returns them
/// in order.
pub async fn manifests(group: &Group, up: &[(PeerId, SocketAddr)], name: &str) -> Vec<Result<Manifest, String>> {
    let mut answers: Vec<Option<Result<Manifest, String>>> = vec![None; up.len()];
    let index: HashMap<PeerId, usize> = up.iter().enumerate().map(|(i, (p, _))| (*p, i)).collect();
    let asked = tokio::time::Instant::now();
    let mut deadline = asked + MANIFEST_TIMEOUT;
    let mut first: Option<Duration> = None;
    let mut events = true;
    while answers.iter().any(Option::is_none) {
        if let (None, true) = (first, answers.iter().any(|a| matches!(a, Some(Ok(_))))) {
            let took = asked.elapsed();
            first = Some(took);
            deadline = deadline.min(tokio::time::Instant::now() + MANIFEST_GRACE.max(took * 4));
        }
        tokio::select! {
            _ = tokio::time::sleep_until(deadline) => break,
            ev = group.next_event(), if events => match ev {
                Some(GroupEvent::PeerLeft { peer, why, .. }) => {
                    if let Some(&i) = index.get(&peer) {
                        answers[i].get_or_insert(Err(format!("connection lost: {}", net::left(why, net::Role::Server))));
                    }
                }
                Some(_) => {}
                None => events = false,
            },
            msg = group.recv_message() => {
                let Some((dest, item)) = msg else { break };
                let Some(&i) = index.get(&dest.peer) else { continue };
                if answers[i].is_some() {
                    continue;
                }
                answers[i] = Some(match item {
                    StreamItem::Message(m) => match Reply::parse(&m) {
                        Ok(Reply::Manifest(got)) if got.name == name => Ok(got),
                        Ok(Reply::Manifest(got)) => Err(format!("answered with the manifest of {:?}", got.name)),
                        Ok(Reply::Error(why)) => Err(why),
                        Ok(Reply::Segment { .. }) => Err("sent a segment before the manifest".into()),
                        Err(e) => Err(format!("malformed reply: {e} (is it a `manyfold serve`?)")),
                    },
                    StreamItem::Finished => {
                        Err("closed the connection without a manifest (is it a `manyfold serve`?)".into())
                    }
                    other => Err(format!("ended its stream before the manifest ({other:?})")),
                });
            }
        }
    }
    let waited = asked.elapsed();
    let late = |_| match first {
        Some(took) => format!(
            "no manifest within {} (another server gave one in {})",
            human_duration(waited),
            human_duration(took)
        ),
        None => format!("no manifest within {}", human_duration(waited)),
    };
    answers.into_iter().map(|a| a.unwrap_or_else(|| Err(late(())))).collect()
}

/// The servers that agree with the majority, and the others with why.
#[derive(Debug)]
pub struct Chosen {
    pub agreeing: Vec<(PeerId, SocketAddr)>,
    pub dropped: Vec<(PeerId, SocketAddr, String)>,
}

/// Picks the manifest most servers gave. Fails if no server gave one or
/// if two manifests tie for the most.
pub fn agree(
    name: &str,
    up: &[(PeerId, SocketAddr)],
    answers: Vec<Result<Manifest, String>>,
) -> Result<(Manifest, Chosen)> {
    let mut classes: Vec<(Manifest, Vec<usize>)> = Vec::new();
    let mut dropped = Vec::new();
    for (i, answer) in answers.into_iter().enumerate() {
        match answer {
            Ok(m) => match classes.iter_mut().find(|(c, _)| c.same_content(&m)) {
                Some((_, members)) => members.push(i),
                None => classes.push((m, vec![i])),
            },
            Err(why) => dropped.push((up[i].0, up[i].1, why)),
        }
    }
    let describe = |m: &Manifest| {
        format!("{} bytes, blake3 {}, segments of {}", m.size, blake3::Hash::from(m.hash).to_hex(), m.segment_size)
    };
    if classes.is_empty() {
        let why: Vec<String> = dropped.iter().map(|(_, a, w)| format!("{a}: {w}")).collect();
        bail!("no server can serve {name} ({})", why.join("; "));
    }
    // Stable: on equal counts the first answer's class comes first.
    classes.sort_by_key(|(_, members)| std::cmp::Reverse(members.len()));
    if classes.len() > 1 && classes[0].1.len() == classes[1].1.len() {
        let said: Vec<String> = classes
            .iter()
            .flat_map(|(m, members)| members.iter().map(move |&i| format!("{} says {}", up[i].1, describe(m))))
            .collect();
        bail!("the servers disagree about {name} and no majority decides: {}", said.join("; "));
    }
    let mut classes = classes.into_iter();
    let (manifest, members) = classes.next().expect("not empty");
    for (m, others) in classes {
        for i in others {
            let why = format!(
                "its manifest of {name} ({}) differs from the majority's ({})",
                describe(&m),
                describe(&manifest)
            );
            dropped.push((up[i].0, up[i].1, why));
        }
    }
    let agreeing = members.into_iter().map(|i| up[i]).collect();
    Ok((manifest, Chosen { agreeing, dropped }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest(size: u64, tag: u8) -> Manifest {
        let count = size.div_ceil(4096) as usize;
        Manifest { name: "f".into(), size, segment_size: 4096, hash: [tag; 32], segments: vec![[tag; 32]; count] }
    }

    fn up(n: usize) -> Vec<(PeerId, SocketAddr)> {
        (0..n).map(|i| (PeerId(i as u32), SocketAddr::from(([127, 0, 0, 1], 7000 + i as u16)))).collect()
    }

    #[test]
    fn the_majority_manifest_wins_and_the_others_are_named() {
        let answers =
            vec![Ok(manifest(9000, 1)), Ok(manifest(9000, 2)), Ok(manifest(9000, 2)), Err("not found: f".into())];
        let (m, chosen) = agree("f", &up(4), answers).unwrap();
        assert_eq!(m.hash, [2; 32]);
        assert_eq!(chosen.agreeing.iter().map(|(p, _)| p.0).collect::<Vec<_>>(), [1, 2]);
        let dropped: Vec<(u32, &str)> = chosen.dropped.iter().map(|(p, _, w)| (p.0, w.as_str())).collect();
        assert_eq!(dropped[0], (3, "not found: f"));
        assert_eq!(dropped[1].0, 0);
        assert!(dropped[1].1.contains("differs from the majority"), "{}", dropped[1].1);
    }

    #[test]
    fn a_tie_or_no_manifest_fails_naming_the_servers() {
        let err = agree("f", &up(2), vec![Ok(manifest(9000, 1)), Ok(manifest(9001, 1))]).unwrap_err().to_string();
        assert!(err.contains("no majority") && err.contains("127.0.0.1:7001 says 9001 bytes"), "{err}");
        let err = agree("f", &up(2), vec![Err("not found: f".into()), Err("x".into())]).unwrap_err().to_string();
        assert!(err.contains("no server can serve f") && err.contains("127.0.0.1:7000: not found: f"), "{err}");
        let (_, chosen) = agree("f", &up(1), vec![Ok(manifest(0, 3))]).unwrap();
        assert_eq!(chosen.agreeing.len(), 1, "one server is its own majority");
    }
}
