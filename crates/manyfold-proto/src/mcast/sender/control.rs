//! The sender's control packets (spec §16.2, §16.7, §19.7): REGISTER+ACK
//! (with the session description, or a protected registration's Noise
//! answer; with KLV, the group assigned, spec §16.12), STATUS confirmations, END to one receiver or (aborting) to
//! the group, and refusals in the clear.

use crate::mcast::McTransmit;
use crate::wire::mcast::{emit, emit_announcement, emit_bytes, emit_code};
use crate::wire::{ErrorCode, Flags, PacketType};
use std::net::SocketAddr;

use super::McastSender;

/// Control packets waiting to go out (to one receiver, or an abort's END
/// to the group).
#[derive(Debug, Clone, Copy)]
pub(super) enum Control {
    RegisterAck {
        idx: usize,
    },
    StatusAck {
        idx: usize,
    },
    /// spec §16.12: the group a receiver is in (REGISTER+ACK with KLV).
    Group {
        idx: usize,
    },
    EndOne {
        idx: usize,
        code: ErrorCode,
    },
    /// The whole session aborted with `code`, to the group.
    EndAll {
        code: ErrorCode,
    },
    /// In the clear: the receiver has no group key.
    Refuse {
        addr: SocketAddr,
        client: u32,
        code: ErrorCode,
    },
}

impl McastSender {
    pub(super) fn send_control(&mut self, buf: &mut [u8], c: Control) -> Option<McTransmit> {
        let s = self.session;
        let (dest, n) = match c {
            Control::RegisterAck { idx } if self.security.is_some() => {
                let r = &self.receivers[idx];
                let reply = &r.registration.as_ref()?.1;
                let flags = Flags::ACK | Flags::CKE;
                let n = emit(buf, PacketType::McRegister, flags, s, 0, r.network, r.client, |o| emit_bytes(o, reply))?;
                self.send_clear = true;
                (r.addr, n)
            }
            Control::RegisterAck { idx } => {
                let r = &self.receivers[idx];
                let info = &self.info;
                let n = emit(buf, PacketType::McRegister, Flags::ACK, s, r.joined_at, r.network, r.client, |o| {
                    emit_announcement(o, info)
                })?;
                (r.addr, n)
            }
            Control::Group { idx } => {
                let (r, group, epoch) = (&self.receivers[idx], self.wire_group(idx), self.group_epoch);
                let flags = Flags::ACK | Flags::KLV;
                (r.addr, emit(buf, PacketType::McRegister, flags, s, epoch, group, r.client, |_| 0)?)
            }
            Control::StatusAck { idx } => {
                let r = &self.receivers[idx];
                (r.addr, emit(buf, PacketType::McStatus, Flags::ACK, s, r.held, r.network, r.client, |_| 0)?)
            }
            Control::EndAll { code } => {
                let total = self.total.unwrap_or(self.next_sn);
                (self.group, emit(buf, PacketType::McEnd, Flags::ERR, s, total, 0, 0, |o| emit_code(o, code))?)
            }
            Control::EndOne { idx, code } => {
                let r = &self.receivers[idx];
                (
                    r.addr,
                    emit(buf, PacketType::McEnd, Flags::ERR, s, self.next_sn, 0, r.client, |o| emit_code(o, code))?,
                )
            }
            Control::Refuse { addr, client, code } => {
                self.send_clear = true;
                (addr, emit(buf, PacketType::McEnd, Flags::ERR, s, 0, 0, client, |o| emit_code(o, code))?)
            }
        };
        Some(McTransmit { destination: dest, size: n })
    }
}
