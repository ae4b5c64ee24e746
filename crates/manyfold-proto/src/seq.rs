//! Packet sequence numbers (spec §5.1): 32 bits on the wire, extended to
//! 64 bits in the engine so that they never wrap within a connection.
//! [`Seq::from_wire`] is the one place a wire value is widened.

use std::ops::{Add, AddAssign, Sub};

use crate::rangeset::Point;

/// Extended sequence numbers start here, so that `isn - 1` never underflows.
const BASE: u64 = 1 << 32;

/// A sequenced packet's number, extended to 64 bits (spec §5.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Seq(u64);

impl Seq {
    /// The extended form of a connection's initial sequence number.
    pub const fn from_isn(isn: u32) -> Seq {
        Seq(BASE + isn as u64)
    }

    /// The sequence number nearest `near` whose low 32 bits are `wire`
    /// (spec §5.1): what a 32-bit field of the header names.
    pub fn from_wire(wire: u32, near: Seq) -> Seq {
        let near = near.0;
        let candidate = (near & !0xffff_ffff) | u64::from(wire);
        let half = 1u64 << 31;
        Seq(if candidate + half < near {
            candidate + (1 << 32)
        } else if candidate > near + half && candidate >= 1 << 32 {
            candidate - (1 << 32)
        } else {
            candidate
        })
    }

    /// The low 32 bits, as the header carries them.
    pub const fn wire(self) -> u32 {
        self.0 as u32
    }

    /// The extended value.
    pub const fn get(self) -> u64 {
        self.0
    }
}

impl Add<u64> for Seq {
    type Output = Seq;
    fn add(self, n: u64) -> Seq {
        Seq(self.0 + n)
    }
}

impl AddAssign<u64> for Seq {
    fn add_assign(&mut self, n: u64) {
        self.0 += n;
    }
}

/// How many sequence numbers `self` is past `earlier` (which must not be later).
impl Sub for Seq {
    type Output = u64;
    fn sub(self, earlier: Seq) -> u64 {
        self.0 - earlier.0
    }
}

impl Point for Seq {
    fn saturating_succ(self) -> Self {
        Seq(self.0.saturating_add(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn from_wire_picks_the_nearest_value() {
        let near = Seq::from_isn(10);
        assert_eq!(Seq::from_wire(12, near), Seq::from_isn(12));
        assert_eq!(Seq::from_wire(u32::MAX, near).get(), BASE - 1);
        let near = Seq::from_isn(u32::MAX - 2);
        assert_eq!(Seq::from_wire(3, near).get(), 2 * BASE + 3);
    }

    #[test]
    fn wire_is_the_low_32_bits() {
        let s = Seq::from_isn(u32::MAX) + 5;
        assert_eq!(s.wire(), 4);
        assert_eq!(Seq::from_wire(s.wire(), s), s);
        assert_eq!(s - Seq::from_isn(u32::MAX), 5);
    }
}
