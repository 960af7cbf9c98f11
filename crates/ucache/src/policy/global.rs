//! The default cache-wide policy: take victims first from the mapping that holds the most
//! memory for its weight, so mappings converge to shares of the budget proportional to their
//! weights (equal shares by default) without a global replacement list.
//!
//! Evicting in proportion to what each mapping holds (the earlier rule) lets a tenant that
//! loads fast, such as a scan, grow its share with every load and push out a tenant whose
//! working set is reused; ordering by weighted share bounds what the scan can take.
//!
//! A share protects reuse, so a mapping that nobody uses keeps none: idle mappings
//! ([`MappingUsage::idle`]) are offered before every active one, whatever their shares.

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
    /// Nobody has used the mapping (a pin, a read, an optimistic read, a miss) while the cache
    /// evicted half its budget. Always false for a transparent mapping, whose hits are plain
    /// loads that ucache does not see.
    pub idle: bool,
}

impl MappingUsage {
    fn bytes(&self) -> u64 {
        self.resident * self.buffer_size as u64
    }
}

/// Offers idle mappings first, those holding the most bytes first; then the others,
/// most-over-their-weighted-share first; mappings holding nothing last. The default.
#[derive(Default)]
pub struct ProportionalGlobal;

impl GlobalPolicy for ProportionalGlobal {
    fn choose_eviction_mappings(&self, usage: &[MappingUsage], out: &mut Vec<usize>) {
        by_share(usage, out, true);
    }
}

/// [`ProportionalGlobal`] with weights as reservations: an idle mapping keeps its share, as a
/// cgroup's `memory.min` keeps a tenant's pages however long it sleeps. For a tenant that must
/// find its working set cached when it wakes, at the price of memory nobody uses meanwhile.
#[derive(Default)]
pub struct ReservedShares;

impl GlobalPolicy for ReservedShares {
    fn choose_eviction_mappings(&self, usage: &[MappingUsage], out: &mut Vec<usize>) {
        by_share(usage, out, false);
    }
}

/// Appends the indices of `usage` to `out`, idle mappings holding something first when
/// `idle_first`, then by bytes per unit of weight, most first (weights count for mappings
/// not put first as idle).
fn by_share(usage: &[MappingUsage], out: &mut Vec<usize>, idle_first: bool) {
    let start = out.len();
    out.extend(0..usage.len());
    let first = |u: &MappingUsage| idle_first && u.idle && u.resident > 0;
    let weight = |u: &MappingUsage| if first(u) { 1 } else { u.weight.max(1) };
    // bytes_a / w_a > bytes_b / w_b, compared without division. A stable sort keeps
    // registration order among equals.
    out[start..].sort_by(|&a, &b| {
        let (ua, ub) = (&usage[a], &usage[b]);
        let lhs = u128::from(ua.bytes()) * u128::from(weight(ub));
        let rhs = u128::from(ub.bytes()) * u128::from(weight(ua));
        first(ub).cmp(&first(ua)).then(rhs.cmp(&lhs))
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(resident: u64, weight: u32) -> MappingUsage {
        MappingUsage {
            resident,
            buffer_size: 4096,
            weight,
            idle: false,
        }
    }

    fn idle(resident: u64, weight: u32) -> MappingUsage {
        MappingUsage {
            idle: true,
            ..usage(resident, weight)
        }
    }

    fn order(u: &[MappingUsage]) -> Vec<usize> {
        let mut out = Vec::new();
        ProportionalGlobal.choose_eviction_mappings(u, &mut out);
        out
    }

    fn reserved(u: &[MappingUsage]) -> Vec<usize> {
        let mut out = Vec::new();
        ReservedShares.choose_eviction_mappings(u, &mut out);
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
            idle: false,
        };
        assert_eq!(order(&[usage(1000, 1), big]), [1, 0]);
    }

    #[test]
    fn idle_mappings_go_first_whatever_their_shares() {
        // The idle mapping is far under its share (10 of weight 100), and still first.
        assert_eq!(order(&[usage(900, 1), idle(10, 100)]), [1, 0]);
        // Among idle ones, the most bytes first; weights do not protect them.
        assert_eq!(
            order(&[usage(5, 1), idle(10, 1), idle(20, 100), usage(50, 1)]),
            [2, 1, 3, 0]
        );
        // An idle mapping holding nothing is last, as any empty one.
        assert_eq!(order(&[idle(0, 1), usage(5, 1)]), [1, 0]);
    }

    #[test]
    fn reserved_shares_ignore_idleness() {
        assert_eq!(reserved(&[usage(900, 1), idle(10, 100)]), [0, 1]);
        assert_eq!(
            reserved(&[usage(5, 1), idle(10, 1), idle(20, 100), usage(50, 1)]),
            [3, 1, 0, 2]
        );
        // Without idle mappings the two agree.
        let u = [usage(600, 3), usage(300, 1), usage(0, 1)];
        assert_eq!(reserved(&u), order(&u));
    }

    #[test]
    fn appends_after_what_out_already_holds() {
        let mut out = vec![7];
        ProportionalGlobal.choose_eviction_mappings(&[usage(1, 1), usage(2, 1)], &mut out);
        assert_eq!(out, [7, 1, 0]);
    }
}
