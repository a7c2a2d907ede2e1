//! Memory spaces: each `S(n)` has an arena with a capacity and an alignment (DESIGN.md
//! section 7). `S(0)` is host memory. The host registers the spaces it has, with their
//! capacities; a space nobody registered is host memory without a limit.

use std::collections::BTreeMap;

use crate::buffer::{AlignedBuffer, ALIGNMENT};
use crate::error::RuntimeError;

/// The host memory space.
pub const HOST: i64 = 0;

/// One memory space's properties.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemorySpace {
    /// Largest arena the space can hold, in bytes; `None` means unbounded.
    pub capacity: Option<u64>,
    /// Alignment of the arena and of every buffer in it.
    pub alignment: u64,
}

/// The registered memory spaces.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemorySpaces {
    spaces: BTreeMap<i64, MemorySpace>,
}

impl Default for MemorySpaces {
    fn default() -> MemorySpaces {
        let mut spaces = BTreeMap::new();
        spaces.insert(HOST, MemorySpace { capacity: None, alignment: ALIGNMENT as u64 });
        MemorySpaces { spaces }
    }
}

impl MemorySpaces {
    /// Only host memory, unbounded.
    pub fn new() -> MemorySpaces {
        MemorySpaces::default()
    }

    /// Registers (or re-registers) space `space` with a capacity in bytes.
    pub fn register(&mut self, space: i64, capacity: u64) {
        self.spaces.insert(space, MemorySpace { capacity: Some(capacity), alignment: ALIGNMENT as u64 });
    }

    /// The properties of `space` (unregistered spaces are unbounded).
    pub fn get(&self, space: i64) -> MemorySpace {
        self.spaces.get(&space).copied().unwrap_or(MemorySpace { capacity: None, alignment: ALIGNMENT as u64 })
    }

    /// The capacity of every space that has one, as buffer assignment takes them.
    pub fn capacities(&self) -> BTreeMap<i64, u64> {
        self.spaces.iter().filter_map(|(&s, m)| m.capacity.map(|c| (s, c))).collect()
    }

    /// Checks that an arena of `bytes` fits in `space`.
    pub fn check(&self, space: i64, bytes: u64) -> Result<(), RuntimeError> {
        match self.get(space).capacity {
            Some(capacity) if bytes > capacity => Err(RuntimeError::SpaceOverflow { space, capacity, needed: bytes }),
            _ => Ok(()),
        }
    }

    /// Allocates the arena of `space`, checking its capacity first.
    pub fn allocate(&self, space: i64, bytes: u64) -> Result<Arena, RuntimeError> {
        self.check(space, bytes)?;
        let len = usize::try_from(bytes).map_err(|_| RuntimeError::OutOfMemory { bytes })?;
        Ok(Arena { space, memory: AlignedBuffer::zeroed(len)? })
    }
}

/// The memory of one space that an executable's temporaries live in.
#[derive(Debug)]
pub struct Arena {
    pub space: i64,
    pub memory: AlignedBuffer,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_is_unbounded_by_default() {
        let spaces = MemorySpaces::new();
        assert_eq!(spaces.get(HOST).capacity, None);
        assert_eq!(spaces.get(HOST).alignment, 64);
        assert!(spaces.check(HOST, u64::MAX).is_ok());
        assert!(spaces.check(7, 1 << 40).is_ok());
        assert!(spaces.capacities().is_empty());
    }

    #[test]
    fn registered_capacity_is_enforced_with_the_overflow_named() {
        let mut spaces = MemorySpaces::new();
        spaces.register(1, 1000);
        assert!(spaces.check(1, 1000).is_ok());
        let err = spaces.check(1, 1064).unwrap_err();
        assert_eq!(err, RuntimeError::SpaceOverflow { space: 1, capacity: 1000, needed: 1064 });
        assert_eq!(err.to_string(), "memory space S(1) needs 1064 bytes but its capacity is 1000 (64 bytes over)");
        assert_eq!(spaces.capacities(), BTreeMap::from([(1, 1000)]));
        assert!(spaces.allocate(1, 2000).is_err());
    }

    #[test]
    fn arenas_are_aligned_and_sized() {
        let mut spaces = MemorySpaces::new();
        spaces.register(2, 4096);
        let arena = spaces.allocate(2, 4096).unwrap();
        assert_eq!(arena.space, 2);
        assert_eq!(arena.memory.len(), 4096);
        assert!(crate::buffer::is_aligned(arena.memory.as_ptr()));
    }
}
