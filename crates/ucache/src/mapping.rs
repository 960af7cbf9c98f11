//! A mapping: a region of one object cut into fixed-size buffers. In place (the default),
//! buffer `i` lives at `base + i × buffer_size` of one contiguous virtual range; on a pool
//! mapping it lives in a frame of the cache's pool (`home.rs`, `crate::pool`).
//!
//! The buffer-manager protocol, on top of the state word of [`crate::state`], one file per
//! path through it:
//!
//! | operation | state word transitions | file |
//! |---|---|---|
//! | pin (hit) | `Cached` → pins+1 (shared) or X (exclusive) | `pin.rs` |
//! | pin (miss) | `Evicted` →[one winner] `Loading` →(read)→ `Cached`+pin; losers wait on the word | `pin.rs`, via `claim.rs` (the claim guard) and `home.rs` (where the bytes go) |
//! | async pin (feature `tokio`) | as a pin; the read and the waits are awaited, a dropped future undoes its claim | `pin_async.rs`, waits in `state/changed.rs` |
//! | unpin | pins−1, or X cleared (+dirty, version+1) | `guard.rs` |
//! | batched load, prefetch | as a miss, many buffers claimed before one store batch; sequential `read` calls prefetch their stream's next window | `batch.rs`, `stream.rs`, `read_stream.rs` |
//! | landing iterator | as a prefetch (claims read on the IO threads), then a pin per item | `landing.rs` |
//! | transparent fault | a miss without a pin; a first store sets dirty and lifts write protection | `fault.rs` |
//! | evict | `Cached` idle →(CAS) `Evicting` →(madvise batch)→ `Evicted` (version+1) | `evict.rs` |
//! | evict dirty | `Cached` dirty →(CAS) write-back (pin+1, WB) →(write batch)→ then as evict | `evict.rs` |
//! | writeback / msync | `Cached` dirty → WB+pin →(write)→ clean, or dirty again on failure | `writeback.rs` |
//! | set aside, restore | `Cached` → `Evicting` → `Aside` (copied to a pool slot) → `Loading` → `Cached` | `aside.rs` |
//! | readahead marker | read with its window: claimed, read, its bytes kept, claim undone (`Loading` → `Evicted`, version+1); its fault installs them as a miss without IO | `marker.rs` |
//!
//! A candidate that is pinned, locked, dirty-and-unwritable or touched between proposal and
//! claim simply fails its CAS: eviction is cancelled, never waited for.
//!
//! This file holds what every path shares: the mapping's fields, its construction and the
//! bounds checks. [`Mapping`] (`handle.rs`) is the public face over it.

use std::io;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::error::{Bounds, Error, Result};
use crate::fault::{FaultHandling, FaultHook};
use crate::fault_thread::FaultThreads;
use crate::policy::prefetch::{Prefetcher, ReadAhead, WithPrefetch};
use crate::policy::{Clock, Guarded, Layout};
use crate::region::Region;
use crate::shared::CacheCore;
use crate::sigbus::Registration;
use crate::staging::with_staging;
use crate::state::BufferState;
use crate::stopwatch::Stopwatch;
use crate::store::{Contained, Object, OpenOptions, Store};

mod aside;
mod batch;
mod claim;
mod evict;
mod fault;
mod handle;
mod home;
mod hooks;
mod io_jobs;
mod landing;
mod lists;
mod marker;
mod options;
mod pin;
#[cfg(feature = "tokio")]
mod pin_async;
mod read_stream;
mod scan;
mod scan_ring;
mod stream;
mod sync_ledger;
mod typed;
mod upgrade;
mod view;
mod write;
mod writeback;

use aside::AsidePool;
pub use handle::{Mapping, UnmapError};
use home::Home;
pub use hooks::BeforeWriteback;
pub use landing::Landing;
use marker::KeptMarkers;
pub use options::{MapOptions, Placement};
pub use upgrade::OptimisticRead;

const MIN_BUFFER: usize = 4096;
const MAX_BUFFER: usize = 1 << 30;
/// Direct IO needs 4 KiB alignment of offsets and lengths.
const IO_ALIGN: u64 = 4096;

pub(crate) struct MappingCore {
    id: u64,
    cache: Arc<CacheCore>,
    object: Arc<dyn Object>,
    offset: u64,
    len: u64,
    bs: usize,
    shift: u32,
    /// Where the SIGBUS handler finds a transparent mapping; set once it is in an `Arc`.
    /// Declared before `region`, so it is dropped first: the registry must stop naming this
    /// range before the range is unmapped, or a new mapping given the same addresses could
    /// meet this stale entry.
    registration: std::sync::OnceLock<Registration>,
    /// The handler threads of a transparent mapping in compatibility mode.
    fault_threads: std::sync::OnceLock<FaultThreads>,
    /// Where buffers' bytes live: the mapping's own region, or frames of the cache's pool.
    home: Home,
    states: Box<[BufferState]>,
    policy: Guarded,
    policy_hits: bool,
    /// Whether a demand miss asks for prefetches: the policy's, or else `readahead`'s.
    prefetching: bool,
    /// Whether the missing thread reads those prefetches itself ([`MapOptions::readahead_inline`]).
    readahead_inline: bool,
    /// The readahead of an explicit mapping whose policy does not prefetch
    /// ([`MapOptions::readahead`]).
    readahead: Option<ReadAhead>,
    /// Sequential [`Mapping::read`] calls' streams ([`MapOptions::readahead`]).
    read_streams: Option<read_stream::ReadStreams>,
    /// Whether those streams read scans past the cache ([`MapOptions::scan_bypass`]).
    scan_bypass: bool,
    /// Where a scan reads ahead past the cache, on a store that does not read ahead itself.
    scan_ring: Option<scan_ring::ScanRing>,
    writable: bool,
    /// Buffers resident, for the eviction round's shares and [`Mapping::resident`].
    resident: crate::gauge::ShardedGauge,
    /// [`MapOptions::weight`], for the global policy.
    weight: u32,
    unmapped: AtomicBool,
    fault_hook: Option<FaultHook>,
    fault_handling: FaultHandling,
    /// Slots and queue of set-aside buffers (transparent mappings that track access).
    aside: Option<AsidePool>,
    /// Readahead markers' bytes read with their windows (transparent mappings with readahead).
    kept: Option<KeptMarkers>,
    /// Write-backs and syncs: what a failed sync may have lost.
    sync_ledger: sync_ledger::SyncLedger,
    /// This mapping's share of the cache's statistics ([`Mapping::stats`]).
    own_stats: Arc<crate::stats::Stats>,
    /// When the mapping was last used, for the global policy's idleness test.
    activity: crate::reclaim::Activity,
    /// [`MapOptions::before_writeback`].
    before_writeback: Option<hooks::BeforeWriteback>,
}

/// `bs` if it is a buffer size a mapping can have: a power of two from 4 KiB to 1 GiB.
pub(crate) fn check_buffer_size(bs: usize) -> Result<usize> {
    if bs.is_power_of_two() && (MIN_BUFFER..=MAX_BUFFER).contains(&bs) {
        Ok(bs)
    } else {
        Err(Error::BadBufferSize(bs))
    }
}

/// What a mapping's length alone decides: not empty, no overflow past the end of the offset
/// range, within the address space, and a multiple of 4096 for a read-write mapping (whose
/// write-backs are whole pages).
fn check_len(len: u64, offset: u64, bs: usize, writable: bool) -> Result<()> {
    let bad = |why| Err(Error::BadLength { len, why });
    if len == 0 {
        return bad("a mapping cannot be empty");
    }
    if offset.checked_add(len).is_none() {
        return bad("overflows");
    }
    let fits = len
        .div_ceil(bs as u64)
        .checked_mul(bs as u64)
        .is_some_and(|b| usize::try_from(b).is_ok_and(|b| b <= isize::MAX as usize));
    if !fits {
        return bad("too large for the address space");
    }
    if writable && !len.is_multiple_of(IO_ALIGN) {
        return bad("a read-write mapping must be a multiple of 4096 bytes");
    }
    Ok(())
}

impl MappingCore {
    pub(crate) fn new(
        cache: Arc<CacheCore>,
        id: u64,
        store: Arc<dyn Store>,
        object: &str,
        o: MapOptions,
    ) -> Result<MappingCore> {
        let bs = check_buffer_size(o.buffer_size)?;
        // What the placement alone decides is checked before the store is asked, so a refused
        // mapping creates nothing.
        let pool = o.placement == Placement::Pool;
        if pool && o.transparent {
            return Err(Error::NotInPlace {
                what: "transparent access",
            });
        }
        let chunk = crate::pool::FramePool::chunk_for(bs) as u64;
        if pool && cache.budget.budget_bytes() < chunk {
            return Err(Error::BudgetTooSmall {
                budget: cache.budget.budget_bytes(),
                batch: chunk,
            });
        }
        if !o.offset.is_multiple_of(IO_ALIGN) {
            return Err(Error::BadArgument(format!(
                "mapping offset {} is not a multiple of {IO_ALIGN}",
                o.offset
            )));
        }
        if o.create && !o.writable {
            // Checked before the store is asked, so nothing is created for a refused mapping.
            return Err(Error::BadArgument(
                "`create` needs `writable`: a mapping that creates its object must be writable"
                    .into(),
            ));
        }
        if o.weight == 0 {
            return Err(Error::BadArgument(
                "a mapping's weight must be at least 1".into(),
            ));
        }
        let writable = o.writable;
        view::check_options(&o, bs)?;
        if let Some(len) = o.len {
            // What the length alone decides is checked before the store is asked, so a
            // refused mapping creates nothing.
            check_len(len, o.offset, bs, writable)?;
        }
        // Without a length, a new object would be empty, so none is created: the mapping is
        // refused (below) as for any empty object.
        let options = OpenOptions {
            write: writable,
            create: o.create && o.len.is_some(),
        };
        let opened =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| store.open(object, options)));
        let obj: Arc<dyn Object> = match opened {
            // Only without a length: with one, `create` was asked of the store, and its
            // `NotFound` (a missing directory, say) is the store's to tell.
            Ok(Err(Error::NotFound { .. })) if o.create && o.len.is_none() => {
                return Err(Error::BadLength {
                    len: 0,
                    why: "a new object is empty: give the length to map",
                })
            }
            Ok(r) => Arc::new(Contained(r?)),
            Err(_) => {
                return Err(Error::io(
                    "open",
                    object,
                    0,
                    io::Error::other("store panicked"),
                ))
            }
        };
        let obj_len = obj.len().map_err(|e| Error::io("stat", object, 0, e))?;
        let len = match o.len {
            Some(l) => l,
            None if obj_len > o.offset => obj_len - o.offset,
            None => {
                return Err(Error::BadLength {
                    len: 0,
                    why: "object is empty at that offset: give the length to map",
                })
            }
        };
        check_len(len, o.offset, bs, writable)?;
        let end = o.offset + len;
        if !writable && end > obj_len {
            return Err(Error::BeyondObject {
                object: object.to_string(),
                offset: o.offset,
                len,
                object_len: obj_len,
            });
        }
        let too_large = Error::BadLength {
            len,
            why: "too large for the address space",
        };
        let nbuf = len.div_ceil(bs as u64);
        let bytes = (nbuf * bs as u64) as usize;
        let home = if pool {
            Home::pool(cache.budget.pool_for(bs)?, nbuf)?
        } else if o.transparent {
            if !cfg!(target_arch = "x86_64") {
                return Err(Error::BadArgument(
                    "transparent mappings need x86-64 (the write bit of the fault)".into(),
                ));
            }
            let sigbus = o.fault_handling == FaultHandling::OnFaultingThread;
            match o.file_view {
                true => Home::InPlace(view::reserve(&*obj, object, o.offset, bytes, bs)?),
                false => {
                    Home::InPlace(Region::reserve_transparent(bytes, bs.min(2 << 20), sigbus)?)
                }
            }
        } else {
            Home::InPlace(Region::reserve(bytes, bs.min(2 << 20))?)
        };
        let Some(states) = crate::region::huge_table(nbuf as usize, BufferState::new) else {
            return Err(too_large);
        };
        let layout = Layout {
            buffers: nbuf,
            capacity: (cache.budget.budget_bytes() / bs as u64).max(1),
            buffer_size: bs,
        };
        let policy = Guarded::new(
            o.policy.unwrap_or_else(|| {
                if o.transparent && o.readahead {
                    Box::new(WithPrefetch::new(
                        Clock::new(),
                        ReadAhead::transparent_default(bs),
                    ))
                } else {
                    Box::new(Clock::new())
                }
            }),
            layout,
        );
        // Explicit mappings read ahead for pins whatever their policy, unless it prefetches
        // itself: then its proposals replace the readahead, so nothing is fetched twice.
        let readahead = (o.readahead && !o.transparent && !policy.has_prefetching()).then(|| {
            let mut ra = ReadAhead::transparent_default(bs);
            ra.attach(layout);
            ra
        });
        let budget_buffers = cache.budget.budget_bytes() / bs as u64;
        // A view's hits never fault, so a set-aside pool would never see one; and its loads read
        // nothing into ucache's memory, so there are no marker bytes to keep.
        let slots = if o.transparent && o.track_access && !o.file_view {
            let want = AsidePool::slots_for(budget_buffers, nbuf, cache.budget.batch_buffers(bs));
            cache.budget.claim_aside(want, bs)
        } else {
            0
        };
        let aside = if slots > 0 {
            let pool = AsidePool::new(slots, bs, nbuf)
                .and_then(|pool| cache.budget.reserve(pool.bytes()).map(|()| pool));
            if pool.is_err() {
                cache.budget.release_aside(slots * bs as u64);
            }
            Some(pool?)
        } else {
            None
        };
        let kept = if o.transparent && policy.has_prefetching() && !o.file_view {
            KeptMarkers::new(&cache.budget, nbuf, bs)
        } else {
            None
        };
        if writable && end > obj_len {
            // Last, so a mapping refused above leaves the object as it was.
            if let Err(e) = obj.set_len(end) {
                if let Some(pool) = &aside {
                    cache.budget.release(pool.bytes());
                    cache.budget.release_aside(pool.bytes());
                }
                if let Some(k) = &kept {
                    k.give_back(&cache.budget);
                }
                return Err(Error::io("grow", object, end, e));
            }
        }
        let own_stats = cache.stats_registry.register();
        Ok(MappingCore {
            id,
            policy_hits: policy.wants_hits(),
            prefetching: policy.has_prefetching() || readahead.is_some(),
            readahead_inline: o.readahead_inline,
            readahead,
            read_streams: o.readahead.then(read_stream::ReadStreams::new),
            scan_bypass: o.scan_bypass,
            scan_ring: (o.readahead && o.scan_bypass && !obj.reads_ahead())
                .then(scan_ring::ScanRing::new),
            policy,
            cache,
            object: obj,
            offset: o.offset,
            len,
            bs,
            shift: bs.trailing_zeros(),
            home,
            states,
            writable,
            resident: crate::gauge::ShardedGauge::new(),
            weight: o.weight,
            unmapped: AtomicBool::new(false),
            fault_hook: o.fault_hook,
            fault_handling: o.fault_handling,
            registration: std::sync::OnceLock::new(),
            fault_threads: std::sync::OnceLock::new(),
            aside,
            kept,
            sync_ledger: Default::default(),
            own_stats,
            activity: Default::default(),
            before_writeback: o.before_writeback,
        })
    }

    /// Connects a transparent mapping to whoever serves its faults: the SIGBUS handler, or
    /// its own handler threads.
    pub(crate) fn register_faults(self: &Arc<Self>) -> Result<()> {
        let base = self.base() as usize;
        let len = self.home.region().map_or(0, Region::len);
        if self.is_view() {
            let r = crate::sigbus::register(Arc::downgrade(self) as _, base, len, libc::SIGSEGV)?;
            let _ = self.registration.set(r);
            return Ok(());
        }
        let Some(u) = self.home.uffd() else {
            return Ok(());
        };
        match self.fault_handling {
            FaultHandling::OnFaultingThread => {
                let r =
                    crate::sigbus::register(Arc::downgrade(self) as _, base, len, libc::SIGBUS)?;
                let _ = self.registration.set(r);
            }
            FaultHandling::HandlerThreads(n) => {
                let t = crate::fault_thread::spawn(Arc::downgrade(self) as _, u.clone(), base, n)
                    .map_err(|source| Error::Os {
                    call: "spawn ucache-fault thread",
                    source,
                })?;
                let _ = self.fault_threads.set(t);
            }
        }
        Ok(())
    }

    /// This mapping's address: who it is in [`crate::held`]'s records.
    pub(crate) fn addr(&self) -> usize {
        self as *const MappingCore as usize
    }
    pub(crate) fn id(&self) -> u64 {
        self.id
    }
    /// The base address of an in-place mapping; null for a pool mapping.
    pub(crate) fn base(&self) -> *mut u8 {
        self.home.base()
    }
    /// Whether buffers live in frames of the cache's pool ([`Placement::Pool`]).
    pub(crate) fn is_pool(&self) -> bool {
        self.home.is_pool()
    }
    pub(crate) fn len(&self) -> u64 {
        self.len
    }
    pub(crate) fn buffer_size(&self) -> usize {
        self.bs
    }
    pub(crate) fn weight(&self) -> u32 {
        self.weight
    }
    /// Budget held besides the buffers: the set-aside pool and the kept markers' slots.
    pub(crate) fn reserved_bytes(&self) -> u64 {
        self.aside.as_ref().map_or(0, |a| a.bytes()) + self.kept.as_ref().map_or(0, |k| k.bytes())
    }

    pub(crate) fn resident(&self) -> u64 {
        self.resident.get()
    }
    pub(crate) fn is_transparent(&self) -> bool {
        self.home.is_transparent()
    }
    fn buffers(&self) -> u64 {
        self.states.len() as u64
    }
    #[inline]
    fn state(&self, i: u64) -> &BufferState {
        &self.states[i as usize]
    }
    /// Bytes of buffer `i` that belong to the mapping (the last buffer may be partial).
    #[inline]
    fn valid(&self, i: u64) -> usize {
        (self.len - (i << self.shift)).min(self.bs as u64) as usize
    }
    #[inline]
    fn object_offset(&self, i: u64) -> u64 {
        self.offset + (i << self.shift)
    }
    /// Where this mapping's events are counted: its own counters, which the cache's statistics
    /// sum ([`crate::stats::Registry`]).
    #[inline]
    fn stats(&self) -> &crate::stats::Stats {
        &self.own_stats
    }
    /// Counts `n` accesses (hits, misses, waits) and notes that the mapping is in use, so the
    /// global policy does not take it for idle ([`crate::reclaim::Activity`]).
    #[inline]
    fn count_access(&self, c: crate::stats::Counter, n: u64) {
        self.activity.touch();
        self.stats().add(c, n);
    }
    /// Counts one read request handed to the store, `outstanding` being how many other
    /// requests of the same batch or stream it was handed over with, unfinished.
    #[inline]
    fn count_store_read(&self, outstanding: usize) {
        self.stats().add(crate::stats::Counter::StoreReads, 1);
        if outstanding > 0 {
            self.stats()
                .add(crate::stats::Counter::StoreReadsOverlapped, 1);
        }
    }
    /// A stopwatch for one fault's phases: running if fault profiling is on and this fault
    /// is drawn for the sample.
    #[inline]
    fn stopwatch(&self) -> Stopwatch {
        Stopwatch::new(
            self.cache.profile && self.home.is_transparent() && crate::stopwatch::sampled(),
        )
    }

    /// The state word of buffer `i`, or the error for an index past the end: the one bounds
    /// check of the access paths.
    #[inline]
    fn slot(&self, i: u64) -> Result<&BufferState> {
        if self.forked_away() {
            return Err(Error::Forked);
        }
        match self.states.get(i as usize) {
            Some(s) => Ok(s),
            None => Err(self.out_of_range(i)),
        }
    }

    /// Whether this process is a fork of the one that made the mapping ([`crate::fork`]).
    #[inline]
    pub(crate) fn forked_away(&self) -> bool {
        crate::fork::is_foreign(self.cache.pid())
    }

    #[cold]
    fn out_of_range(&self, i: u64) -> Error {
        Error::OutOfRange(Bounds::Buffer {
            index: i,
            buffers: self.buffers(),
        })
    }

    /// The error for a wait on buffer `i` that this very thread would have to end, if it
    /// would be one: the check before every wait of a caller that may hold buffers.
    #[cold]
    fn self_wait(&self, i: u64) -> Result<()> {
        match crate::held::held(self.addr(), i) {
            Some(h) => Err(Error::WouldDeadlock {
                index: i,
                why: h.why(),
            }),
            None if crate::held::in_hook() => Err(Error::WouldDeadlock {
                index: i,
                why: "in transition, and the call came from a policy hook, which must not wait",
            }),
            None => Ok(()),
        }
    }

    fn check_index(&self, i: u64) -> Result<()> {
        self.slot(i).map(|_| ())
    }

    /// Whether `unmap` has begun: range calls and prefetches are refused from then on.
    fn is_unmapping(&self) -> bool {
        self.unmapped.load(Ordering::Relaxed)
    }

    /// The buffers overlapping `[offset, offset+len)`.
    fn range(&self, offset: u64, len: u64) -> Result<Range<u64>> {
        if self.is_unmapping() {
            return Err(Error::Unmapped);
        }
        if self.forked_away() {
            return Err(Error::Forked);
        }
        match offset.checked_add(len) {
            Some(end) if end <= self.len => {
                if len == 0 {
                    return Ok(0..0);
                }
                Ok(offset >> self.shift..((end - 1) >> self.shift) + 1)
            }
            _ => Err(Error::OutOfRange(Bounds::Range {
                offset,
                len,
                mapping_len: self.len,
            })),
        }
    }
}

impl Drop for MappingCore {
    /// Returns the budget of buffers still resident when a mapping goes away without a full
    /// release (its write-back failed): the cache must not count memory that no longer exists.
    fn drop(&mut self) {
        // Set-aside buffers are resident, but their budget is the pool's.
        let carried = self.aside.as_ref().map_or(0, |p| p.carried());
        let left = self.resident.get().saturating_sub(carried);
        self.give_back_resident(left);
        if let Some(pool) = &self.aside {
            pool.give_back(&self.cache.budget);
        }
        self.give_back_kept();
    }
}

/// Zeroes what a short read (the end of the object) left of a staging buffer, as a fresh page
/// of a plain region would read; returns `n`.
fn zero_tail(buf: &mut [u8], n: usize) -> usize {
    if n < buf.len() {
        buf[n..].fill(0);
    }
    n
}

/// Takes result `k` out of a batch's results; a store that returned too few is an error for
/// the missing requests rather than a panic.
fn take_result<T>(out: &mut [io::Result<T>], k: usize) -> io::Result<T> {
    match out.get_mut(k) {
        Some(slot) => std::mem::replace(slot, Err(io::Error::other("result taken"))),
        None => Err(io::Error::other("store returned too few batch results")),
    }
}
