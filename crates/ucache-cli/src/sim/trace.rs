//! A trace ready to replay: requests as dense buffer indices `0..unique`.
//!
//! Trace ids are arbitrary 64-bit keys (object ids, block numbers, hashes), but the
//! [`ucache::policy::Simulator`] models a mapping of `unique` buffers, and its state words and
//! policy arrays are indexed by buffer. Renumbering once, in order of first appearance, keeps
//! hashing out of the replay loop entirely: every policy × size replay then reads a flat `u32`
//! array.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// The trace after renumbering.
pub struct Trace {
    /// Buffer index of each request, in order.
    pub requests: Vec<u32>,
    /// Distinct ids, so indices are `0..unique`.
    pub unique: u64,
}

/// Builds a [`Trace`] from ids fed one request at a time.
#[derive(Default)]
pub struct Remapper {
    index: HashMap<u64, u32, BuildHasherDefault<MulHasher>>,
    requests: Vec<u32>,
}

impl Remapper {
    pub fn new() -> Self {
        Self::default()
    }

    /// One request for `id`.
    #[inline]
    pub fn push(&mut self, id: u64) -> Result<(), String> {
        let next = self.index.len();
        let i = match self.index.get(&id) {
            Some(&i) => i,
            None => {
                let i = u32::try_from(next)
                    .ok()
                    .filter(|&i| i < u32::MAX - 1)
                    .ok_or("more than 2^32 - 2 distinct ids: too many for one simulated mapping")?;
                self.index.insert(id, i);
                i
            }
        };
        self.requests.push(i);
        Ok(())
    }

    pub fn finish(self) -> Trace {
        Trace {
            unique: self.index.len() as u64,
            requests: self.requests,
        }
    }
}

/// A multiplicative hash for `u64` keys: the keys are ids, not attacker-chosen strings, so
/// SipHash's DoS resistance would only cost time on 10⁷–10⁹ lookups.
#[derive(Default)]
pub struct MulHasher(u64);

impl Hasher for MulHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(b as u64);
        }
    }
    #[inline]
    fn write_u64(&mut self, x: u64) {
        let h = (self.0 ^ x).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        self.0 = h ^ (h >> 29);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renumbers_in_order_of_first_appearance() {
        let mut r = Remapper::new();
        for id in [900, 5, 900, u64::MAX, 5] {
            r.push(id).unwrap();
        }
        let t = r.finish();
        assert_eq!(t.requests, vec![0, 1, 0, 2, 1]);
        assert_eq!(t.unique, 3);
    }
}
