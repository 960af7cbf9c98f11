//! Merging the misses of one batch into few ranged GETs.
//!
//! A request to an object store costs a round trip and a per-request fee whatever its size, so
//! a prefetch of 32 consecutive 4 KiB buffers should be one 128 KiB GET, not 32. Requests that
//! touch end to end are always merged. Requests separated by a gap are merged when the gap is
//! at most [`Coalesce::gap`]: reading the gap's bytes (and dropping them) costs `gap /
//! bandwidth`, a GET of its own costs the time to its first byte, so a gap below their
//! product (a few MiB on S3: tens of ms at ~100 MB/s per connection; the same on a loopback
//! server: ~2.5 ms at ~1 GB/s) is cheaper read than skipped. Arrow's read coalescing sizes its
//! "hole" limit by the same product. The gap's bytes never enter the cache: its buffers were
//! not asked for and may be resident already.

/// How one batch's requests are grouped into GETs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Coalesce {
    /// Largest GET that requests are merged into (one request larger than this is still one
    /// GET of its own).
    pub limit: usize,
    /// Largest gap between two requests that a GET reads through rather than split at.
    pub gap: usize,
}

/// One GET: `start..end` of the object, feeding the requests listed in `members` (indices into
/// the batch, in offset order, each starting at or after the end of the one before, at most
/// [`Coalesce::gap`] bytes after it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Run {
    pub start: u64,
    pub end: u64,
    pub members: Vec<usize>,
}

/// Groups requests `(offset, len)` into runs no longer than `how.limit` bytes whose requests
/// are at most `how.gap` bytes apart (a single request longer than the limit is a run of its
/// own). Overlapping requests are never merged. Empty requests are left out.
pub fn coalesce(reqs: &[(u64, usize)], how: Coalesce) -> Vec<Run> {
    let mut order: Vec<usize> = (0..reqs.len()).filter(|&i| reqs[i].1 > 0).collect();
    order.sort_by_key(|&i| reqs[i].0);
    let mut runs: Vec<Run> = Vec::new();
    for i in order {
        let (off, len) = reqs[i];
        let end = off + len as u64;
        if let Some(r) = runs.last_mut() {
            if off >= r.end && off - r.end <= how.gap as u64 && end - r.start <= how.limit as u64 {
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

    /// Adjacent requests only, up to `limit`.
    fn adjacent(limit: usize) -> Coalesce {
        Coalesce { limit, gap: 0 }
    }

    #[test]
    fn adjacent_requests_merge_in_offset_order() {
        let reqs = [(8192, 4096), (0, 4096), (4096, 4096)];
        assert_eq!(
            coalesce(&reqs, adjacent(1 << 20)),
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
        let runs = coalesce(&reqs, adjacent(1 << 20));
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
        let runs = coalesce(&reqs, adjacent(3 * 4096));
        assert_eq!(runs.len(), 4);
        assert!(runs.iter().all(|r| r.end - r.start <= 3 * 4096));
        let members: Vec<usize> = runs.iter().flat_map(|r| r.members.clone()).collect();
        assert_eq!(members, (0..10).collect::<Vec<_>>());
        // One request larger than the limit still gets its GET.
        assert_eq!(coalesce(&[(0, 1 << 20)], adjacent(4096)).len(), 1);
    }

    #[test]
    fn empty_requests_are_skipped_and_duplicates_not_merged() {
        assert!(coalesce(&[(0, 0)], adjacent(4096)).is_empty());
        let runs = coalesce(&[(0, 4096), (0, 4096)], adjacent(1 << 20));
        assert_eq!(runs.len(), 2, "overlapping requests each get their own GET");
    }

    #[test]
    fn gaps_up_to_the_limit_are_read_through() {
        let how = Coalesce {
            limit: 1 << 20,
            gap: 8192,
        };
        // 4 KiB apart and 8 KiB apart merge; 8 KiB + 1 apart does not.
        let reqs = [(0, 4096), (8192, 4096), (20480, 4096), (32769, 4096)];
        let runs = coalesce(&reqs, how);
        assert_eq!(
            runs,
            vec![
                Run {
                    start: 0,
                    end: 24576,
                    members: vec![0, 1, 2]
                },
                Run {
                    start: 32769,
                    end: 36865,
                    members: vec![3]
                }
            ]
        );
        // The limit counts the gap's bytes: a run never reads more than `limit`.
        let capped = coalesce(
            &reqs[..2],
            Coalesce {
                limit: 8192,
                gap: 8192,
            },
        );
        assert_eq!(capped.len(), 2);
        // Overlaps are never merged, whatever the gap.
        assert_eq!(coalesce(&[(0, 4096), (2048, 4096)], how).len(), 2);
    }
}
