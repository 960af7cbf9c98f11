//! The default cache-wide policy: take victims from mappings in proportion to the memory they
//! hold, so one global budget behaves like one global replacement order without a global list.

use std::cell::Cell;

use super::GlobalPolicy;

/// What the global policy knows of each mapping when choosing where to evict.
#[derive(Clone, Copy, Debug)]
pub struct MappingUsage {
    /// Buffers of the mapping now resident (or being loaded).
    pub resident: u64,
    /// Bytes per buffer.
    pub buffer_size: usize,
}

/// Samples a resident byte uniformly and starts with the mapping that holds it.
#[derive(Default)]
pub struct ProportionalGlobal;

thread_local! {
    static SEED: Cell<u64> = Cell::new(0x2545_F491_4F6C_DD1D ^ thread_id_bits());
}

fn thread_id_bits() -> u64 {
    let x = 0u8;
    &x as *const u8 as u64
}

/// xorshift64*: a cheap per-thread random number, good enough to spread choices.
fn next_random() -> u64 {
    SEED.with(|s| {
        let mut x = s.get();
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        s.set(x);
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    })
}

impl GlobalPolicy for ProportionalGlobal {
    fn choose_eviction_mappings(&self, usage: &[MappingUsage], out: &mut Vec<usize>) {
        let total: u64 = usage
            .iter()
            .map(|u| u.resident * u.buffer_size as u64)
            .sum();
        if usage.is_empty() || total == 0 {
            return;
        }
        let mut pick = next_random() % total;
        let mut first = 0;
        for (i, u) in usage.iter().enumerate() {
            let bytes = u.resident * u.buffer_size as u64;
            if pick < bytes {
                first = i;
                break;
            }
            pick -= bytes;
        }
        out.extend((0..usage.len()).map(|k| (first + k) % usage.len()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn choices_follow_resident_share() {
        let usage = [
            MappingUsage {
                resident: 900,
                buffer_size: 4096,
            },
            MappingUsage {
                resident: 100,
                buffer_size: 4096,
            },
            MappingUsage {
                resident: 0,
                buffer_size: 4096,
            },
        ];
        let mut first = [0u32; 3];
        let mut out = Vec::new();
        for _ in 0..10_000 {
            out.clear();
            ProportionalGlobal.choose_eviction_mappings(&usage, &mut out);
            assert_eq!(out.len(), 3, "every mapping is offered");
            first[out[0]] += 1;
        }
        assert_eq!(
            first[2], 0,
            "a mapping with nothing resident is never first"
        );
        assert!((8500..9500).contains(&first[0]), "{first:?}");
    }
}
