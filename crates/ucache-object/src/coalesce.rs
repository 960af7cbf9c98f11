//! Merging adjacent misses of one batch into one ranged GET.
//!
//! A request to an object store costs a round trip and a per-request fee whatever its size, so
//! a prefetch of 32 consecutive 4 KiB buffers should be one 128 KiB GET, not 32. Only buffers
//! that touch end to end are merged: filling a gap would fetch bytes nobody asked for, and a
//! gap's buffers may be resident already.

/// One GET: `start..end` of the object, feeding the requests listed in `members` (indices into
/// the batch, in offset order, each starting where the previous one ended).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Run {
    pub start: u64,
    pub end: u64,
    pub members: Vec<usize>,
}

/// Groups requests `(offset, len)` into runs of adjacent ones no longer than `limit` bytes
/// (a single request longer than `limit` is a run of its own). Empty requests are left out.
pub fn coalesce(reqs: &[(u64, usize)], limit: usize) -> Vec<Run> {
    let mut order: Vec<usize> = (0..reqs.len()).filter(|&i| reqs[i].1 > 0).collect();
    order.sort_by_key(|&i| reqs[i].0);
    let mut runs: Vec<Run> = Vec::new();
    for i in order {
        let (off, len) = reqs[i];
        let end = off + len as u64;
        if let Some(r) = runs.last_mut() {
            if r.end == off && (end - r.start) <= limit as u64 {
                r.end = end;
                r.members.push(i);
                continue;
            }
        }
        runs.push(Run {
            start: off,
            end,
            members: vec![i],
        });
    }
    runs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adjacent_requests_merge_in_offset_order() {
        let reqs = [(8192, 4096), (0, 4096), (4096, 4096)];
        assert_eq!(
            coalesce(&reqs, 1 << 20),
            vec![Run {
                start: 0,
                end: 12288,
                members: vec![1, 2, 0]
            }]
        );
    }

    #[test]
    fn gaps_split_runs() {
        let reqs = [(0, 4096), (8192, 4096), (12288, 4096)];
        let runs = coalesce(&reqs, 1 << 20);
        assert_eq!(runs.len(), 2);
        assert_eq!((runs[0].start, runs[0].end), (0, 4096));
        assert_eq!(
            (runs[1].start, runs[1].end, &runs[1].members[..]),
            (8192, 16384, &[1, 2][..])
        );
    }

    #[test]
    fn limit_caps_a_run() {
        let reqs: Vec<(u64, usize)> = (0..10).map(|k| (k * 4096, 4096)).collect();
        let runs = coalesce(&reqs, 3 * 4096);
        assert_eq!(runs.len(), 4);
        assert!(runs.iter().all(|r| r.end - r.start <= 3 * 4096));
        let members: Vec<usize> = runs.iter().flat_map(|r| r.members.clone()).collect();
        assert_eq!(members, (0..10).collect::<Vec<_>>());
        // One request larger than the limit still gets its GET.
        assert_eq!(coalesce(&[(0, 1 << 20)], 4096).len(), 1);
    }

    #[test]
    fn empty_requests_are_skipped_and_duplicates_not_merged() {
        assert!(coalesce(&[(0, 0)], 4096).is_empty());
        let runs = coalesce(&[(0, 4096), (0, 4096)], 1 << 20);
        assert_eq!(runs.len(), 2, "overlapping requests each get their own GET");
    }
}
