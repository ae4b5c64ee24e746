//! What a lost connection means to a person (issue 19): the close reason
//! buried in an error (or a group's "peer left" event) said as a headline
//! naming the peer by its role — "the sender was interrupted", "the
//! receiver is gone (port unreachable)", "the server stopped answering
//! after 15 s" — in front of the technical chain.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use manyfold::Left;
use manyfold::{CloseReason, ErrorCode};
use manyfold_proto::UnreachableKind;

/// Who the peer is to this command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Sender,
    Receiver,
    Server,
    Client,
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Role::Sender => "sender",
            Role::Receiver => "receiver",
            Role::Server => "server",
            Role::Client => "client",
        })
    }
}

/// The stall timeout the connections were given, in milliseconds, for
/// "stopped answering after N s" (the close reason does not carry it).
static STALL_TIMEOUT_MS: AtomicU64 = AtomicU64::new(15_000);

pub fn set_stall_timeout(timeout: Duration) {
    STALL_TIMEOUT_MS.store(timeout.as_millis() as u64, Ordering::Relaxed);
}

fn stall_timeout() -> Duration {
    Duration::from_millis(STALL_TIMEOUT_MS.load(Ordering::Relaxed))
}

/// The close reason an error carries, however deep in its chain (the
/// library's errors travel inside `io::Error` through the stream API).
pub fn close_reason(e: &anyhow::Error) -> Option<CloseReason> {
    e.chain().find_map(reason_of)
}

/// The close reason one link of an error chain carries itself.
fn reason_of(cause: &(dyn std::error::Error + 'static)) -> Option<CloseReason> {
    manyfold::close_reason(cause)
}

/// What `reason` says about the peer `role`, when it says more than the
/// library's own words; `None` for our own doing (we aborted) and for
/// reasons the chain already puts plainly.
pub fn headline(reason: CloseReason, role: Role) -> Option<String> {
    Some(match reason {
        CloseReason::PeerReset(Some(ErrorCode::INTERRUPTED)) => {
            format!("the {role} was interrupted (Ctrl-C or SIGTERM on its side)")
        }
        CloseReason::Unreachable(UnreachableKind::Port) => format!("the {role} is gone (port unreachable)"),
        CloseReason::Unreachable(_) => format!("the {role} cannot be reached (host unreachable)"),
        CloseReason::StallTimeout => {
            format!("the {role} stopped answering after {} s", stall_timeout().as_secs_f64().round())
        }
        CloseReason::IdleTimeout => {
            format!("the {role} went silent (nothing heard for over {} s)", stall_timeout().as_secs_f64().round())
        }
        CloseReason::Refused => format!("the {role} refused the connection (nothing listening there?)"),
        CloseReason::PeerReset(_) => format!("the {role} reset the connection"),
        // The library says what is wrong in its own terms; the CLI names its flag.
        CloseReason::ProtectionMismatch => format!(
            "the {role} and this end disagree on encryption: one gave --key-file and the other did not (give both \
             the same setting)"
        ),
        _ => return None,
    })
}

/// Why a peer left a group, said by its role: the headline of its close
/// reason when it has one ("the receiver was interrupted"), else the
/// library's words.
pub fn left(why: Left, role: Role) -> String {
    match why {
        Left::Lost(reason) => headline(reason, role).unwrap_or_else(|| why.to_string()),
        other => other.to_string(),
    }
}

/// `e` with the headline of its close reason in front, if it has one,
/// and without the library's own words for the same reason further down
/// (not "the sender was interrupted: ...: the peer was interrupted").
/// The result is text only: explained once, it is not explained again.
pub fn explain(e: anyhow::Error, role: Role) -> anyhow::Error {
    let Some(mut text) = close_reason(&e).and_then(|r| headline(r, role)) else { return e };
    // spec §3.3.4: the peer's own words on why it aborted, quoted once.
    if let Some(words) = e.chain().find_map(manyfold::peer_close_text) {
        text.push_str(&format!(", saying {words:?}"));
    }
    for cause in e.chain().filter(|cause| reason_of(*cause).is_none()) {
        text.push_str(": ");
        text.push_str(&cause.to_string());
    }
    anyhow::anyhow!(text)
}

/// Whether `e` is only the echo of our own interruption (our connections
/// aborted with INTERRUPTED), which says nothing new.
pub fn is_own_interruption(e: &anyhow::Error) -> bool {
    matches!(close_reason(e), Some(CloseReason::Aborted(ErrorCode::INTERRUPTED)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use anyhow::Context;

    fn buried(reason: CloseReason) -> anyhow::Error {
        let io: std::io::Error = manyfold::ReadError::Closed(reason).into();
        Err::<(), _>(io).context("connection lost while receiving data").unwrap_err()
    }

    #[test]
    fn an_interrupted_peer_is_named_by_its_role() {
        let e = explain(buried(CloseReason::PeerReset(Some(ErrorCode::INTERRUPTED))), Role::Sender);
        let text = format!("{e:#}");
        assert_eq!(
            text, "the sender was interrupted (Ctrl-C or SIGTERM on its side): connection lost while receiving data",
            "the cause is said once"
        );
    }

    #[test]
    fn a_killed_peer_is_gone_with_port_unreachable() {
        let e = explain(buried(CloseReason::Unreachable(UnreachableKind::Port)), Role::Receiver);
        assert!(format!("{e:#}").starts_with("the receiver is gone (port unreachable)"));
    }

    #[test]
    fn a_stalled_peer_is_named_with_the_timeout() {
        set_stall_timeout(Duration::from_secs(15));
        let e = explain(buried(CloseReason::StallTimeout), Role::Server);
        assert!(format!("{e:#}").starts_with("the server stopped answering after 15 s"));
    }

    #[test]
    fn a_group_peer_that_left_is_named_by_its_role() {
        let why = Left::Lost(CloseReason::PeerReset(Some(ErrorCode::INTERRUPTED)));
        assert!(left(why, Role::Receiver).starts_with("the receiver was interrupted"));
        assert_eq!(left(Left::Evicted, Role::Receiver), "evicted as too slow");
    }

    #[test]
    fn a_peers_words_on_its_abort_are_quoted_once() {
        let said =
            manyfold::PeerClose { reason: CloseReason::PeerReset(Some(ErrorCode(300))), text: "disk full".into() };
        let io: std::io::Error = manyfold::ReadError::ClosedByPeer(said).into();
        let e = Err::<(), _>(io).context("connection lost while receiving data").unwrap_err();
        let text = format!("{:#}", explain(e, Role::Sender));
        assert_eq!(
            text,
            r#"the sender reset the connection, saying "disk full": connection lost while receiving data"#
        );
    }

    #[test]
    fn a_protection_mismatch_names_the_cli_flag() {
        let text = format!("{:#}", explain(buried(CloseReason::ProtectionMismatch), Role::Server));
        assert!(text.starts_with("the server and this end disagree on encryption"), "{text}");
        assert!(text.contains("--key-file"), "{text}");
        assert!(!CloseReason::ProtectionMismatch.to_string().contains("--"), "the library speaks of no flag");
    }

    #[test]
    fn our_own_abort_gets_no_headline() {
        let e = buried(CloseReason::Aborted(ErrorCode::INTERRUPTED));
        assert!(is_own_interruption(&e));
        let text = format!("{:#}", explain(e, Role::Client));
        assert!(text.starts_with("connection lost"), "{text}");
    }
}
