//! ucache itself, driven four ways:
//! - explicit: one `pin_shared` per op, so a miss is one synchronous load, comparable with
//!   raw-psync at the same thread count;
//! - prefetch: `ensure_cached_buffers` on `--prefetch-depth` (32) indices first, so the store
//!   can keep many loads in flight, comparable with raw-uring (and with raw-get over S3);
//! - optimistic: `read_optimistic`, no pin at all on a hit;
//! - transparent: plain loads from a transparent mapping, exactly the mmap system's loop, so
//!   the two differ only in who serves the faults.

use std::sync::Arc;

use ucache::store::{FileStore, Store, UringOptions, UringStore};
use ucache::{Cache, CacheOptions, FaultHandling, MapOptions, Mapping};

use super::{s3_config, Params, StoreKind, System};
use crate::bench::worker::ThreadCtx;

/// How the workload drives the mapping.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Explicit,
    Prefetch,
    Optimistic,
    Transparent,
    /// Transparent, faults served by handler threads (one per workload thread).
    TransparentThreads,
    /// Transparent, setting eviction candidates aside (access tracking).
    TransparentTracked,
}

pub struct Ucache {
    cache: Cache,
    map: Mapping,
    mode: Mode,
}

impl Ucache {
    pub fn open(p: &Params, mode: Mode) -> Result<Self, String> {
        let transparent = matches!(
            mode,
            Mode::Transparent | Mode::TransparentThreads | Mode::TransparentTracked
        );
        let handling = if mode == Mode::TransparentThreads {
            FaultHandling::HandlerThreads(p.threads)
        } else {
            FaultHandling::OnFaultingThread
        };
        // Profiling costs a few clock reads per miss (well under 1% of one) and gives the
        // fault breakdown of the report.
        let cache = Cache::new(CacheOptions::new(p.memory_bytes).profile_faults(transparent))
            .map_err(|e| format!("Cache::new: {e}"))?;
        let store: Arc<dyn Store> = match &p.store {
            StoreKind::File => Arc::new(FileStore::direct()),
            StoreKind::Uring => Arc::new(
                UringStore::new(UringOptions::default())
                    .map_err(|e| format!("UringStore::new: {e}"))?,
            ),
            // Enough GETs in flight for every thread's whole batch at once.
            StoreKind::S3(url) => Arc::new(
                ucache_object::S3Store::new(
                    s3_config(url, p.endpoint.as_deref())?
                        .max_in_flight(p.prefetch_depth * p.threads),
                )
                .map_err(|e| format!("S3Store::new: {e}"))?,
            ),
        };
        let path = match &p.store {
            StoreKind::S3(url) => url.as_str(),
            _ => p.path.to_str().ok_or("data file path is not UTF-8")?,
        };
        let map = cache
            .map(
                store,
                path,
                MapOptions::new()
                    .buffer_size(p.buffer_size)
                    .transparent(transparent)
                    .track_access(mode == Mode::TransparentTracked)
                    .fault_handling(handling),
            )
            .map_err(|e| format!("Cache::map: {e}"))?;
        Ok(Ucache { cache, map, mode })
    }

    fn is_full(&self) -> bool {
        let slack = ucache::DEFAULT_BATCH as u64 * self.map.buffer_size() as u64;
        self.cache.used() + slack >= self.cache.budget().min(self.map.len())
    }

    fn explicit(&self, ctx: &mut ThreadCtx) -> Result<(), String> {
        while ctx.running() {
            let t = ctx.sample();
            let idx = ctx.next_index();
            let g = self
                .map
                .pin_shared(idx)
                .map_err(|e| format!("pin_shared({idx}): {e}"))?;
            ctx.touch(&g[..], idx);
            drop(g);
            ctx.done(1, t);
        }
        Ok(())
    }

    fn optimistic(&self, ctx: &mut ThreadCtx) -> Result<(), String> {
        if !ctx.params().workload.is_random() {
            return self.explicit(ctx);
        }
        while ctx.running() {
            let t = ctx.sample();
            let idx = ctx.next_index();
            let at = ctx.pick_word();
            let v = self
                .map
                .read_optimistic(idx, |view| view.read_u64(at))
                .map_err(|e| format!("read_optimistic({idx}): {e}"))?;
            ctx.check_word(idx, at, v);
            ctx.done(1, t);
        }
        Ok(())
    }

    fn transparent(&self, ctx: &mut ThreadCtx) -> Result<(), String> {
        let bs = self.map.buffer_size();
        let base = self.map.as_ptr();
        while ctx.running() {
            let t = ctx.sample();
            let idx = ctx.next_index();
            let off = idx as usize * bs;
            assert!(off as u64 + bs as u64 <= self.map.len());
            // SAFETY: in bounds of a live read-only transparent mapping: plain loads are what
            // it is for (a miss faults into ucache and the load runs again).
            let buf = unsafe { std::slice::from_raw_parts(base.add(off), bs) };
            ctx.touch(buf, idx);
            ctx.done(1, t);
        }
        Ok(())
    }

    fn prefetch(&self, ctx: &mut ThreadCtx) -> Result<(), String> {
        let mut indices = vec![0u64; ctx.params().prefetch_depth];
        while ctx.running() {
            let t = ctx.sample();
            ctx.next_indices(&mut indices);
            self.map
                .ensure_cached_buffers(&indices)
                .map_err(|e| format!("ensure_cached_buffers: {e}"))?;
            for &idx in &indices {
                let g = self
                    .map
                    .pin_shared(idx)
                    .map_err(|e| format!("pin_shared({idx}): {e}"))?;
                ctx.touch(&g[..], idx);
            }
            ctx.done(indices.len() as u64, t);
        }
        Ok(())
    }
}

impl System for Ucache {
    fn run_thread(&self, ctx: &mut ThreadCtx) -> Result<(), String> {
        match self.mode {
            Mode::Explicit => self.explicit(ctx),
            Mode::Prefetch => self.prefetch(ctx),
            Mode::Optimistic => self.optimistic(ctx),
            Mode::Transparent | Mode::TransparentThreads | Mode::TransparentTracked => {
                self.transparent(ctx)
            }
        }
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        let s = self.cache.stats();
        vec![
            ("hits", s.hits),
            ("misses", s.misses),
            ("evictions", s.evictions),
            ("faults", s.faults),
            ("fault_ns", s.fault_ns),
            ("fault_evict_ns", s.fault_evict_ns),
            ("fault_io_ns", s.fault_io_ns),
            ("fault_install_ns", s.fault_install_ns),
            ("set_aside", s.set_aside),
            ("restores", s.restores),
        ]
    }

    fn warm(&self) -> bool {
        self.is_full()
    }

    fn latency_unit(&self) -> &'static str {
        if self.mode == Mode::Prefetch {
            "batch of --prefetch-depth ops (ensure_cached_buffers + one pin each)"
        } else {
            "op"
        }
    }
}
