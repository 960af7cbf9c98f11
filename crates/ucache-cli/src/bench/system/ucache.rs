//! ucache itself, driven four ways:
//! - explicit: one `pin_shared` per op, so a miss is one synchronous load, comparable with
//!   raw-psync at the same thread count;
//! - prefetch: one `pin_each` stream with `--prefetch-depth` (32) loads in flight per thread,
//!   each replaced as it completes, comparable with raw-uring's queue (and with raw-get over
//!   S3);
//! - optimistic: `read_optimistic`, no pin at all on a hit;
//! - pool, pool-prefetch: explicit and prefetch over a pool mapping (`Placement::Pool`),
//!   whose misses read into reused frames of the cache's pool;
//! - transparent: plain loads from a transparent mapping, exactly the mmap system's loop, so
//!   the two differ only in who serves the faults.
//!
//! The live workloads (cache_ext's, issue #4) run explicit only: each op pins; an update pins
//! exclusive and rewrites a word; `tenants` maps the file's two halves as two mappings of one
//! cache, each with its own policy and weight.

use std::sync::Arc;

use ucache::policy::{policy_by_name, Policy};
use ucache::store::{FileStore, Store, UringOptions, UringStore};
use ucache::{Cache, CacheOptions, FaultHandling, MapOptions, Mapping, Placement};

use super::{s3_config, split_policy_spec, Params, StoreKind, System};
use crate::bench::worker::ThreadCtx;
use crate::bench::workload::{tenant_split, Workload};

/// How the workload drives the mapping.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Explicit,
    Prefetch,
    /// Explicit, over a pool mapping.
    Pool,
    /// Prefetch, over a pool mapping.
    PoolPrefetch,
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
    /// `tenants`: the file's second half, and the first buffer index of the file it holds
    /// (`map` then holds the first half).
    tenant_b: Option<(Mapping, u64)>,
    mode: Mode,
}

fn named_policy(name: &str) -> Result<Box<dyn Policy>, String> {
    policy_by_name(name).ok_or_else(|| format!("unknown policy '{name}'"))
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
        // Profiling gives the fault breakdown of the report for nine clock reads per timed
        // miss, one miss in 16 (see crate ucache's stopwatch.rs).
        let mut options = CacheOptions::new(p.memory_bytes).profile_faults(transparent);
        if let Some(b) = p.eviction_batch {
            options = options.batch(b);
        }
        options = options
            .background_eviction(p.background_eviction)
            .pool_huge_pages(p.pool_huge_pages);
        let cache = Cache::new(options).map_err(|e| format!("Cache::new: {e}"))?;
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
        let (policy_a, policy_b) = match &p.policy {
            Some(spec) => {
                let (a, b) = split_policy_spec(spec);
                (Some(named_policy(a)?), Some(named_policy(b)?))
            }
            None => (None, None),
        };
        let options = |policy: Option<Box<dyn Policy>>| {
            let placement = if matches!(mode, Mode::Pool | Mode::PoolPrefetch) {
                Placement::Pool
            } else {
                Placement::InPlace
            };
            let o = MapOptions::new()
                .placement(placement)
                .buffer_size(p.buffer_size)
                .transparent(transparent)
                .track_access(mode == Mode::TransparentTracked)
                .fault_handling(handling)
                .writable(p.workload.update_fraction() > 0.0);
            match policy {
                Some(policy) => o.policy(policy),
                None => o,
            }
        };
        if p.workload == Workload::Tenants {
            let split = tenant_split(p.buffers());
            let bs = p.buffer_size as u64;
            let a = options(policy_a)
                .len(split * bs)
                .weight(p.tenant_weights[0]);
            let b = options(policy_b)
                .offset(split * bs)
                .len(p.data_bytes - split * bs)
                .weight(p.tenant_weights[1]);
            let map = cache
                .map(store.clone(), path, a)
                .map_err(|e| format!("Cache::map (tenant A): {e}"))?;
            let map_b = cache
                .map(store, path, b)
                .map_err(|e| format!("Cache::map (tenant B): {e}"))?;
            return Ok(Ucache {
                cache,
                map,
                tenant_b: Some((map_b, split)),
                mode,
            });
        }
        let map = cache
            .map(store, path, options(policy_a))
            .map_err(|e| format!("Cache::map: {e}"))?;
        Ok(Ucache {
            cache,
            map,
            tenant_b: None,
            mode,
        })
    }

    fn is_full(&self) -> bool {
        let bs = self.map.buffer_size();
        let slack = self
            .cache
            .batch_buffers(bs)
            .expect("a mapping's buffer size is valid") as u64
            * bs as u64;
        let mapped = self.map.len() + self.tenant_b.as_ref().map_or(0, |(m, _)| m.len());
        // Resident buffers, not the budget in use: a pool mapping's budget is charged in
        // whole chunks, ahead of the buffers that will fill them.
        let held = (self.map.resident() + self.tenant_b.as_ref().map_or(0, |(m, _)| m.resident()))
            * bs as u64;
        held + slack >= self.cache.budget().min(mapped)
    }

    /// The mapping holding file buffer `idx`, and the buffer's index in it.
    #[inline]
    fn locate(&self, idx: u64) -> (&Mapping, u64) {
        match &self.tenant_b {
            Some((b, split)) if idx >= *split => (b, idx - split),
            _ => (&self.map, idx),
        }
    }

    fn explicit(&self, ctx: &mut ThreadCtx) -> Result<(), String> {
        // The whole run under the thread's hint: a scan thread's every load is a scan's.
        ctx.role().hint().scoped(|| -> Result<(), String> {
            while ctx.running() {
                let t = ctx.sample();
                let idx = ctx.next_index();
                let (map, local) = self.locate(idx);
                if ctx.next_is_update() {
                    let mut g = map
                        .pin_exclusive(local)
                        .map_err(|e| format!("pin_exclusive({idx}): {e}"))?;
                    ctx.update(&mut g[..], idx);
                } else {
                    let g = map
                        .pin_shared(local)
                        .map_err(|e| format!("pin_shared({idx}): {e}"))?;
                    ctx.touch(&g[..], idx);
                }
                ctx.done(1, t);
            }
            Ok(())
        })
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

    /// One endless `pin_each` stream over the workload's indices: `--prefetch-depth` reads in
    /// flight from each thread, each replaced as soon as it completes, as raw-uring keeps its
    /// queue. A latency sample covers `--prefetch-depth` visits.
    fn prefetch(&self, ctx: &mut ThreadCtx) -> Result<(), String> {
        let depth = ctx.params().prefetch_depth;
        let ctx = std::cell::RefCell::new(ctx);
        let mut seen = 0usize;
        let mut t = ctx.borrow_mut().sample();
        let indices = std::iter::from_fn(|| {
            let mut c = ctx.borrow_mut();
            c.running().then(|| c.next_index())
        });
        let r = self.map.pin_each(indices, depth, |idx, bytes| {
            let mut c = ctx.borrow_mut();
            c.touch(bytes, idx);
            seen += 1;
            if seen == depth {
                c.done(depth as u64, t);
                t = c.sample();
                seen = 0;
            }
        });
        ctx.borrow_mut().done(seen as u64, None);
        r.map_err(|e| format!("pin_each: {e}"))
    }
}

impl System for Ucache {
    fn run_thread(&self, ctx: &mut ThreadCtx) -> Result<(), String> {
        match self.mode {
            Mode::Explicit | Mode::Pool => self.explicit(ctx),
            Mode::Prefetch | Mode::PoolPrefetch => self.prefetch(ctx),
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
            ("faults_timed", s.faults_timed),
            ("fault_ns", s.fault_ns),
            ("fault_evict_ns", s.fault_evict_ns),
            ("fault_io_ns", s.fault_io_ns),
            ("fault_install_ns", s.fault_install_ns),
            ("fault_bookkeeping_ns", s.fault_bookkeeping_ns),
            ("set_aside", s.set_aside),
            ("restores", s.restores),
            ("installs", s.installs),
            ("marker_hits", s.marker_hits),
            ("installed_bytes", s.installed_bytes),
            ("store_reads", s.store_reads),
            ("store_reads_overlapped", s.store_reads_overlapped),
        ]
    }

    fn warm(&self) -> bool {
        self.is_full()
    }

    fn latency_unit(&self) -> &'static str {
        if matches!(self.mode, Mode::Prefetch | Mode::PoolPrefetch) {
            "--prefetch-depth visits of a pin_each stream"
        } else {
            "op"
        }
    }
}
