//! The before-write-back hook: the application's last word before a dirty buffer reaches the
//! store.
//!
//! A storage engine with a write-ahead log must make the log durable up to a page's last change
//! before that page is written (the WAL rule). Eviction is not the only way a page gets
//! written: [`crate::Mapping::writeback`], `msync` and `unmap` write too, and they do not ask
//! [`crate::policy::Policy::is_evictable`]. Every one of those paths writes through
//! `write_held` (`writeback.rs`), which calls this hook for each buffer it is about to write,
//! so one hook covers them all.

use std::io;
use std::sync::Arc;

use super::MappingCore;
use crate::error::Error;

/// Runs before a dirty buffer is written back, with the buffer's index and its bytes as they
/// will be written (the write-back's claim keeps writers out until the write is done). An
/// `Err` cancels that buffer's write: it stays dirty and resident, and the error is reported
/// where a failed write would be (`msync`'s result, an explicit `evict`'s, a load's patience
/// running out).
///
/// It runs on whatever thread writes back (an IO thread, the background evictor, a thread
/// whose miss is making room, the caller of `msync`), possibly while that thread holds pins of
/// its own, and while the cache holds a shared claim on the buffer: it must not pin buffers of
/// this mapping, nor wait for a thread that may be waiting for one.
///
/// ```
/// # use std::sync::{Arc, Mutex};
/// # use ucache::{Cache, CacheOptions, MapOptions, store::MemoryStore};
/// let seen = Arc::new(Mutex::new(Vec::new()));
/// let s = seen.clone();
/// let hook: ucache::BeforeWriteback = Arc::new(move |index, bytes: &[u8]| {
///     s.lock().unwrap().push((index, bytes[0]));
///     Ok(())
/// });
/// let store = Arc::new(MemoryStore::new());
/// store.insert("pages", vec![0; 4 * 4096]);
/// let cache = Cache::new(CacheOptions::new(16 * 4096).batch(4)).unwrap();
/// let opts = MapOptions::new().writable(true).before_writeback(hook);
/// let map = cache.map(store, "pages", opts).unwrap();
/// map.pin_exclusive(2).unwrap()[0] = 9;
/// map.msync(0, map.len()).unwrap();
/// assert_eq!(*seen.lock().unwrap(), vec![(2, 9)]);
/// ```
pub type BeforeWriteback = Arc<dyn Fn(u64, &[u8]) -> io::Result<()> + Send + Sync>;

impl MappingCore {
    /// Runs the hook on each claimed buffer, in order: the buffers it refused, with the error
    /// to report for each, in the order of `claimed`.
    pub(super) fn run_before_writeback(&self, claimed: &[u64]) -> Vec<(u64, Error)> {
        let Some(hook) = &self.before_writeback else {
            return Vec::new();
        };
        let mut refused = Vec::new();
        for &i in claimed {
            // SAFETY: buffer i is claimed for write-back (a shared pin and WB): it is cached
            // and no writer changes it until the claim ends, after the write.
            let bytes =
                unsafe { std::slice::from_raw_parts(self.ptr(i) as *const u8, self.valid(i)) };
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| hook(i, bytes)))
                .unwrap_or_else(|_| Err(io::Error::other("before-write-back hook panicked")));
            if let Err(e) = r {
                refused.push((
                    i,
                    Error::io(
                        "before write-back",
                        self.object.name(),
                        self.object_offset(i),
                        e,
                    ),
                ));
            }
        }
        refused
    }
}
