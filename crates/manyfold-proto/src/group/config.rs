//! A group's settings (spec §14.5, §14.7, §14.9): its delivery mode, as
//! the CLI spells it, eviction of slow peers, and the limits and timeouts
//! of [`GroupConfig`].

use std::time::Duration;

/// When a group message counts as delivered (spec §14.5; paper 00 §3.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Every peer acknowledges; each peer's copy is retransmitted to it alone.
    All,
    /// One acknowledgement suffices; the others' copies are then given up.
    Any,
    /// At least this many peers acknowledge, or every live peer when
    /// fewer are left (spec §14.5): sending does not fail while one is.
    AtLeast(u16),
    /// Each message goes to `k` peers chosen by load (paper 00's CBAL)
    /// and is delivered once `p` of them acknowledge.
    Subset {
        /// Peers each message goes to.
        k: u16,
        /// Acknowledgements that deliver it.
        p: u16,
    },
}

impl Mode {
    /// Acknowledgements a message needs when `copies` of it are still live.
    pub(super) fn needed(self, copies: usize) -> usize {
        let want = match self {
            Mode::All => copies,
            Mode::Any => 1,
            Mode::AtLeast(p) | Mode::Subset { p, .. } => usize::from(p),
        };
        want.min(copies)
    }

    /// Checks the mode's numbers for a group of `peers`.
    pub fn check(self) -> Result<(), String> {
        match self {
            Mode::AtLeast(0) => Err("at-least=P needs P >= 1".into()),
            Mode::Subset { k, p } if p == 0 || p > k => Err(format!("subset=K/P needs 1 <= P <= K (got {k}/{p})")),
            _ => Ok(()),
        }
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Mode::All => write!(f, "all"),
            Mode::Any => write!(f, "any"),
            Mode::AtLeast(p) => write!(f, "at-least={p}"),
            Mode::Subset { k, p } => write!(f, "subset={k}/{p}"),
        }
    }
}

impl std::str::FromStr for Mode {
    type Err = String;
    /// `all`, `any`, `at-least=P` or `subset=K/P`.
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("unknown mode {s:?} (expected all, any, at-least=P or subset=K/P)");
        let num = |t: &str| t.trim().parse::<u16>().map_err(|_| bad());
        let mode = match s.trim().to_ascii_lowercase().as_str() {
            "all" => Mode::All,
            "any" => Mode::Any,
            m => match m.split_once('=') {
                Some(("at-least", p)) => Mode::AtLeast(num(p)?),
                Some(("subset", kp)) => {
                    let (k, p) = kp.split_once('/').ok_or_else(bad)?;
                    Mode::Subset { k: num(k)?, p: num(p)? }
                }
                _ => return Err(bad()),
            },
        };
        mode.check()?;
        Ok(mode)
    }
}

/// Dropping peers that hold the group back (spec §14.7).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Eviction {
    /// A peer whose rate stays below this fraction of the group's ...
    pub min_fraction: f64,
    /// ... for this long is evicted.
    pub after: Duration,
}

/// Settings of a group (spec §14.9).
#[derive(Debug, Clone)]
pub struct GroupConfig {
    /// When a message counts as delivered.
    pub mode: Mode,
    /// Fewest peers that must answer the handshake for the group to be established.
    pub min_peers: usize,
    /// A peer that has not answered within this long is asked again
    /// (paper 01's response timeout; later retries back off).
    pub response_timeout: Duration,
    /// The handshake ends at this point whoever has answered (paper 01's overall timeout).
    pub overall_timeout: Duration,
    /// The shared send buffer: most bytes of messages not yet delivered
    /// in the mode's sense. A message larger than this is still taken when
    /// nothing else is outstanding.
    pub send_buffer: usize,
    /// Most messages not yet delivered, whatever their size: bounds the
    /// group's bookkeeping when messages are tiny.
    pub max_messages: usize,
    /// Evict a peer that stays too slow (spec §14.7); `None`: never.
    pub eviction: Option<Eviction>,
    /// A peer that owes acknowledgements and gives none for this long is
    /// dropped (spec §14.7), so that a dead receiver holds the group back
    /// for at most this long.
    pub peer_timeout: Duration,
    /// Most peers the group holds, gone ones included.
    pub max_peers: usize,
}

impl Default for GroupConfig {
    fn default() -> Self {
        GroupConfig {
            mode: Mode::All,
            min_peers: 1,
            response_timeout: Duration::from_secs(1),
            overall_timeout: Duration::from_secs(10),
            send_buffer: 64 << 20,
            max_messages: 1 << 16,
            eviction: None,
            peer_timeout: Duration::from_secs(10),
            max_peers: 4096,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse_from_their_cli_spelling_and_reject_nonsense() {
        assert_eq!("all".parse::<Mode>(), Ok(Mode::All));
        assert_eq!("ANY".parse::<Mode>(), Ok(Mode::Any));
        assert_eq!("at-least=2".parse::<Mode>(), Ok(Mode::AtLeast(2)));
        assert_eq!("subset=3/2".parse::<Mode>(), Ok(Mode::Subset { k: 3, p: 2 }));
        for bad in ["most", "at-least=0", "subset=2/3", "subset=3", "at-least=x"] {
            assert!(bad.parse::<Mode>().is_err(), "{bad} accepted");
        }
        assert_eq!(Mode::Subset { k: 3, p: 2 }.to_string(), "subset=3/2");
    }

    #[test]
    fn each_mode_needs_its_number_of_acks_capped_by_the_live_copies() {
        assert_eq!(Mode::All.needed(5), 5);
        assert_eq!(Mode::Any.needed(5), 1);
        assert_eq!(Mode::AtLeast(3).needed(5), 3);
        assert_eq!(Mode::AtLeast(3).needed(2), 2);
        assert_eq!(Mode::Subset { k: 4, p: 2 }.needed(4), 2);
        assert_eq!(Mode::Any.needed(0), 0);
    }
}
