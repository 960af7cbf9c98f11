//! Prefetchers: what to read ahead after a demand miss, independent of what to evict.
//!
//! A [`Policy`](super::Policy) answers both questions, but they are orthogonal: any
//! eviction policy can be paired with any prefetcher through [`WithPrefetch`]. A prefetcher
//! only proposes; the mapping clamps proposals to its range, skips buffers that are cached or
//! loading, and loads the rest asynchronously on the IO worker.

mod callback;
mod column_chunks;
mod none;
mod read_ahead;
mod stride;
mod with_prefetch;

pub use callback::Callback;
pub use column_chunks::ColumnChunks;
pub use none::NoPrefetch;
pub use read_ahead::ReadAhead;
pub use stride::Stride;
pub use with_prefetch::WithPrefetch;

use super::Layout;

/// Proposes buffers to read ahead after a demand miss.
///
/// Called on the missing thread, concurrently from many threads; implementations keep their
/// stream state behind a lock or in atomics.
pub trait Prefetcher: Send + Sync + 'static {
    /// A short name for statistics and benchmark output.
    fn name(&self) -> &str;

    /// Called once, before the mapping is shared.
    fn attach(&mut self, layout: Layout) {
        let _ = layout;
    }

    /// Whether [`Prefetcher::on_miss`] can ever propose anything. Asked once at attach time, so
    /// a prefetcher that never does costs the miss path nothing.
    fn is_active(&self) -> bool {
        true
    }

    /// A demand miss on `index`: appends the buffers to read ahead to `out`.
    fn on_miss(&self, index: u64, out: &mut Vec<u64>);
}

/// What a prefetcher answers to each miss of `misses`, in order (for tests).
#[cfg(test)]
fn answers(p: &impl Prefetcher, misses: &[u64]) -> Vec<Vec<u64>> {
    misses
        .iter()
        .map(|&i| {
            let mut v = Vec::new();
            p.on_miss(i, &mut v);
            v
        })
        .collect()
}
