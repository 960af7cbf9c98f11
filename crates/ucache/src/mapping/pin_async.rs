//! Async pins and `ensure_cached` (feature `tokio`): the same protocol as `pin.rs`, with the
//! miss's read and every wait awaited, so a task on a miss holds no thread.
//!
//! - **Hit**: [`MappingCore::pin_hit`], one atomic add, as the blocking pin; the future is
//!   ready at its first poll, without allocating or yielding.
//! - **Miss**: the claim of `claim.rs` (`Evicted → Loading`), room, then the store's
//!   [`Object::read_owned`](crate::store::Object::read_owned) awaited, its bytes copied into
//!   the buffer, and the load published. The claim is a guard held across the awaits: a future
//!   dropped at any of them (a cancelled task) undoes the load as a failed one would, giving
//!   back the room and waking the waiters, and the read it started owns its own memory.
//! - **Waits** (another task or thread loads, evicts or holds the buffer): the task awaits
//!   the word's change (`BufferState::changed`, `state/changed.rs`), its waker left in
//!   [`crate::wakers`]' table and woken by the same transitions that wake threads.
//!
//! What still runs on the calling thread, by design: the policy's hooks; an eviction round
//! when the budget is full (CPU work and `madvise`, and, on a writable mapping, the write-back
//! of dirty victims through the store's blocking writes: the background evictor keeps room
//! free so that loaders rarely evict); and on a transparent mapping that sets buffers aside,
//! bringing one back. When nothing can be evicted, the miss sleeps between tries (tokio's
//! timer: the runtime needs time enabled) and fails as a blocking one after the cache's
//! `budget_wait`.
//!
//! An async waiter cannot tell that the buffer it waits for is held by its own task (its
//! executor thread may run other tasks holding pins), so unlike the blocking pin it does not
//! report [`Error::WouldDeadlock`]: a task that holds an exclusive pin and awaits a pin of the
//! same buffer waits forever.

use std::future::Future;
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

use super::claim::LoadClaim;
use super::pin::Step;
use super::{Mapping, MappingCore};
use crate::error::{Error, Result};
use crate::guard::{ExclusiveGuard, SharedGuard};
use crate::state::{Pin, Word};
use crate::stopwatch::Stopwatch;

/// Loads of one `ensure_cached_async` in flight at once: enough to keep an object store's
/// latency hidden, few enough that one call does not claim a whole budget at once.
const ENSURE_DEPTH: usize = 64;

/// The longest sleep between tries for memory of a miss that found the budget full.
const MAX_ROOM_PAUSE: Duration = Duration::from_millis(1);

impl MappingCore {
    /// Pins buffer `i` (`Pin::None`: only makes it cached), awaiting a miss or a wait.
    async fn pin_async(self: &Arc<Self>, i: u64, pin: Pin) -> Result<()> {
        let s = self.slot(i)?;
        if pin == Pin::Shared && self.pin_hit(s, i) {
            return Ok(());
        }
        let mut waited = false;
        loop {
            match self.pin_step(s, i, pin, waited) {
                Step::Pinned => return Ok(()),
                Step::Load(w) => {
                    if self.load_async(i, w, pin).await? {
                        self.after_miss(i);
                        return Ok(());
                    }
                }
                Step::Restore(w) => {
                    if self.restore(i, w, pin, false, &mut Stopwatch::new(false))? {
                        return Ok(());
                    }
                }
                Step::Wait(w) => {
                    waited = true;
                    s.changed(w).await;
                }
            }
        }
    }

    /// [`MappingCore::load_one`] with the room's wait and the read awaited.
    async fn load_async(&self, i: u64, seen: Word, pin: Pin) -> Result<bool> {
        let Some(mut claim) = self.claim_load(i, seen) else {
            return Ok(false);
        };
        self.policy.on_miss(i);
        let t0 = Instant::now();
        self.room_async(&mut claim).await?;
        // A readahead marker's bytes were read with its window, as in `load_one`.
        let read = !self.install_kept(&mut claim, seen, false)?;
        if read {
            let got = self
                .object
                .clone()
                .read_owned(self.object_offset(i), self.bs)
                .await;
            claim.fill_from(got)?;
        }
        self.publish_miss(claim, pin, false, read, t0.elapsed());
        Ok(true)
    }

    /// Takes room for `claim` without blocking while none is to be had: one eviction round
    /// per try, and a sleep between tries.
    async fn room_async(&self, claim: &mut LoadClaim<'_>) -> Result<()> {
        let mut wait = crate::budget::RoomWait::default();
        let mut pause = Duration::from_micros(50);
        while !claim.take_room(false)? {
            self.cache.budget.still_waiting(&mut wait)?;
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(MAX_ROOM_PAUSE);
        }
        Ok(())
    }

    /// Makes the listed buffers cached, at most [`ENSURE_DEPTH`] loads in flight; the first
    /// error once every started load has finished.
    async fn ensure_cached_async(self: &Arc<Self>, indices: &[u64]) -> Result<()> {
        let v = self.distinct(indices)?;
        if v.len() as u64 > self.cache.budget.budget_bytes() >> self.shift {
            return Err(Error::BadLength {
                len: v.len() as u64 * self.bs as u64,
                why: "more buffers to hold at once than the cache's budget",
            });
        }
        each_bounded(&v, ENSURE_DEPTH, |i| self.pin_async(i, Pin::None)).await
    }
}

/// Runs `f(i)` for every item, at most `depth` at once, on the calling task; the first error
/// after every started one has finished (none is started after an error).
async fn each_bounded<F, Fut>(items: &[u64], depth: usize, f: F) -> Result<()>
where
    F: Fn(u64) -> Fut,
    Fut: Future<Output = Result<()>>,
{
    let mut next = 0;
    let mut running: Vec<std::pin::Pin<Box<Fut>>> = Vec::with_capacity(depth.min(items.len()));
    let mut first: Option<Error> = None;
    std::future::poll_fn(|cx| loop {
        while first.is_none() && running.len() < depth && next < items.len() {
            running.push(Box::pin(f(items[next])));
            next += 1;
        }
        let before = running.len();
        running.retain_mut(|fut| match fut.as_mut().poll(cx) {
            Poll::Ready(r) => {
                if let Err(e) = r {
                    first.get_or_insert(e);
                }
                false
            }
            Poll::Pending => true,
        });
        if running.is_empty() && (next == items.len() || first.is_some()) {
            return Poll::Ready(());
        }
        if running.len() == before {
            return Poll::Pending;
        }
    })
    .await;
    first.map_or(Ok(()), Err)
}

/// The async face (feature `tokio`). See `pin_async.rs` for what blocks and what awaits.
impl Mapping {
    /// [`Mapping::pin_shared`] for async code: a miss awaits the store instead of blocking the
    /// executor thread, and waiting for a buffer another task or thread loads is awaited too.
    /// A hit completes at the first poll without allocating (one atomic add, as the blocking
    /// pin). Dropping the future mid-miss undoes the load: the buffer goes back to evicted,
    /// whoever waits on it is woken, and nothing is lost.
    ///
    /// Must run inside a tokio runtime with time enabled (`Builder::enable_all`). The guard
    /// does not leave its thread: drop it before the task's next await on a multi-thread
    /// runtime (or hold it across awaits on a `current_thread` runtime or a `LocalSet`).
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use ucache::{Cache, CacheOptions, MapOptions, store::MemoryStore};
    /// let store = Arc::new(MemoryStore::new());
    /// store.insert("t", vec![9; 8 * 4096]);
    /// let cache = Cache::new(CacheOptions::new(4 * 4096).batch(1)).unwrap();
    /// let map = cache.map(store, "t", MapOptions::new()).unwrap();
    /// let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    /// let sum: u64 = rt.block_on(async {
    ///     let mut sum = 0;
    ///     for i in 0..8 {
    ///         let g = map.pin_shared_async(i).await.unwrap();
    ///         sum += g.iter().map(|&b| b as u64).sum::<u64>();
    ///     }
    ///     sum
    /// });
    /// assert_eq!(sum, 9 * 8 * 4096);
    /// ```
    pub async fn pin_shared_async(&self, index: u64) -> Result<SharedGuard<'_>> {
        let m = &self.core;
        m.pin_async(index, Pin::Shared).await?;
        // SAFETY: we hold a shared pin: the buffer is Cached and nobody writes it until unpin.
        Ok(unsafe { SharedGuard::new(m.state(index), index, m.ptr(index), m.valid(index)) })
    }

    /// [`Mapping::pin_exclusive`] for async code, as [`Mapping::pin_shared_async`].
    pub async fn pin_exclusive_async(&self, index: u64) -> Result<ExclusiveGuard<'_>> {
        self.core.slot(index)?;
        if !self.core.writable {
            return Err(Error::ReadOnly);
        }
        self.core.pin_async(index, Pin::Exclusive).await?;
        self.core.exclusive_guard(index)
    }

    /// [`Mapping::ensure_cached`] for async code: every buffer overlapping
    /// `[offset, offset+len)` is made cached, many loads in flight on the calling task.
    pub async fn ensure_cached_async(&self, offset: u64, len: u64) -> Result<()> {
        let v: Vec<u64> = self.core.range(offset, len)?.collect();
        self.core.ensure_cached_async(&v).await
    }

    /// [`Mapping::ensure_cached_buffers`] for async code.
    pub async fn ensure_cached_buffers_async(&self, indices: &[u64]) -> Result<()> {
        self.core.ensure_cached_async(indices).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send<T: Send>(_: &T) {}

    /// The futures can be spawned on a multi-thread runtime.
    #[test]
    fn futures_are_send() {
        let store = Arc::new(crate::store::MemoryStore::new());
        store.insert("o", vec![0; 4096]);
        let cache = crate::Cache::new(crate::CacheOptions::new(1 << 20)).unwrap();
        let m = cache
            .map(store, "o", crate::MapOptions::new().writable(true))
            .unwrap();
        assert_send(&m.pin_shared_async(0));
        assert_send(&m.pin_exclusive_async(0));
        assert_send(&m.ensure_cached_async(0, 4096));
        assert_send(&m.ensure_cached_buffers_async(&[0]));
    }

    #[test]
    fn each_bounded_keeps_depth_and_reports_the_first_error() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let live = std::cell::Cell::new(0usize);
        let peak = std::cell::Cell::new(0usize);
        let items: Vec<u64> = (0..100).collect();
        let r = rt.block_on(each_bounded(&items, 8, |i| {
            let (live, peak) = (&live, &peak);
            async move {
                live.set(live.get() + 1);
                peak.set(peak.get().max(live.get()));
                tokio::task::yield_now().await;
                live.set(live.get() - 1);
                if i == 50 {
                    Err(Error::ReadOnly)
                } else {
                    Ok(())
                }
            }
        }));
        assert!(matches!(r, Err(Error::ReadOnly)));
        assert_eq!(peak.get(), 8);
        assert_eq!(live.get(), 0, "every started one finished");
    }
}
