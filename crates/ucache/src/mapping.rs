//! A mapping: one contiguous virtual range over a region of one object, cut into fixed-size
//! buffers; buffer `i` lives at `base + i × buffer_size`.
//!
//! The whole buffer-manager protocol is in this file, on top of the state word of
//! [`crate::state`]:
//!
//! | operation | state word transitions |
//! |---|---|
//! | pin (hit) | `Cached` → pins+1 (shared) or X (exclusive) |
//! | pin (miss) | `Evicted` →[one winner] `Loading` →(read)→ `Cached`+pin; losers wait on the word |
//! | unpin | pins−1, or X cleared (+dirty, version+1) |
//! | evict | `Cached` idle →(CAS) `Evicting` →(madvise batch)→ `Evicted` (version+1) |
//! | evict dirty | `Cached` dirty →(CAS) write-back (pin+1, WB) →(write batch)→ then as evict |
//! | writeback / msync | `Cached` dirty → WB+pin →(write)→ clean, or dirty again on failure |
//!
//! A candidate that is pinned, locked, dirty-and-unwritable or touched between proposal and
//! claim simply fails its CAS: eviction is cancelled, never waited for.

use std::io;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use crate::cache::CacheCore;
use crate::error::{Error, Result};
use crate::fault::{FaultAction, FaultHandling, FaultHook};
use crate::fault_thread::FaultThreads;
use crate::guard::{ExclusiveGuard, OptimisticView, SharedGuard};
use crate::io_worker::Job;
use crate::policy::prefetch::{ReadAhead, WithPrefetch};
use crate::policy::{Buffers, Clock, Guarded, Layout, Policy};
use crate::region::Region;
use crate::sigbus::Registration;
use crate::staging::with_staging;
use crate::state::{BufferState, Phase, Pin, Word};
use crate::stats::Counter;
use crate::stopwatch::Stopwatch;
use crate::store::{IoBuf, Object, OpenOptions, Store};

mod aside;
mod stream;
use aside::AsidePool;

const MIN_BUFFER: usize = 4096;
const MAX_BUFFER: usize = 1 << 30;
/// Direct IO needs 4 KiB alignment of offsets and lengths.
const IO_ALIGN: u64 = 4096;

/// How to map an object.
pub struct MapOptions {
    buffer_size: usize,
    offset: u64,
    len: Option<u64>,
    writable: bool,
    create: bool,
    policy: Option<Box<dyn Policy>>,
    transparent: bool,
    fault_handling: FaultHandling,
    fault_hook: Option<FaultHook>,
    track_access: bool,
    readahead: bool,
    weight: u32,
}

impl Default for MapOptions {
    fn default() -> Self {
        MapOptions {
            buffer_size: MIN_BUFFER,
            offset: 0,
            len: None,
            writable: false,
            create: false,
            policy: None,
            transparent: false,
            fault_handling: FaultHandling::default(),
            fault_hook: None,
            track_access: false,
            readahead: true,
            weight: 1,
        }
    }
}

impl MapOptions {
    /// Read-only, 4 KiB buffers, the whole object, CLOCK.
    pub fn new() -> Self {
        Self::default()
    }
    /// Bytes per buffer: a power of two from 4 KiB to 1 GiB (2 MiB and larger use
    /// transparent huge pages where the kernel grants them).
    pub fn buffer_size(mut self, bytes: usize) -> Self {
        self.buffer_size = bytes;
        self
    }
    /// Where in the object the mapping starts (a multiple of 4096).
    pub fn offset(mut self, offset: u64) -> Self {
        self.offset = offset;
        self
    }
    /// Bytes to map; default: from `offset` to the end of the object. A read-write mapping
    /// larger than its object grows the object.
    pub fn len(mut self, len: u64) -> Self {
        self.len = Some(len);
        self
    }
    /// Allow exclusive pins, dirty buffers and write-back.
    pub fn writable(mut self, writable: bool) -> Self {
        self.writable = writable;
        self
    }
    /// Create the object if it does not exist (implies writable).
    pub fn create(mut self, create: bool) -> Self {
        self.create = create;
        self.writable |= create;
        self
    }
    /// The eviction and prefetch policy of this mapping (default [`Clock`]).
    pub fn policy(mut self, policy: Box<dyn Policy>) -> Self {
        self.policy = Some(policy);
        self
    }

    /// Let plain loads and stores use the mapping, like `mmap`: misses and first writes fault
    /// into ucache (userfaultfd, served on the faulting thread). Pins and the explicit
    /// primitives keep working. Linux on x86-64 only.
    pub fn transparent(mut self, transparent: bool) -> Self {
        self.transparent = transparent;
        self
    }
    /// Who serves a transparent mapping's faults (default: the faulting thread itself).
    pub fn fault_handling(mut self, handling: FaultHandling) -> Self {
        self.fault_handling = handling;
        self
    }
    /// Transparent mappings only: give eviction candidates a second chance by setting them
    /// aside first (off by default). Plain loads never tell ucache which buffers are in use,
    /// so without it CLOCK-like policies see no accesses at all; with it, a buffer the policy
    /// picks is copied into a small pool and dropped from the mapping, and a touch brings it
    /// back without IO and counts as an access (sets the referenced bit, calls `on_hit`).
    /// Worth it where a hot set must survive a stream of cold misses (scans next to lookups);
    /// it costs about a sixteenth of the budget for the pool, a buffer copy per eviction and a
    /// soft fault per touch of a set-aside buffer. On zram it cut the Zipf(0.99) miss ratio
    /// from 23.1% to 20.8% yet ran 9% slower, and 5% slower on uniform lookups (README).
    pub fn track_access(mut self, on: bool) -> Self {
        self.track_access = on;
        self
    }
    /// Transparent mappings with the default policy only: sequential readahead (on by
    /// default), as mmap has. Code that scans with plain loads cannot ask for a prefetch, so
    /// the mapping detects sequential misses itself (Linux's on-demand readahead with its
    /// asynchronous marker: a window of 16 KiB that doubles up to 1 MiB while the scan
    /// continues, each fetched while the reader is still in the previous one; see
    /// [`ReadAhead::transparent_default`]) and loads it in the background, one read and one
    /// page install per 128 KiB run. Random access never triggers it. A mapping given its own
    /// policy gets readahead by wrapping it: `WithPrefetch::new(policy, ReadAhead::default())`.
    pub fn readahead(mut self, on: bool) -> Self {
        self.readahead = on;
        self
    }
    /// What a transparent mapping does when a fault cannot be served (an IO error, a write to
    /// a read-only mapping); default: `SIGBUS`, as mmap. See [`FaultHook`].
    pub fn on_fault_error(mut self, hook: FaultHook) -> Self {
        self.fault_hook = Some(hook);
        self
    }

    /// This mapping's claim on the shared budget relative to the cache's other mappings
    /// (default 1; 0 is refused by [`crate::Cache::map`]). The default global policy evicts
    /// first from the mapping most over its weighted share, so a tenant that streams through
    /// new buffers (a scan) cannot push out one whose working set is reused: with weights 3
    /// and 1 the first keeps three quarters of the memory the two hold, however fast the
    /// second loads.
    pub fn weight(mut self, weight: u32) -> Self {
        self.weight = weight;
        self
    }

    pub(crate) fn buffer_size_or_default(&self) -> usize {
        self.buffer_size
    }
}

pub(crate) struct MappingCore {
    id: u64,
    cache: Arc<CacheCore>,
    object: Arc<dyn Object>,
    offset: u64,
    len: u64,
    bs: usize,
    shift: u32,
    region: Region,
    states: Box<[BufferState]>,
    policy: Guarded,
    policy_hits: bool,
    prefetching: bool,
    writable: bool,
    resident: AtomicU64,
    /// [`MapOptions::weight`], for the global policy.
    weight: u32,
    unmapped: AtomicBool,
    fault_hook: Option<FaultHook>,
    fault_handling: FaultHandling,
    /// Where the SIGBUS handler finds a transparent mapping; set once it is in an `Arc`.
    registration: std::sync::OnceLock<Registration>,
    /// The handler threads of a transparent mapping in compatibility mode.
    fault_threads: std::sync::OnceLock<FaultThreads>,
    /// Slots and queue of set-aside buffers (transparent mappings that track access).
    aside: Option<AsidePool>,
}

/// Bytes of buffers per IO job of a prefetch: a readahead window of 1 MiB goes to the IO
/// threads as eight jobs, so they start on its first run before its last one is claimed.
const PREFETCH_JOB_BYTES: usize = 128 << 10;

/// What [`MappingCore::claim_loads`] got.
struct Claims {
    /// Buffers now `Loading` and ours, their budget reserved.
    claimed: Vec<u64>,
    /// Buffers another thread is loading or evicting.
    others: Vec<u64>,
    /// A prefetch stopped short: memory could not be had without waiting.
    stopped: bool,
}

/// `bs` if it is a buffer size a mapping can have: a power of two from 4 KiB to 1 GiB.
pub(crate) fn check_buffer_size(bs: usize) -> Result<usize> {
    if bs.is_power_of_two() && (MIN_BUFFER..=MAX_BUFFER).contains(&bs) {
        Ok(bs)
    } else {
        Err(Error::BadBufferSize(bs))
    }
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
        if !o.offset.is_multiple_of(IO_ALIGN) {
            return Err(Error::BadArgument(format!(
                "mapping offset {} is not a multiple of {IO_ALIGN}",
                o.offset
            )));
        }
        if o.weight == 0 {
            return Err(Error::BadArgument(
                "a mapping's weight must be at least 1".into(),
            ));
        }
        if o.len == Some(0) {
            return Err(Error::BadLength {
                len: 0,
                why: "a mapping cannot be empty",
            });
        }
        let obj = store.open(
            object,
            OpenOptions {
                write: o.writable,
                create: o.create,
            },
        )?;
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
        let end = o.offset.checked_add(len).ok_or(Error::BadLength {
            len,
            why: "overflows",
        })?;
        if o.writable {
            if len % IO_ALIGN != 0 {
                return Err(Error::BadLength {
                    len,
                    why: "a read-write mapping must be a multiple of 4096 bytes",
                });
            }
            if end > obj_len {
                obj.set_len(end)
                    .map_err(|e| Error::io("grow", object, end, e))?;
            }
        } else if end > obj_len {
            return Err(Error::BeyondObject {
                object: object.to_string(),
                offset: o.offset,
                len,
                object_len: obj_len,
            });
        }
        let nbuf = len.div_ceil(bs as u64);
        let bytes = usize::try_from(nbuf * bs as u64).map_err(|_| Error::BadLength {
            len,
            why: "too large for the address space",
        })?;
        let region = if o.transparent {
            if !cfg!(target_arch = "x86_64") {
                return Err(Error::BadArgument(
                    "transparent mappings need x86-64 (the write bit of the fault)".into(),
                ));
            }
            let sigbus = o.fault_handling == FaultHandling::OnFaultingThread;
            Region::reserve_transparent(bytes, bs.min(2 << 20), sigbus)?
        } else {
            Region::reserve(bytes, bs.min(2 << 20))?
        };
        let states = (0..nbuf)
            .map(|_| BufferState::new())
            .collect::<Vec<_>>()
            .into_boxed_slice();
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
            Layout {
                buffers: nbuf,
                capacity: (cache.budget_bytes() / bs as u64).max(1),
                buffer_size: bs,
            },
        );
        let budget_buffers = cache.budget_bytes() / bs as u64;
        let slots = AsidePool::slots_for(budget_buffers, nbuf, cache.batch_buffers(bs));
        let aside = if o.transparent && o.track_access && slots > 0 {
            let pool = AsidePool::new(slots, bs, nbuf)?;
            cache.reserve(pool.bytes())?;
            Some(pool)
        } else {
            None
        };
        Ok(MappingCore {
            id,
            policy_hits: policy.wants_hits(),
            prefetching: policy.has_prefetching(),
            policy,
            cache,
            object: obj,
            offset: o.offset,
            len,
            bs,
            shift: bs.trailing_zeros(),
            region,
            states,
            writable: o.writable,
            resident: AtomicU64::new(0),
            weight: o.weight,
            unmapped: AtomicBool::new(false),
            fault_hook: o.fault_hook,
            fault_handling: o.fault_handling,
            registration: std::sync::OnceLock::new(),
            fault_threads: std::sync::OnceLock::new(),
            aside,
        })
    }

    /// Connects a transparent mapping to whoever serves its faults: the SIGBUS handler, or
    /// its own handler threads.
    pub(crate) fn register_faults(self: &Arc<Self>) -> Result<()> {
        let Some(u) = self.region.uffd() else {
            return Ok(());
        };
        let base = self.base() as usize;
        match self.fault_handling {
            FaultHandling::OnFaultingThread => {
                let r = crate::sigbus::register(self, base, self.region.len())?;
                let _ = self.registration.set(r);
            }
            FaultHandling::HandlerThreads(n) => {
                let t = crate::fault_thread::spawn(self, u.clone(), base, n);
                let _ = self.fault_threads.set(t);
            }
        }
        Ok(())
    }

    pub(crate) fn id(&self) -> u64 {
        self.id
    }
    pub(crate) fn base(&self) -> *mut u8 {
        self.region.base()
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
    pub(crate) fn resident(&self) -> u64 {
        self.resident.load(Ordering::Relaxed)
    }
    pub(crate) fn is_transparent(&self) -> bool {
        self.region.is_transparent()
    }
    fn buffers(&self) -> u64 {
        self.states.len() as u64
    }
    #[inline]
    fn state(&self, i: u64) -> &BufferState {
        &self.states[i as usize]
    }
    #[inline]
    pub(crate) fn state_of(&self, i: u64) -> &BufferState {
        self.state(i)
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
    fn stats(&self) -> &crate::stats::Stats {
        &self.cache.stats
    }
    /// A stopwatch for one fault's phases: running if fault profiling is on and this fault
    /// is drawn for the sample.
    #[inline]
    fn stopwatch(&self) -> Stopwatch {
        Stopwatch::new(
            self.cache.profile && self.region.is_transparent() && crate::stopwatch::sampled(),
        )
    }

    /// The state word of buffer `i`, or the error for an index past the end: the one bounds
    /// check of the access paths.
    #[inline]
    fn slot(&self, i: u64) -> Result<&BufferState> {
        match self.states.get(i as usize) {
            Some(s) => Ok(s),
            None => Err(self.out_of_range(i)),
        }
    }

    #[cold]
    fn out_of_range(&self, i: u64) -> Error {
        Error::OutOfRange {
            addr: (self.base() as usize).wrapping_add((i as usize).wrapping_mul(self.bs)),
            len: self.bs,
        }
    }

    fn check_index(&self, i: u64) -> Result<()> {
        self.slot(i).map(|_| ())
    }

    /// The buffers overlapping `[offset, offset+len)`.
    fn range(&self, offset: u64, len: u64) -> Result<Range<u64>> {
        if self.unmapped.load(Ordering::Relaxed) {
            return Err(Error::Unmapped);
        }
        match offset.checked_add(len) {
            Some(end) if end <= self.len => {
                if len == 0 {
                    return Ok(0..0);
                }
                Ok(offset >> self.shift..((end - 1) >> self.shift) + 1)
            }
            _ => Err(Error::OutOfRange {
                addr: (self.base() as usize).wrapping_add(offset as usize),
                len: len as usize,
            }),
        }
    }

    // ---- pins -------------------------------------------------------------------------------

    pub(crate) fn pin_shared(self: &Arc<Self>, i: u64) -> Result<SharedGuard<'_>> {
        let s = self.slot(i)?;
        self.pin(s, i, Pin::Shared)?;
        // SAFETY: we hold a shared pin: the buffer is Cached and nobody writes it until unpin.
        Ok(unsafe {
            SharedGuard::new(
                self,
                i,
                self.region.at((i << self.shift) as usize),
                self.valid(i),
            )
        })
    }

    pub(crate) fn pin_exclusive(self: &Arc<Self>, i: u64) -> Result<ExclusiveGuard<'_>> {
        let s = self.slot(i)?;
        if !self.writable {
            return Err(Error::ReadOnly);
        }
        self.pin(s, i, Pin::Exclusive)?;
        // SAFETY: we hold the exclusive pin: nobody else reads or writes the buffer until unpin.
        Ok(unsafe {
            ExclusiveGuard::new(
                self,
                i,
                self.region.at((i << self.shift) as usize),
                self.valid(i),
            )
        })
    }

    /// Pins buffer `i`, loading it if needed. The heart of the hit and miss paths.
    #[inline]
    fn pin(self: &Arc<Self>, s: &BufferState, i: u64, pin: Pin) -> Result<()> {
        if pin == Pin::Shared {
            if let Some(old) = s.pin_shared_fast() {
                self.stats().add(Counter::Hits, 1);
                self.on_hit(i, old);
                return Ok(());
            }
        }
        let mut w = s.load();
        let mut waited = false;
        loop {
            let next = match pin {
                Pin::Shared => w.pin_shared(),
                _ => w.pin_exclusive(),
            };
            if let Some(n) = next {
                match s.cas(w, n) {
                    Ok(()) => {
                        let c = if waited {
                            Counter::Waits
                        } else {
                            Counter::Hits
                        };
                        self.stats().add(c, 1);
                        self.on_hit(i, w);
                        return Ok(());
                    }
                    Err(cur) => {
                        w = cur;
                        continue;
                    }
                }
            }
            if w.phase() == Phase::Evicted && w.idle() {
                if self.load_one(i, w, pin, false, &mut Stopwatch::new(false))? {
                    self.after_miss(i);
                    return Ok(());
                }
            } else if w.phase() == Phase::Aside && w.idle() {
                if self.restore(i, w, pin, false, &mut Stopwatch::new(false))? {
                    return Ok(());
                }
            } else {
                waited = true;
                s.wait_change(w);
            }
            w = s.load();
        }
    }

    /// The hooks of a pin that found the buffer cached (`old` is the word before the pin).
    #[inline]
    fn on_hit(&self, i: u64, old: Word) {
        if old.prefetched() {
            self.stats().add(Counter::PrefetchUsed, 1);
        }
        if self.policy_hits {
            self.policy.on_hit(i);
        }
    }

    /// Tries to become the loader of buffer `i` (seen as `seen`) and load it, keeping `pin`;
    /// `dirty` publishes it dirty and writable (a transparent write miss). Returns false if
    /// another thread won the claim. `sw` times the phases of a fault.
    fn load_one(
        &self,
        i: u64,
        seen: Word,
        pin: Pin,
        dirty: bool,
        sw: &mut Stopwatch,
    ) -> Result<bool> {
        let Some(claimed) = seen.begin_load() else {
            return Ok(false);
        };
        let s = self.state(i);
        if s.cas(seen, claimed).is_err() {
            return Ok(false);
        }
        // Claim first, reserve second: a thread that saw the buffer evicted a moment ago must
        // not evict others (or this very buffer, once loaded by someone else) for nothing.
        sw.skip();
        self.policy.on_miss(i);
        sw.lap(self.stats(), Counter::FaultBookkeepingNs);
        self.reserve_claimed(s, true)?;
        let t0 = sw
            .lap(self.stats(), Counter::FaultEvictNs)
            .unwrap_or_else(Instant::now);
        match self.read_claimed(i, dirty, sw) {
            Ok(()) => {
                self.stats().record_miss_latency(sw.since(t0));
                self.stats().add(Counter::Misses, 1);
                self.stats().add(Counter::BytesRead, self.bs as u64);
                self.publish(i, pin, false, dirty);
                sw.lap(self.stats(), Counter::FaultBookkeepingNs);
                Ok(true)
            }
            Err(e) => {
                self.fail_load(i);
                Err(e)
            }
        }
    }

    /// Reads claimed buffer `i` from the store into place: straight into the region, or, on a
    /// transparent mapping, into staging memory that is then installed.
    fn read_claimed(&self, i: u64, writable: bool, sw: &mut Stopwatch) -> Result<()> {
        let off = self.object_offset(i);
        let at = (i << self.shift) as usize;
        if !self.region.is_transparent() {
            // SAFETY: buffer i is Loading and ours: no other thread touches its memory until
            // we publish it.
            let buf = unsafe { std::slice::from_raw_parts_mut(self.region.at(at), self.bs) };
            return self.check_read(i, self.object.read_at(buf, off));
        }
        with_staging(self.bs, |p| {
            // SAFETY: the staging area is this thread's and at least bs long.
            let buf = unsafe { std::slice::from_raw_parts_mut(p, self.bs) };
            let got = self.object.read_at(buf, off);
            sw.lap(self.stats(), Counter::FaultIoNs);
            self.check_read(i, got.map(|n| zero_tail(buf, n)))?;
            // SAFETY: buf is readable; buffer i is Loading and ours.
            let r = unsafe { self.region.install(at, p, self.bs, writable) };
            sw.lap(self.stats(), Counter::FaultInstallNs);
            r
        })?
    }

    fn check_read(&self, i: u64, got: io::Result<usize>) -> Result<()> {
        let off = self.object_offset(i);
        match got {
            Ok(n) if n >= self.valid(i) => Ok(()),
            Ok(n) => Err(Error::ShortIo {
                op: "read",
                object: self.object.name().to_string(),
                offset: off,
                got: n,
                want: self.valid(i),
            }),
            Err(e) => Err(Error::io("read", self.object.name(), off, e)),
        }
    }

    /// Loading → Cached. The policy learns of the buffer while we still own it.
    fn publish(&self, i: u64, pin: Pin, prefetched: bool, dirty: bool) {
        self.policy.on_insert(i);
        let r = self.state(i).update(|w| {
            let c = w.finish_load(pin, prefetched);
            Some(if dirty { c.mark_dirty() } else { c })
        });
        debug_assert!(r.is_ok());
    }

    /// Loading → Evicted after a failed read: memory, budget and counters are given back.
    fn fail_load(&self, i: u64) {
        let _ = self
            .region
            .drop_ranges(&[((i << self.shift) as usize, self.bs)]);
        let r = self.state(i).update(|w| Some(w.abort_load()));
        debug_assert!(r.is_ok());
        self.resident.fetch_sub(1, Ordering::Relaxed);
        self.cache.release(self.bs as u64);
        self.stats().add(Counter::ReadFailures, 1);
    }

    /// The prefetch hook after a demand miss.
    fn after_miss(self: &Arc<Self>, i: u64) {
        if !self.prefetching {
            return;
        }
        let mut want = Vec::new();
        self.policy.choose_prefetch_buffers(i, &mut want);
        want.retain(|&j| j < self.buffers());
        if !want.is_empty() {
            let _ = MappingCore::prefetch_indices(self, &want);
        }
    }

    pub(crate) fn read_optimistic<R>(
        self: &Arc<Self>,
        i: u64,
        mut f: impl FnMut(&OptimisticView<'_>) -> R,
    ) -> Result<R> {
        let s = self.slot(i)?;
        let ptr = self.region.at((i << self.shift) as usize);
        let valid = self.valid(i);
        let mut loaded = false;
        loop {
            let w = s.load();
            if w.phase() == Phase::Cached && !w.exclusive() {
                // SAFETY: the view only performs reads; their results are discarded unless the
                // version check below proves the buffer was neither evicted nor written.
                let view = unsafe { OptimisticView::new(ptr, valid) };
                let r = f(&view);
                crate::sync::fence(Ordering::Acquire);
                let v = s.load();
                if v.phase() == Phase::Cached && !v.exclusive() && v.version() == w.version() {
                    if !loaded {
                        self.stats().add(Counter::Hits, 1);
                    }
                    return Ok(r);
                }
                continue;
            }
            // Not readable optimistically: load it (or wait for the writer) with a pin, which
            // counts the access as a miss or a hit itself.
            drop(self.pin_shared(i)?);
            loaded = true;
        }
    }

    // ---- transparent faults -----------------------------------------------------------------

    /// Serves a fault at byte `offset` of a transparent mapping, on the faulting thread
    /// (inside its SIGBUS handler): a miss is loaded like a pin's miss, a first store to a
    /// clean buffer marks it dirty and lifts the write protection. Returning makes the access
    /// run again.
    pub(crate) fn fault(self: &Arc<Self>, offset: usize, write: bool) -> Result<()> {
        let i = (offset >> self.shift) as u64;
        let s = self.slot(i)?;
        if write && !self.writable {
            return Err(Error::ReadOnly);
        }
        self.stats().add(Counter::Faults, 1);
        let mut sw = self.stopwatch();
        let r = self.serve_fault(s, i, offset, write, &mut sw);
        if sw.is_on() {
            self.stats().add(Counter::FaultsTimed, 1);
            sw.total(self.stats(), Counter::FaultNs);
        }
        r
    }

    fn serve_fault(
        self: &Arc<Self>,
        s: &BufferState,
        i: u64,
        offset: usize,
        write: bool,
        sw: &mut Stopwatch,
    ) -> Result<()> {
        let mut w = s.load();
        loop {
            match w.phase() {
                Phase::Evicted if w.idle() => {
                    if self.load_one(i, w, Pin::None, write, sw)? {
                        self.after_miss(i);
                        sw.lap(self.stats(), Counter::FaultBookkeepingNs);
                        return Ok(());
                    }
                }
                Phase::Aside if w.idle() => {
                    if self.restore(i, w, Pin::None, write, sw)? {
                        return Ok(());
                    }
                }
                // A read that raced the load of its page: it is there now.
                Phase::Cached if !write => return Ok(()),
                Phase::Cached if w.exclusive() => {
                    // The holder of an exclusive pin writes through its guard; nothing else
                    // can claim the buffer meanwhile.
                    let _ = s.update(|w| w.exclusive().then(|| w.mark_dirty()));
                    self.stats().add(Counter::WriteFaults, 1);
                    return self.region.protect(offset & !(self.bs - 1), self.bs, false);
                }
                Phase::Cached => {
                    if let Some(x) = w.begin_enable_write() {
                        if s.cas(w, x).is_ok() {
                            self.stats().add(Counter::WriteFaults, 1);
                            let r = self.region.protect(offset & !(self.bs - 1), self.bs, false);
                            let _ = s.update(|w| Some(w.finish_enable_write()));
                            return r;
                        }
                    } else {
                        // A write-back is reading the bytes: wait for it.
                        s.wait_change(w);
                    }
                }
                _ => s.wait_change(w),
            }
            w = s.load();
        }
    }

    /// A fault could not be served: asks the mapping's hook, if any. Returns whether the
    /// access should simply run again (true) or SIGBUS be delivered (false).
    pub(crate) fn fault_failed(&self, addr: usize, e: &Error) -> bool {
        match &self.fault_hook {
            Some(h) => h(addr, e) == FaultAction::Retry,
            None => false,
        }
    }

    // ---- batched loads ----------------------------------------------------------------------

    /// Claims every evicted buffer among `indices` (reserving budget for each); the rest are
    /// cached, loading or evicting by someone else. `demand` says the caller needs the data now
    /// (ensure_cached), not a prefetch: only demand misses reach [`Policy::on_miss`], and only
    /// a prefetch stops when memory cannot be had without waiting.
    fn claim_loads(&self, indices: impl Iterator<Item = u64>, demand: bool) -> Result<Claims> {
        let mut claimed = Vec::new();
        let mut others = Vec::new();
        let mut stopped = false;
        for i in indices {
            let s = self.state(i);
            let w = s.load();
            if w.phase() == Phase::Cached {
                // Counts as an access for the policy, so this batch's own loads do not evict it.
                // The buffer is not pinned, so it may be evicted as the hook runs: the bundled
                // policies ignore hits on buffers they no longer hold, and reset what a stray
                // hit left behind when the buffer is inserted again.
                let _ = s.update(|w| w.touch());
                if self.policy_hits {
                    self.policy.on_hit(i);
                }
                continue;
            }
            let Some(l) = w.begin_load() else {
                others.push(i);
                continue;
            };
            if s.cas(w, l).is_err() {
                others.push(i);
                continue;
            }
            if demand {
                self.policy.on_miss(i);
            }
            // A prefetch never waits for memory: when nothing can be evicted now (the budget is
            // held by pins or by this very batch's loads), it stops here.
            match self.reserve_claimed(s, demand) {
                Ok(true) => claimed.push(i),
                Ok(false) => {
                    stopped = true;
                    break;
                }
                Err(e) => {
                    self.abandon_claims(&claimed);
                    return Err(e);
                }
            }
        }
        Ok(Claims {
            claimed,
            others,
            stopped,
        })
    }

    /// Reserves the budget for a buffer this thread just claimed (`Loading`), waiting for
    /// memory if `wait`, else giving up at once (`Ok(false)`). On failure the claim is undone.
    fn reserve_claimed(&self, s: &BufferState, wait: bool) -> Result<bool> {
        let got = if wait {
            self.cache.reserve(self.bs as u64).map(|()| true)
        } else {
            Ok(self.cache.try_reserve(self.bs as u64))
        };
        match got {
            Ok(true) => {
                self.resident.fetch_add(1, Ordering::Relaxed);
                Ok(true)
            }
            other => {
                let _ = s.update(|w| Some(w.abort_load()));
                other
            }
        }
    }

    fn abandon_claims(&self, claimed: &[u64]) {
        for &i in claimed {
            let _ = self.state(i).update(|w| Some(w.abort_load()));
            self.resident.fetch_sub(1, Ordering::Relaxed);
            self.cache.release(self.bs as u64);
        }
    }

    /// Reads claimed (`Loading`) buffers in one store batch and publishes them. Returns the
    /// first error; every failed buffer goes back to `Evicted`.
    pub(crate) fn load_claimed(&self, claimed: &[u64], prefetched: bool) -> Result<()> {
        if claimed.is_empty() {
            return Ok(());
        }
        let t0 = Instant::now();
        let (ok, first) = if self.region.is_transparent() {
            with_staging(claimed.len() * self.bs, |p| {
                self.read_batch_at(claimed, prefetched, |k, _| {
                    // SAFETY: slot k of this thread's staging area, which holds them all.
                    unsafe { p.add(k * self.bs) }
                })
            })?
        } else {
            self.read_batch_at(claimed, prefetched, |_, i| {
                self.region.at((i << self.shift) as usize)
            })
        };
        let st = self.stats();
        st.add(
            if prefetched {
                Counter::Prefetches
            } else {
                Counter::Misses
            },
            ok,
        );
        st.add(Counter::BytesRead, ok * self.bs as u64);
        if !prefetched && ok > 0 {
            st.record_miss_latency(t0.elapsed());
        }
        first.map_or(Ok(()), Err)
    }

    /// Reads claimed buffers in one store batch into `dest(k, i)` (the region itself, or
    /// staging to install from) and publishes each one that succeeds. Returns how many did and
    /// the first error.
    fn read_batch_at(
        &self,
        claimed: &[u64],
        prefetched: bool,
        dest: impl Fn(usize, u64) -> *mut u8,
    ) -> (u64, Option<Error>) {
        let mut reqs: Vec<IoBuf> = claimed
            .iter()
            .enumerate()
            // SAFETY: each destination is either a Loading buffer claimed by us or our own
            // staging slot: exclusive until the batch returns.
            .map(|(k, &i)| unsafe { IoBuf::new(dest(k, i), self.bs, self.object_offset(i)) })
            .collect();
        let mut out = Vec::with_capacity(reqs.len());
        self.object.read_batch(&mut reqs, &mut out);
        drop(reqs);
        let mut first = None;
        let mut ok = 0u64;
        for (k, &i) in claimed.iter().enumerate() {
            match self.finish_load(
                i,
                dest(k, i),
                take_result(&mut out, k),
                prefetched,
                Pin::None,
            ) {
                Ok(()) => ok += 1,
                Err(e) => {
                    first.get_or_insert(e);
                }
            }
        }
        (ok, first)
    }

    /// Ends the load of claimed buffer `i`, whose read into `dest` (the region itself, or a
    /// staging slot of `bs` bytes) returned `got`: installs it if staged, and publishes it
    /// holding `pin`, or gives it back evicted and reports why.
    fn finish_load(
        &self,
        i: u64,
        dest: *mut u8,
        mut got: io::Result<usize>,
        prefetched: bool,
        pin: Pin,
    ) -> Result<()> {
        let transparent = self.region.is_transparent();
        if transparent {
            // SAFETY: dest is our staging slot of bs bytes.
            let buf = unsafe { std::slice::from_raw_parts_mut(dest, self.bs) };
            got = got.map(|n| zero_tail(buf, n));
        }
        let r = self.check_read(i, got).and_then(|()| {
            if !transparent {
                return Ok(());
            }
            // SAFETY: the staging slot is readable; buffer i is Loading and ours.
            unsafe {
                self.region
                    .install((i << self.shift) as usize, dest, self.bs, false)
            }
        });
        match r {
            Ok(()) => self.publish(i, pin, prefetched, false),
            Err(_) => self.fail_load(i),
        }
        r
    }

    /// Loads the missing buffers among `indices` with one batch from this thread, then waits
    /// for any that other threads were loading.
    pub(crate) fn ensure_cached_indices(self: &Arc<Self>, indices: &[u64]) -> Result<()> {
        for &i in indices {
            self.check_index(i)?;
        }
        let Claims {
            claimed, others, ..
        } = self.claim_loads(indices.iter().copied(), true)?;
        let hits = indices.len() - claimed.len() - others.len();
        self.stats().add(Counter::Hits, hits as u64);
        self.load_claimed(&claimed, false)?;
        for i in others {
            drop(self.pin_shared(i)?);
        }
        Ok(())
    }

    pub(crate) fn ensure_cached_range(self: &Arc<Self>, offset: u64, len: u64) -> Result<()> {
        let r = self.range(offset, len)?;
        let v: Vec<u64> = r.collect();
        self.ensure_cached_indices(&v)
    }

    /// Whether a read of buffer `i` should go around the cache: it is not resident (nor on its
    /// way in) and the policy refuses to admit it.
    fn bypass(&self, i: u64) -> bool {
        self.state(i).load().phase() == Phase::Evicted && !self.policy.admit(i)
    }

    /// Copies `[offset, offset + buf.len())` out of the mapping: each covered buffer is pinned
    /// shared (loading it on a miss) and copied, except buffers that are missing and that the
    /// policy refuses to admit, whose bytes are read straight from the store.
    pub(crate) fn read_into(self: &Arc<Self>, offset: u64, buf: &mut [u8]) -> Result<()> {
        let r = self.range(offset, buf.len() as u64)?;
        let end = offset + buf.len() as u64;
        let mut bypassed = 0;
        for i in r {
            let first = i << self.shift;
            let from = offset.max(first);
            let to = end.min(first + self.bs as u64);
            let dst = &mut buf[(from - offset) as usize..(to - offset) as usize];
            let within = (from - first) as usize;
            if self.bypass(i) {
                // Still a demand miss, as the policy's history should know.
                self.policy.on_miss(i);
                self.read_around(i, within, dst)?;
                bypassed += 1;
            } else {
                let g = self.pin_shared(i)?;
                dst.copy_from_slice(&g[within..within + dst.len()]);
            }
        }
        self.stats().add(Counter::Bypasses, bypassed);
        Ok(())
    }

    /// Reads buffer `i` from the store into staging memory and copies bytes `within..` of it
    /// into `dst`. The whole buffer is read so an `O_DIRECT` store sees an aligned request.
    fn read_around(&self, i: u64, within: usize, dst: &mut [u8]) -> Result<()> {
        with_staging(self.bs, |p| {
            // SAFETY: the staging area is this thread's and at least bs long.
            let tmp = unsafe { std::slice::from_raw_parts_mut(p, self.bs) };
            let got = self.object.read_at(tmp, self.object_offset(i));
            self.check_read(i, got)?;
            dst.copy_from_slice(&tmp[within..within + dst.len()]);
            self.stats().add(Counter::BytesRead, self.valid(i) as u64);
            Ok(())
        })?
    }

    /// Claims the evicted buffers among `indices` that the policy admits and has the IO worker
    /// load them; the others are dropped (a prefetch is only advice).
    pub(crate) fn prefetch_indices(self: &Arc<Self>, indices: &[u64]) -> Result<()> {
        for &i in indices {
            self.check_index(i)?;
        }
        let before = indices.len();
        let admitted: Vec<u64> = indices
            .iter()
            .copied()
            .filter(|&i| !self.bypass(i))
            .collect();
        self.stats()
            .add(Counter::Bypasses, (before - admitted.len()) as u64);
        // One job per run: the IO threads read the first run while this thread still claims
        // (and evicts for) the rest. No more than the budget holds, or the last runs would
        // evict the first ones, loaded by then.
        let per_job = (PREFETCH_JOB_BYTES >> self.shift).max(1);
        let budget = self.cache.budget_bytes() >> self.shift;
        let admitted = &admitted[..admitted.len().min(budget as usize)];
        for run in admitted.chunks(per_job) {
            let c = self.claim_loads(run.iter().copied(), false)?;
            if !c.claimed.is_empty() {
                self.cache.io.submit(Job::Load {
                    mapping: self.clone(),
                    indices: c.claimed,
                });
            }
            if c.stopped {
                break;
            }
        }
        Ok(())
    }

    pub(crate) fn prefetch_range(self: &Arc<Self>, offset: u64, len: u64) -> Result<()> {
        let v: Vec<u64> = self.range(offset, len)?.collect();
        MappingCore::prefetch_indices(self, &v)
    }

    // ---- write-back -------------------------------------------------------------------------

    /// Begins write-back of `i` if it is dirty and no writer holds it. On a transparent
    /// mapping the buffer is then write-protected, so a store during the IO faults and waits
    /// for it, and a store after it marks the buffer dirty again; stores that landed between
    /// the claim and the protection are in memory before the IO reads it, so none is lost.
    fn claim_writeback(&self, i: u64) -> bool {
        if self.state(i).update(|w| w.begin_writeback()).is_err() {
            return false;
        }
        if let Err(e) = self
            .region
            .protect((i << self.shift) as usize, self.bs, true)
        {
            // Unprotected pages would take stores unnoticed: keep the buffer dirty instead.
            let r = self.state(i).update(|w| Some(w.finish_writeback(false)));
            debug_assert!(r.is_ok(), "{e}");
            return false;
        }
        true
    }

    /// Writes claimed buffers in one store batch. Returns the failures; those buffers are dirty
    /// again and stay resident.
    pub(crate) fn write_claimed(&self, claimed: &[u64]) -> Vec<Error> {
        if claimed.is_empty() {
            return Vec::new();
        }
        let mut reqs: Vec<IoBuf> = claimed
            .iter()
            .map(|&i| {
                // SAFETY: the write-back pin keeps writers out; the store only reads.
                unsafe {
                    IoBuf::new(
                        self.region.at((i << self.shift) as usize),
                        self.valid(i),
                        self.object_offset(i),
                    )
                }
            })
            .collect();
        let mut out = Vec::with_capacity(reqs.len());
        self.object.write_batch(&mut reqs, &mut out);
        drop(reqs);
        let mut errors = Vec::new();
        let mut ok = 0u64;
        let mut bytes = 0u64;
        for (k, &i) in claimed.iter().enumerate() {
            let r = take_result(&mut out, k);
            let good = r.is_ok();
            if let Err(e) = r {
                errors.push(Error::io(
                    "write",
                    self.object.name(),
                    self.object_offset(i),
                    e,
                ));
            } else {
                ok += 1;
                bytes += self.valid(i) as u64;
            }
            let r = self.state(i).update(|w| Some(w.finish_writeback(good)));
            debug_assert!(r.is_ok());
        }
        let st = self.stats();
        st.add(Counter::Writebacks, ok);
        st.add(Counter::BytesWritten, bytes);
        st.add(Counter::WritebackFailures, errors.len() as u64);
        errors
    }

    pub(crate) fn writeback_range(self: &Arc<Self>, offset: u64, len: u64) -> Result<()> {
        let r = self.range(offset, len)?;
        if !self.writable {
            return Ok(());
        }
        let claimed: Vec<u64> = r.filter(|&i| self.claim_writeback(i)).collect();
        if !claimed.is_empty() {
            self.cache.io.submit(Job::Writeback {
                mapping: self.clone(),
                indices: claimed,
            });
        }
        Ok(())
    }

    /// Writes back every dirty buffer in the range and syncs the object. Buffers another
    /// thread is writing back are waited for; buffers held exclusively are being changed now
    /// and belong to a later msync.
    pub(crate) fn msync_range(&self, offset: u64, len: u64) -> Result<()> {
        let r = self.range(offset, len)?;
        if !self.writable {
            return Ok(());
        }
        let mut mine = Vec::new();
        let mut theirs = Vec::new();
        for i in r {
            let w = self.state(i).load();
            if w.writing() {
                theirs.push(i);
            } else if w.dirty() && self.claim_writeback(i) {
                mine.push(i);
            } else if self.state(i).load().writing() {
                theirs.push(i);
            }
        }
        let mut errors = self.write_claimed(&mine);
        for i in theirs {
            let s = self.state(i);
            loop {
                let w = s.load();
                if !w.writing() {
                    break;
                }
                s.wait_change(w);
            }
            // Their write failed: the buffer is dirty again, so it is ours to retry now.
            if s.load().dirty() && self.claim_writeback(i) {
                errors.extend(self.write_claimed(&[i]));
            }
        }
        if !errors.is_empty() {
            let failed = errors.len();
            return Err(Error::WritebackFailed {
                failed,
                first: Box::new(errors.swap_remove(0)),
            });
        }
        self.object
            .sync()
            .map_err(|e| Error::io("sync", self.object.name(), 0, e))
    }

    // ---- eviction ---------------------------------------------------------------------------

    /// Asks the policy for up to `want` victims and evicts those that validate; if none do,
    /// the manager's own sweep picks the victims instead.
    pub(crate) fn evict_some(&self, want: usize) -> u64 {
        match &self.aside {
            Some(q) => self.evict_some_tracked(q, want),
            None => self.evict_chosen(want),
        }
    }

    /// Evicts the policy's choice now, without a second chance.
    fn evict_chosen(&self, want: usize) -> u64 {
        let mut cands = Vec::with_capacity(want);
        let buffers = Buffers::new(&self.states);
        self.policy
            .choose_eviction_buffers(&buffers, want, &mut cands);
        let n = self.evict_indices(&cands, false).0;
        if n > 0 {
            return n;
        }
        cands.clear();
        self.policy.fallback_victims(&buffers, want, &mut cands);
        self.evict_indices(&cands, false).0
    }

    pub(crate) fn evict_range(&self, offset: u64, len: u64) -> Result<()> {
        let v: Vec<u64> = self.range(offset, len)?.collect();
        let (_, errors) = self.evict_indices(&v, true);
        match errors.into_iter().next() {
            None => Ok(()),
            Some((n, first)) => Err(Error::WritebackFailed {
                failed: n,
                first: Box::new(first),
            }),
        }
    }

    /// Evicts the candidates that validate: cached, idle, and (unless `explicit`) not vetoed by
    /// the policy. Dirty ones are written back first in one batch. Returns the number evicted
    /// and, if write-backs failed, their count and the first error.
    fn evict_indices(&self, cands: &[u64], explicit: bool) -> (u64, Option<(usize, Error)>) {
        let mut clean = Vec::with_capacity(cands.len());
        let mut aside = Vec::new();
        let mut dirty = Vec::new();
        let mut cancels = 0u64;
        for &i in cands {
            if !explicit && !self.policy.is_evictable(i) {
                cancels += 1;
                continue;
            }
            let s = self.state(i);
            let w = s.load();
            if w.dirty() {
                if self.writable && self.claim_writeback(i) {
                    dirty.push(i);
                } else {
                    cancels += 1;
                }
            } else if let Some(e) = w.begin_evict() {
                if s.cas(w, e).is_ok() {
                    if w.phase() == Phase::Aside {
                        aside.push(i);
                    } else {
                        clean.push(i);
                    }
                } else {
                    cancels += 1;
                }
            } else {
                cancels += 1;
            }
        }
        let mut failure = None;
        if !dirty.is_empty() {
            let errors = self.write_claimed(&dirty);
            if let Some(first) = errors.into_iter().next() {
                failure = Some((
                    dirty
                        .iter()
                        .filter(|&&i| self.state(i).load().dirty())
                        .count(),
                    first,
                ));
            }
            for &i in &dirty {
                // Written and not touched since: claim it like any clean buffer.
                let s = self.state(i);
                if s.update(|w| w.begin_evict()).is_ok() {
                    clean.push(i);
                } else {
                    cancels += 1;
                }
            }
        }
        self.stats().add(Counter::EvictionCancels, cancels);
        if let Some(pool) = &self.aside {
            // Set-aside buffers have no pages in the mapping: freeing the slot is all.
            aside.iter().for_each(|&i| pool.release(i));
        }
        if !clean.is_empty() {
            // Neighbours (a scan's buffers) go as one range: one zap instead of many.
            clean.sort_unstable();
            let mut ranges: Vec<(usize, usize)> = Vec::with_capacity(clean.len());
            for &i in &clean {
                let off = (i << self.shift) as usize;
                match ranges.last_mut() {
                    Some((o, l)) if *o + *l == off => *l += self.bs,
                    _ => ranges.push((off, self.bs)),
                }
            }
            if let Err(e) = self.region.drop_ranges(&ranges) {
                // The memory could not be dropped: keep every buffer resident and valid.
                for &i in &clean {
                    let _ = self.state(i).update(|w| Some(w.cancel_evict()));
                }
                clean.clear();
                failure = failure.or(Some((0, e)));
            }
        }
        clean.append(&mut aside);
        if clean.is_empty() {
            return (0, failure);
        }
        let mut wasted = 0;
        for &i in &clean {
            self.policy.on_evict(i);
            let s = self.state(i);
            if s.load().prefetched() {
                wasted += 1;
            }
            let r = s.update(|w| Some(w.finish_evict()));
            debug_assert!(r.is_ok());
        }
        let n = clean.len() as u64;
        self.resident.fetch_sub(n, Ordering::Relaxed);
        self.cache.release(n * self.bs as u64);
        let st = self.stats();
        st.add(Counter::Evictions, n);
        st.add(Counter::PrefetchWasted, wasted);
        (n, failure)
    }

    /// Writes back everything, then evicts everything and leaves the cache. On a write-back
    /// failure nothing is released.
    fn release(&self) -> Result<()> {
        if self.unmapped.load(Ordering::Relaxed) {
            return Ok(());
        }
        self.msync_range(0, self.len)?;
        self.cache.remove_mapping(self.id);
        self.unmapped.store(true, Ordering::Relaxed);
        let all: Vec<u64> = (0..self.buffers()).collect();
        for chunk in all.chunks(1024) {
            // Settle buffers that a background load or a concurrent evictor still owns.
            for &i in chunk {
                let s = self.state(i);
                loop {
                    let w = s.load();
                    if matches!(w.phase(), Phase::Cached | Phase::Evicted | Phase::Aside)
                        && !w.writing()
                    {
                        break;
                    }
                    s.wait_change(w);
                }
            }
            let (_, failure) = self.evict_indices(chunk, true);
            if let Some((_, e)) = failure {
                return Err(e);
            }
        }
        debug_assert_eq!(self.resident(), 0, "unmap left buffers resident");
        Ok(())
    }
}

impl Drop for MappingCore {
    /// Returns the budget of buffers still resident when a mapping goes away without a full
    /// release (its write-back failed): the cache must not count memory that no longer exists.
    fn drop(&mut self) {
        let left = self.resident.load(Ordering::Relaxed);
        if left > 0 {
            self.cache.release(left * self.bs as u64);
        }
        if let Some(pool) = &self.aside {
            self.cache.release(pool.bytes());
        }
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

/// A mapped object. Dropping it writes back and releases everything, like [`Mapping::unmap`]
/// but without a way to report failure: call `unmap` to learn of it.
pub struct Mapping {
    core: Arc<MappingCore>,
}

/// `unmap` could not write everything back. The mapping is handed back intact, dirty data
/// included, so the caller can retry.
#[derive(Debug, thiserror::Error)]
#[error("unmap failed: {error}")]
pub struct UnmapError {
    #[source]
    pub error: Error,
    pub mapping: Mapping,
}

impl std::fmt::Debug for Mapping {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mapping")
            .field("object", &self.core.object.name())
            .field("len", &self.core.len)
            .field("buffer_size", &self.core.bs)
            .finish()
    }
}

impl Mapping {
    pub(crate) fn new(core: Arc<MappingCore>) -> Self {
        Mapping { core }
    }

    /// Pins buffer `index` for reading, loading it if needed. Many readers may hold it.
    pub fn pin_shared(&self, index: u64) -> Result<SharedGuard<'_>> {
        self.core.pin_shared(index)
    }

    /// Pins buffer `index` for writing, loading it if needed. Writing through the guard
    /// marks the buffer dirty.
    pub fn pin_exclusive(&self, index: u64) -> Result<ExclusiveGuard<'_>> {
        self.core.pin_exclusive(index)
    }

    /// Runs `f` on buffer `index` without pinning it, then validates that the buffer was
    /// neither evicted nor written meanwhile; if it was, runs `f` again. `f` must not act on
    /// what it reads before returning (vmcache's optimistic latch).
    pub fn read_optimistic<R>(
        &self,
        index: u64,
        f: impl FnMut(&OptimisticView<'_>) -> R,
    ) -> Result<R> {
        self.core.read_optimistic(index, f)
    }

    /// Brings every buffer overlapping `[offset, offset+len)` into memory, reading the missing
    /// ones in one batch.
    pub fn ensure_cached(&self, offset: u64, len: u64) -> Result<()> {
        self.core.ensure_cached_range(offset, len)
    }

    /// Brings the listed buffers into memory, reading the missing ones in one batch (many
    /// reads in flight on stores that support it).
    pub fn ensure_cached_buffers(&self, indices: &[u64]) -> Result<()> {
        self.core.ensure_cached_indices(indices)
    }

    /// Copies `buf.len()` bytes at `offset` into `buf`, through the cache: each buffer is
    /// pinned shared (and loaded on a miss) and copied. A missing buffer that the policy does
    /// not [admit](crate::policy::Policy::admit) is read straight from the store into `buf`
    /// and not cached (cache_ext's admission filter), so a one-off pass over cold data leaves
    /// the cache as it was.
    pub fn read(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.core.read_into(offset, buf)
    }

    /// Visits buffers as they become available: pins each of `indices` shared and calls
    /// `f(index, bytes)`, hits at once and misses as soon as their own reads complete, keeping
    /// up to `depth` reads in flight from the calling thread (a graph frontier, a list of
    /// pages to probe). On an io_uring store each completed read is replaced by the next at
    /// once, so the device's queue stays full where [`Mapping::ensure_cached_buffers`] waits
    /// for its slowest read (`depth` 0 is refused with [`Error::BadArgument`]). Buffers another
    /// thread is loading come last. While reads are in
    /// flight the stream never waits for memory: a `depth` larger than the budget allows
    /// pauses until a visited buffer can be evicted. Stops at the first error and returns it.
    /// `f` runs while reads are in flight: it may pin, but should not block for long.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use ucache::{Cache, CacheOptions, MapOptions, store::MemoryStore};
    /// let store = MemoryStore::new();
    /// store.insert("graph", (0..64 * 4096).map(|i| (i / 4096) as u8).collect());
    /// let cache = Cache::new(CacheOptions::new(16 * 4096).batch(4)).unwrap();
    /// let map = cache.map(Arc::new(store), "graph", MapOptions::new()).unwrap();
    /// let mut sum = 0u64;
    /// map.pin_each([3, 60, 7, 3], 32, |i, bytes| {
    ///     assert_eq!(bytes[0] as u64, i);
    ///     sum += i;
    /// })
    /// .unwrap();
    /// assert_eq!(sum, 73);
    /// ```
    pub fn pin_each(
        &self,
        indices: impl IntoIterator<Item = u64>,
        depth: usize,
        mut f: impl FnMut(u64, &[u8]),
    ) -> Result<()> {
        if depth == 0 {
            return Err(Error::BadArgument(
                "pin_each depth must be at least 1".into(),
            ));
        }
        self.core.pin_each(&mut indices.into_iter(), depth, &mut f)
    }

    /// Starts loading the buffers overlapping the range in the background. Missing buffers the
    /// policy does not admit are skipped.
    pub fn prefetch(&self, offset: u64, len: u64) -> Result<()> {
        MappingCore::prefetch_range(&self.core, offset, len)
    }

    /// Starts loading the listed buffers in the background.
    pub fn prefetch_buffers(&self, indices: &[u64]) -> Result<()> {
        MappingCore::prefetch_indices(&self.core, indices)
    }

    /// Evicts the unpinned buffers overlapping the range, writing dirty ones back first.
    /// Pinned buffers are skipped. A failed write-back keeps its buffer and is reported.
    pub fn evict(&self, offset: u64, len: u64) -> Result<()> {
        self.core.evict_range(offset, len)
    }

    /// Starts writing back the dirty buffers overlapping the range in the background.
    pub fn writeback(&self, offset: u64, len: u64) -> Result<()> {
        MappingCore::writeback_range(&self.core, offset, len)
    }

    /// Writes back the dirty buffers overlapping the range and makes them durable before it
    /// returns.
    pub fn msync(&self, offset: u64, len: u64) -> Result<()> {
        self.core.msync_range(offset, len)
    }

    /// Base address of the mapping.
    pub fn as_ptr(&self) -> *const u8 {
        self.core.base()
    }
    /// The base address for plain stores into a writable transparent mapping (hand it to C
    /// like an `mmap` pointer). Other mappings must be written through exclusive pins.
    pub fn as_mut_ptr(&self) -> *mut u8 {
        self.core.base()
    }
    /// Whether plain loads and stores may use the memory (see [`MapOptions::transparent`]).
    pub fn is_transparent(&self) -> bool {
        self.core.is_transparent()
    }
    /// Mapped bytes.
    pub fn len(&self) -> u64 {
        self.core.len
    }
    pub fn is_empty(&self) -> bool {
        false
    }
    pub fn buffer_size(&self) -> usize {
        self.core.bs
    }
    /// Number of buffers (the last may be partial).
    pub fn buffers(&self) -> u64 {
        self.core.buffers()
    }
    /// Buffers resident now.
    pub fn resident(&self) -> u64 {
        self.core.resident()
    }
    pub fn is_writable(&self) -> bool {
        self.core.writable
    }
    /// The buffer holding byte `offset`.
    pub fn buffer_of(&self, offset: u64) -> u64 {
        offset >> self.core.shift
    }
    /// The state word of buffer `index`, for diagnostics and tests.
    pub fn state(&self, index: u64) -> Option<Word> {
        self.core.states.get(index as usize).map(|s| s.load())
    }
    /// The name of the policy attached to this mapping.
    pub fn policy_name(&self) -> &str {
        self.core.policy.name()
    }

    /// Writes back everything, releases all memory and leaves the cache.
    pub fn unmap(self) -> std::result::Result<(), UnmapError> {
        match self.core.release() {
            Ok(()) => Ok(()),
            Err(error) => Err(UnmapError {
                error,
                mapping: self,
            }),
        }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        if let Err(e) = self.core.release() {
            eprintln!(
                "ucache: mapping of '{}' dropped with data not written back: {e} \
                 (call unmap() to handle this error)",
                self.core.object.name()
            );
            self.core.cache.remove_mapping(self.core.id);
        }
    }
}
