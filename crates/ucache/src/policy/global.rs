//! The default cache-wide policy: take victims first from the mapping that holds the most
//! memory for its weight, so mappings converge to shares of the budget proportional to their
//! weights (equal shares by default) without a global replacement list.
//!
//! Evicting in proportion to what each mapping holds (the earlier rule) lets a tenant that
//! loads fast, such as a scan, grow its share with every load and push out a tenant whose
//! working set is reused; ordering by weighted share bounds what the scan can take.

use super::GlobalPolicy;

/// What the global policy knows of each mapping when choosing where to evict.
#[derive(Clone, Copy, Debug)]
pub struct MappingUsage {
    /// Buffers of the mapping now resident (or being loaded).
    pub resident: u64,
    /// Bytes per buffer.
    pub buffer_size: usize,
    /// The mapping's [`MapOptions::weight`](crate::MapOptions::weight), at least 1.
    pub weight: u32,
}

impl MappingUsage {
    fn bytes(&self) -> u64 {
        self.resident * self.buffer_size as u64
    }
}

/// Offers mappings most-over-their-weighted-share first; mappings holding nothing last.
#[derive(Default)]
pub struct ProportionalGlobal;

impl GlobalPolicy for ProportionalGlobal {
    fn choose_eviction_mappings(&self, usage: &[MappingUsage], out: &mut Vec<usize>) {
        let start = out.len();
        out.extend(0..usage.len());
        // bytes_a / w_a > bytes_b / w_b, compared without division; a stable sort keeps
        // registration order among equals.
        out[start..].sort_by(|&a, &b| {
            let (ua, ub) = (&usage[a], &usage[b]);
            let lhs = u128::from(ua.bytes()) * u128::from(ub.weight.max(1));
            let rhs = u128::from(ub.bytes()) * u128::from(ua.weight.max(1));
            rhs.cmp(&lhs)
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(resident: u64, weight: u32) -> MappingUsage {
        MappingUsage {
            resident,
            buffer_size: 4096,
            weight,
        }
    }

    fn order(u: &[MappingUsage]) -> Vec<usize> {
        let mut out = Vec::new();
        ProportionalGlobal.choose_eviction_mappings(u, &mut out);
        out
    }

    #[test]
    fn equal_weights_evict_the_largest_first() {
        assert_eq!(
            order(&[usage(100, 1), usage(900, 1), usage(0, 1)]),
            [1, 0, 2]
        );
        assert_eq!(order(&[usage(0, 1), usage(5, 1)]), [1, 0], "empty last");
        assert!(order(&[]).is_empty());
    }

    #[test]
    fn weights_scale_the_share_a_mapping_may_hold() {
        // 600 of weight 3 is 200 per unit of weight, 300 of weight 1 is 300: the lighter
        // tenant is further over its share although it holds less.
        assert_eq!(order(&[usage(600, 3), usage(300, 1)]), [1, 0]);
        // At exactly its share (3:1) neither is preferred: registration order.
        assert_eq!(order(&[usage(750, 3), usage(250, 1)]), [0, 1]);
        assert_eq!(order(&[usage(760, 3), usage(240, 1)]), [0, 1]);
        assert_eq!(order(&[usage(740, 3), usage(260, 1)]), [1, 0]);
        // Buffer sizes count: bytes, not buffers.
        let big = MappingUsage {
            resident: 10,
            buffer_size: 1 << 20,
            weight: 1,
        };
        assert_eq!(order(&[usage(1000, 1), big]), [1, 0]);
    }

    #[test]
    fn appends_after_what_out_already_holds() {
        let mut out = vec![7];
        ProportionalGlobal.choose_eviction_mappings(&[usage(1, 1), usage(2, 1)], &mut out);
        assert_eq!(out, [7, 1, 0]);
    }
}
