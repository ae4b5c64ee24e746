//! [`ConnHandle`]: the name of one connection of an endpoint (spec §6.1).
//! A leaf module: the endpoint's connection table hands handles out, and
//! groups, drivers and applications hold them, without depending on the
//! endpoint or on one another.

/// Names one connection of an endpoint. Stale handles (of a released
/// connection whose slot was reused) are detected by the generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnHandle {
    index: u32,
    generation: u32,
}

impl ConnHandle {
    /// The handle of slot `index` in its `generation`th use.
    pub(crate) fn new(index: u32, generation: u32) -> Self {
        ConnHandle { index, generation }
    }

    /// A small integer unique among live connections (for logs and maps).
    pub fn index(self) -> u32 {
        self.index
    }

    /// How many connections held this slot before this one (wrapping).
    pub(crate) fn generation(self) -> u32 {
        self.generation
    }

    #[cfg(test)]
    pub(crate) fn test(index: u32) -> Self {
        ConnHandle { index, generation: 0 }
    }
}
