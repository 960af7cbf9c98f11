//! [`MapOptions`]: how an object is mapped, chosen once per mapping.

use super::MIN_BUFFER;
use crate::fault::{FaultHandling, FaultHook};
use crate::policy::Policy;

/// Where a mapping's resident buffers live ([`MapOptions::placement`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Placement {
    /// Buffer `i` lives at `base + i × buffer_size` of the mapping's own address range (the
    /// default). A miss reads into a fresh page there and an eviction gives the page back to
    /// the kernel. The only placement transparent access can use.
    #[default]
    InPlace,
    /// A resident buffer lives in a frame of a pool that belongs to the cache (one pool per
    /// buffer size, shared by every pool mapping of that size). Frames are faulted in once, in
    /// 2 MiB chunks charged to the cache's budget, and reused by later misses: an eviction
    /// puts a frame back on a free list instead of giving its page to the kernel, so a miss
    /// costs one read and no page fault. Explicit access only: a pointer into a pool mapping
    /// (a guard's bytes) is valid only while its pin is held, and transparent access, the base
    /// address and the address-based calls are refused with [`crate::Error::NotInPlace`]. The
    /// budget must hold one chunk (2 MiB, or one buffer if larger), or `map` fails with
    /// [`crate::Error::BudgetTooSmall`].
    Pool,
}

/// How to map an object.
pub struct MapOptions {
    pub(super) buffer_size: usize,
    pub(super) offset: u64,
    pub(super) len: Option<u64>,
    pub(super) writable: bool,
    pub(super) create: bool,
    pub(super) policy: Option<Box<dyn Policy>>,
    pub(super) transparent: bool,
    pub(super) fault_handling: FaultHandling,
    pub(super) fault_hook: Option<FaultHook>,
    pub(super) track_access: bool,
    pub(super) readahead: bool,
    pub(super) readahead_inline: bool,
    pub(super) file_view: bool,
    pub(super) scan_bypass: bool,
    pub(super) weight: u32,
    pub(super) placement: Placement,
    pub(super) before_writeback: Option<super::hooks::BeforeWriteback>,
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
            readahead_inline: false,
            file_view: false,
            scan_bypass: true,
            weight: 1,
            placement: Placement::InPlace,
            before_writeback: None,
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
    /// Allow exclusive pins, dirty buffers and write-back (default `false`: read-only).
    pub fn writable(mut self, writable: bool) -> Self {
        self.writable = writable;
        self
    }
    /// Create the object if it does not exist (default `false`). Creating needs
    /// `writable(true)` as well: `create(true)` alone is refused at `map` with
    /// [`crate::Error::BadArgument`] before anything is created, rather than making the
    /// mapping writable behind the caller's back. A new object is empty, so it takes a
    /// [`MapOptions::len`]; without one, a missing object is refused with
    /// [`crate::Error::BadLength`] and not created.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use ucache::{Cache, CacheOptions, Error, MapOptions, store::MemoryStore};
    /// let store = Arc::new(MemoryStore::new());
    /// let cache = Cache::new(CacheOptions::new(16 * 4096).batch(4)).unwrap();
    /// let refused = cache.map(store.clone(), "new", MapOptions::new().create(true).len(4096));
    /// assert!(matches!(refused, Err(Error::BadArgument(_))));
    /// assert!(store.get("new").is_none(), "nothing was created");
    /// let opts = MapOptions::new().writable(true).create(true).len(4096);
    /// let map = cache.map(store.clone(), "new", opts).unwrap();
    /// assert!(map.is_writable());
    /// ```
    pub fn create(mut self, create: bool) -> Self {
        self.create = create;
        self
    }
    /// The eviction and prefetch policy of this mapping (default [`Clock`](crate::policy::Clock)).
    pub fn policy(mut self, policy: Box<dyn Policy>) -> Self {
        self.policy = Some(policy);
        self
    }

    /// Let plain loads and stores use the mapping, like `mmap`: misses and first writes fault
    /// into ucache (userfaultfd, served on the faulting thread). Pins and the explicit
    /// primitives keep working; they order against each other and against eviction, while
    /// plain stores of other threads are ordered by the program, as under `mmap` (see
    /// [`SharedGuard`](crate::SharedGuard) and [`ExclusiveGuard`](crate::ExclusiveGuard)). A
    /// miss is served on the stack of the access that took it: one taken inside the program's
    /// own signal handler running on an alternate signal stack needs about 64 KiB of that
    /// stack. Locking its pages (`mlock`) is not supported: eviction
    /// could not free them. Linux on x86-64 only.
    pub fn transparent(mut self, transparent: bool) -> Self {
        self.transparent = transparent;
        self
    }
    /// Map the file itself, as a view whose pages ucache reveals and hides (off by default;
    /// implies [`MapOptions::transparent`]). For read-only mappings of files that are read
    /// in long runs: scans, searches, dumps.
    ///
    /// A transparent mapping reads each miss into staging memory and copies it into a page
    /// of its own. A view maps the file with the kernel and keeps every page it has not
    /// loaded inaccessible: a load there raises `SIGSEGV`, which ucache's handler serves by
    /// making the buffer readable and reading it into the page cache with the kernel's own
    /// readahead (`MADV_POPULATE_READ`), with no copy and no page of ucache's. Eviction makes
    /// the buffer inaccessible again and drops its pages. Budget, policy, readahead windows
    /// and the explicit primitives work as on any transparent mapping, and the bytes are
    /// always the file's: writes through the file's descriptors show at once, and a page past
    /// the end of the file gets the kernel's `SIGBUS`, as under `mmap`.
    ///
    /// Each load and eviction changes the protection of its run, a few microseconds of
    /// system calls, and each run of loaded buffers is an area of the address space of its
    /// own: so buffers must be at least 64 KiB (`vm.max_map_count`, 65,530 areas by default,
    /// bounds how many runs a view may have), and a view suits long runs, not random
    /// lookups of a few KiB. Hits are never seen ([`MapOptions::track_access`] is ignored).
    ///
    /// `map` refuses a view with [`crate::Error::BadArgument`] when the mapping is writable,
    /// its buffers are smaller than 64 KiB, its faults go to handler threads, or the store's
    /// object is not a file read through the page cache
    /// ([`crate::store::Object::page_cache_fd`]: the file stores' objects are). Linux on
    /// x86-64 only. A `write(2)` from a hidden page fails with `EFAULT`, as it does from a
    /// transparent mapping: make the range resident first.
    pub fn file_view(mut self, on: bool) -> Self {
        self.file_view = on;
        if on {
            self.transparent = true;
        }
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
    /// soft fault per touch of a set-aside buffer. Measured on zram, results were mixed: one
    /// run cut the Zipf(0.99) miss ratio from 23.1% to 20.8%, another raised it, and it cost
    /// 10-13% of lookup throughput (README).
    pub fn track_access(mut self, on: bool) -> Self {
        self.track_access = on;
        self
    }
    /// Sequential readahead (on by default), as mmap and the kernel's page cache have: the
    /// mapping detects sequential misses (Linux's on-demand readahead with its asynchronous
    /// marker: a window of 16 KiB that doubles up to 1 MiB, and never past a quarter of the
    /// budget, while the scan continues, each fetched while the reader is still in the
    /// previous one; see
    /// [`ReadAhead::transparent_default`](crate::policy::prefetch::ReadAhead::transparent_default))
    /// and loads the window in the background on the cache's IO threads, one read per 128 KiB
    /// run (per buffer on a [`Placement::Pool`] mapping, whose frames are not adjacent). Random access never triggers it, and a window never takes more than the budget
    /// holds (less what the background evictor keeps free), so a scan cannot flush the cache
    /// with its readahead.
    ///
    /// - Explicit mappings (pins, every [`Placement`]): a miss of
    ///   [`Mapping::pin_shared`](crate::Mapping::pin_shared) or
    ///   [`Mapping::pin_exclusive`](crate::Mapping::pin_exclusive) feeds the detector, whatever
    ///   the policy, unless the policy prefetches itself
    ///   ([`Policy::has_prefetching`](crate::policy::Policy::has_prefetching), e.g. one wrapped
    ///   in [`WithPrefetch`](crate::policy::prefetch::WithPrefetch)): then the policy's
    ///   proposals replace the readahead, so nothing is read ahead twice. `pin_each`,
    ///   `ensure_cached` and `prefetch` already say what they want and keep many reads in
    ///   flight themselves: they do not trigger it.
    /// - [`Mapping::read`](crate::Mapping::read) (every mapping): a call that starts where an
    ///   earlier one ended continues a sequential stream, as `read(2)` on a file does, and
    ///   loads the stream's next window (twice the call's length, at least 128 KiB, doubling
    ///   up to 8 MiB or a quarter of the budget) on the IO threads before it waits for its own
    ///   range. A read that continues none (a first read too, even at offset 0) reads
    ///   nothing ahead.
    /// - Transparent mappings: with the default policy (which becomes `clock+readahead`); a
    ///   mapping given its own policy gets readahead by wrapping it:
    ///   `WithPrefetch::new(policy, ReadAhead::transparent_default(buffer_size))`.
    ///
    /// `readahead(false)` turns it off: each pin miss then reads its one buffer.
    pub fn readahead(mut self, on: bool) -> Self {
        self.readahead = on;
        self
    }
    /// Whether the readahead windows that misses propose are read by the missing thread
    /// before its miss returns (off by default: the cache's IO threads read them, while the
    /// program goes on).
    ///
    /// The IO threads overlap a window's reads with the program's work, which is what a
    /// device with latency (a disk, an object store) needs. Where the device is as fast as
    /// memory and the CPU is the limit (zram, a file already in the page cache), handing a
    /// window over costs wake-ups and switches between threads that compete for the same
    /// cores, and the program mostly waits for the window anyway. Reading it on the missing
    /// thread is what Linux does on such a device: its readahead submits the window from the
    /// faulting thread, and zram completes the read there. The window is read as one stream
    /// (one read and one install per run), as the IO threads read it.
    ///
    /// So it suits programs whose own threads keep every core busy: through the LD_PRELOAD
    /// shim, `rg -j2` on 2 cores ran faster with it, on zram and on a disk. A single-threaded
    /// scan loses the overlap: a `sqlite3` scan on a disk took 1.5× as long with it
    /// (docs/results/2026-11-27-night).
    ///
    /// Only readahead is affected: [`Mapping::prefetch`](crate::Mapping::prefetch) still runs
    /// on the IO threads. A transparent mapping's faults then also read the window on the
    /// thread that serves the fault (the faulting thread, or a handler thread with
    /// [`crate::FaultHandling::HandlerThreads`]).
    pub fn readahead_inline(mut self, on: bool) -> Self {
        self.readahead_inline = on;
        self
    }
    /// Whether a long sequential [`Mapping::read`](crate::Mapping::read) stream reads past the
    /// cache (on by default; it needs [`MapOptions::readahead`], whose streams find it).
    ///
    /// Once a stream of calls, each starting where the last ended, has read a quarter of the
    /// cache's budget, it is a scan: from then on, each of its calls of 128 KiB or more reads
    /// the buffers that are not resident from the store straight into the caller's memory
    /// (through a staging copy where the caller's memory or the range's ends do not suit an
    /// `O_DIRECT` store), and loads nothing into the cache; resident buffers are still copied
    /// from the cache. As PostgreSQL's ring strategy for sequential scans: a file read once
    /// from end to end no longer evicts what others use, and its bytes skip the cache's page
    /// lifecycle (a fresh page per miss, and a second copy), which made a cold scan through
    /// the cache run at about half the speed of `std::fs` wherever the CPU, not the device,
    /// was the limit. Counted in
    /// [`StatsSnapshot::bytes_read_past_cache`](crate::StatsSnapshot::bytes_read_past_cache).
    ///
    /// Only a buffer that is absent, with nothing loading, dirty, or being written back or
    /// evicted, is read past the cache, so a read sees every write that completed through the
    /// mapping before it began. The price: a file larger than a quarter of the budget that is
    /// read sequentially twice is read from the store twice. Keep it cached with
    /// `scan_bypass(false)`, or read it through pins or
    /// [`Mapping::ensure_cached`](crate::Mapping::ensure_cached), which a scan never bypasses.
    pub fn scan_bypass(mut self, on: bool) -> Self {
        self.scan_bypass = on;
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
    /// second loads. A share protects reuse only: an explicit mapping that nobody uses (no
    /// pin, read or miss) while the cache evicts half its budget is idle, and its buffers go
    /// before any active mapping's ([`ReservedShares`](crate::policy::ReservedShares) keeps
    /// weights as reservations).
    pub fn weight(mut self, weight: u32) -> Self {
        self.weight = weight;
        self
    }

    /// Where resident buffers live (default [`Placement::InPlace`]); see [`Placement`].
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use ucache::{Cache, CacheOptions, MapOptions, Placement, store::MemoryStore};
    /// let store = MemoryStore::new();
    /// store.insert("pages", (0..64 * 4096).map(|i| (i / 4096) as u8).collect());
    /// let cache = Cache::new(CacheOptions::new(4 << 20)).unwrap();
    /// let map = cache
    ///     .map(Arc::new(store), "pages", MapOptions::new().placement(Placement::Pool))
    ///     .unwrap();
    /// assert_eq!(map.pin_shared(9).unwrap()[0], 9);
    /// assert!(map.try_as_ptr().is_err(), "a pool mapping has no base address");
    /// ```
    pub fn placement(mut self, placement: Placement) -> Self {
        self.placement = placement;
        self
    }
    /// A hook that runs before every write-back of a dirty buffer, whatever asked for it
    /// (eviction, [`Mapping::writeback`](crate::Mapping::writeback), `msync`, `unmap`): see
    /// [`BeforeWriteback`](crate::BeforeWriteback). An error keeps the buffer dirty and is
    /// reported as that write's failure.
    pub fn before_writeback(mut self, hook: super::hooks::BeforeWriteback) -> Self {
        self.before_writeback = Some(hook);
        self
    }

    pub(crate) fn buffer_size_or_default(&self) -> usize {
        self.buffer_size
    }
}
