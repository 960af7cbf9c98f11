//! Prefetching by a columnar file's layout (Parquet, ORC): row groups of column chunks.
//!
//! A reader scanning a few columns reads the chunks of those columns row group after row group,
//! so a miss in column `c`'s chunk of row group `r` says what it wants next: the rest of that
//! chunk, then `c`'s chunks in row groups `r+1..=r+depth`, and no chunk of a column it never
//! touched. Unlike a Python hook on a file object, this runs on every miss of the mapping, so
//! it also serves a transparent mapping read through plain loads (pyarrow reading a Parquet
//! file out of the mapping's memory), whose hits nobody sees.
//!
//! Those hits are why the first buffer of chunk `(r+1, c)` is left out of the prefetch, as
//! Linux's readahead leaves its `PG_readahead` page: a chain of prefetched chunks read without
//! a miss would end after `depth` row groups. The reader misses on that one buffer when it
//! enters the next row group, and the miss prefetches the next `depth` chunks again. Any other
//! miss in a chunk (a chunk whose marker shares its buffer with a neighbour's prefetch, say)
//! starts the chain afresh.
//!
//! A buffer may hold the end of one chunk and the start of the next. A miss there is taken
//! for the later chunk's: a reader entering a chunk misses on its first buffer, while a
//! reader of the earlier chunk had that buffer prefetched with the rest of its chunk.

use super::super::Layout;
use super::Prefetcher;

/// The chunk layout of one file and how many row groups ahead to prefetch.
pub struct ColumnChunks {
    /// `(start, end, row group, column)` of every non-empty chunk, in bytes from the start of
    /// the mapping, sorted by start.
    chunks: Vec<(u64, u64, usize, usize)>,
    /// `index[r][c]`: where `(r, c)` is in `chunks`, if it is there.
    index: Vec<Vec<Option<usize>>>,
    depth: usize,
    bs: u64,
    buffers: u64,
}

impl ColumnChunks {
    /// `chunks[r][c]` is the byte range `(start, end)` of column `c`'s chunk in row group `r`,
    /// relative to the start of the mapping; `depth` row groups are prefetched ahead (0: only
    /// the rest of the chunk that missed). Empty and overlapping ranges are dropped (a file's
    /// chunks never overlap).
    pub fn new(chunks: Vec<Vec<(u64, u64)>>, depth: usize) -> Self {
        let mut all: Vec<(u64, u64, usize, usize)> = chunks
            .iter()
            .enumerate()
            .flat_map(|(r, row)| {
                row.iter()
                    .enumerate()
                    .filter(|(_, &(s, e))| e > s)
                    .map(move |(c, &(s, e))| (s, e, r, c))
            })
            .collect();
        all.sort_unstable();
        let mut end = 0;
        all.retain(|&(s, e, _, _)| {
            let keep = s >= end;
            end = end.max(e);
            keep
        });
        let mut index: Vec<Vec<Option<usize>>> =
            chunks.iter().map(|row| vec![None; row.len()]).collect();
        for (k, &(_, _, r, c)) in all.iter().enumerate() {
            index[r][c] = Some(k);
        }
        ColumnChunks {
            chunks: all,
            index,
            depth,
            bs: 1,
            buffers: 0,
        }
    }

    /// The buffers of chunk `k`, less its first when `skip_first`.
    fn push_chunk(&self, k: usize, skip_first: bool, out: &mut Vec<u64>) {
        let (s, e, _, _) = self.chunks[k];
        let first = s / self.bs + u64::from(skip_first);
        let end = e.div_ceil(self.bs).min(self.buffers);
        out.extend(first..end);
    }
}

impl Prefetcher for ColumnChunks {
    fn name(&self) -> &str {
        "column-chunks"
    }

    fn attach(&mut self, layout: Layout) {
        self.bs = layout.buffer_size.max(1) as u64;
        self.buffers = layout.buffers;
    }

    fn is_active(&self) -> bool {
        !self.chunks.is_empty()
    }

    fn on_miss(&self, index: u64, out: &mut Vec<u64>) {
        let (lo, hi) = (index * self.bs, (index + 1) * self.bs);
        // The last chunk starting before the buffer's end, if it reaches into the buffer.
        let k = self.chunks.partition_point(|&(s, _, _, _)| s < hi);
        let Some(&(_, e, r, c)) = k.checked_sub(1).map(|k| &self.chunks[k]) else {
            return;
        };
        if e <= lo {
            return;
        }
        // The rest of this chunk...
        out.extend(index + 1..e.div_ceil(self.bs).min(self.buffers));
        // ...and the column's chunks in the next row groups, the first one's marker left out.
        for ahead in 1..=self.depth {
            let Some(&Some(next)) = self.index.get(r + ahead).and_then(|row| row.get(c)) else {
                break;
            };
            self.push_chunk(next, ahead == 1, out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two columns, four row groups of 1600 bytes, buffers of 100 bytes: column 0's chunks
    /// are 1050 bytes and column 1's 550, so the two share a buffer in every row group.
    fn layout() -> ColumnChunks {
        let chunks = (0..4u64)
            .map(|r| {
                let base = r * 1600;
                vec![(base, base + 1050), (base + 1050, base + 1600)]
            })
            .collect();
        let mut p = ColumnChunks::new(chunks, 2);
        p.attach(Layout {
            buffers: 64,
            capacity: 64,
            buffer_size: 100,
        });
        p
    }

    fn on_miss(p: &ColumnChunks, i: u64) -> Vec<u64> {
        let mut out = Vec::new();
        p.on_miss(i, &mut out);
        out
    }

    #[test]
    fn a_miss_prefetches_its_chunk_and_the_columns_next_chunks_with_a_marker() {
        let p = layout();
        // Buffer 2 is in column 0 of row group 0 (buffers 0..11): the rest of it, then column
        // 0 of row groups 1 (16..27, its first buffer 16 the marker) and 2 (32..43).
        let want: Vec<u64> = (3..11).chain(17..27).chain(32..43).collect();
        assert_eq!(on_miss(&p, 2), want);
        // The marker's miss prefetches the two row groups after it.
        let want: Vec<u64> = (17..27).chain(33..43).chain(48..59).collect();
        assert_eq!(on_miss(&p, 16), want);
        // Near the end: no row groups past the last.
        assert_eq!(on_miss(&p, 60), (61..64).collect::<Vec<_>>());
    }

    #[test]
    fn a_buffer_two_chunks_share_is_the_later_ones() {
        let p = layout();
        // Buffer 10 holds 1000..1100: column 0's end and column 1's start (1050) in row group
        // 0. Column 1's rest (11..16), its chunks in row groups 1 (26..32, 26 the marker) and
        // 2 (42..48); nothing of column 0.
        let want: Vec<u64> = (11..16).chain(27..32).chain(42..48).collect();
        assert_eq!(on_miss(&p, 10), want);
    }

    #[test]
    fn buffers_outside_every_chunk_prefetch_nothing() {
        let chunks = vec![vec![(1000, 2000)]];
        let mut p = ColumnChunks::new(chunks, 2);
        p.attach(Layout {
            buffers: 64,
            capacity: 64,
            buffer_size: 100,
        });
        assert!(on_miss(&p, 3).is_empty());
        assert!(on_miss(&p, 25).is_empty());
        assert!(ColumnChunks::new(vec![vec![(5, 5)]], 1).chunks.is_empty());
    }
}
