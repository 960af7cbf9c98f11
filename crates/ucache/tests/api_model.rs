//! A model-based property test of the public API: a random mapping configuration and a random
//! sequence of calls, valid and invalid, each checked against a reference model (the object's
//! bytes as a `Vec<u8>`, plus what `msync` must have made durable).
//!
//! Model decisions (from the code and its docs):
//! - A mapping covers `[offset, offset+len)` of the object; the last buffer may be partial.
//!   Guards and `read_optimistic` see only the mapping's bytes of it (`valid` bytes), and
//!   write-back writes only those: bytes past the mapping's end are never persisted.
//! - On a transparent mapping, plain loads of the last buffer past the mapping's end read what
//!   the load read from the object there (the object's bytes past the mapping, when the object
//!   is longer) or zeros (past the object's end, or past a short read that still covered the
//!   mapping's bytes). The model accepts, byte by byte, the object's initial byte or zero.
//! - A read-write mapping longer than its object grows it with zeros at `map`.
//! - Store contents between syncs are not modelled (eviction writes dirty buffers back at any
//!   time); after a successful `msync` every buffer overlapping its range holds the model's
//!   bytes in the store, and after `unmap` the whole object equals the model.
//! - Errors: range calls check `offset + len <= mapping length` (overflow included) and report
//!   `OutOfRange(Bounds::Range { offset, len, mapping_len })`; index calls report
//!   `OutOfRange(Bounds::Buffer { index, buffers })`; the cache's address calls report
//!   `OutOfRange(Bounds::Address { addr, len })`; `ensure_cached` of more distinct buffers than the budget holds is
//!   `BadLength`; `msync` reports a refused wait as `WritebackFailed { first: WouldDeadlock }`
//!   (as tests/msync.rs has it). A call refused by validation moves no hit or miss counter.
//!
//! Knobs for hunting: `API_MODEL_CASES`, `API_MODEL_OPS` (default 64 cases of up to 60 ops),
//! `API_MODEL_TRACE=1|2`. The bugs it found (2026-11-25) have regression tests of their own:
//! `bad_input::a_create_refused_for_its_length_creates_nothing`,
//! `aside_accounting::unmap_gives_back_the_set_aside_pool`,
//! `handler_threads::a_served_store_leaves_no_phantom_exclusive_pin` and
//! `transparent::readahead_never_evicts_the_buffer_its_fault_waits_for`.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use proptest::prelude::*;
use ucache::policy::{policy_by_name, Buffers, Layout, Policy, POLICY_NAMES};
use ucache::store::{FaultConfig, FaultStore, MemoryStore};
use ucache::{Bounds, Cache, CacheOptions, Error, FaultHandling, MapOptions, Mapping, Placement};

/// Bytes per chunk of a frame pool (2 MiB, or one buffer if larger).
const POOL_CHUNK: u64 = 2 << 20;

mod common;

const NAME: &str = "obj";

// ---------------------------------------------------------------------------------------------
// Configuration

#[derive(Debug, Clone)]
enum LenSel {
    /// No `len`: to the end of the object.
    Default,
    /// `len(k * 4096)`.
    Pages(u64),
    /// `len(1 + raw % (object bytes after the offset))`: any byte count that fits.
    Within(u64),
    /// `len(raw)` as given (invalid sizes: 0, overflowing).
    Raw(u64),
}

#[derive(Debug, Clone)]
struct Cfg {
    bs_shift: u32,
    obj_len: u64,
    /// The object does not exist before `map`.
    absent: bool,
    create: bool,
    off_pages: u64,
    misaligned: bool,
    len: LenSel,
    budget_bufs: u64,
    batch: usize,
    background: bool,
    transparent: bool,
    track: bool,
    readahead: bool,
    writable: bool,
    /// Transparent only: faults served by a handler thread instead of the faulting thread.
    handler_threads: bool,
    /// A second, read-only mapping in the same cache competes for the budget.
    neighbour: bool,
    /// The first `unmap` runs with the store's writes failing.
    end_fail: bool,
    /// `Placement::Pool`: buffers live in frames of the cache's pool.
    pool: bool,
    /// A pool mapping's budget gets a pool chunk on top of `budget_bufs` (else it is too
    /// small for one, and `map` refuses).
    pool_room: bool,
    /// A built-in policy by its index in `POLICY_NAMES`, refusing admission to buffers whose
    /// index is a multiple of the second number (0: admits all); `None`: the default.
    policy: Option<(usize, u64)>,
}

/// A built-in policy that refuses to admit some buffers: `read` goes around the cache for them
/// and `prefetch` drops them.
struct Picky {
    inner: Box<dyn Policy>,
    refuse_every: u64,
}

impl Policy for Picky {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn attach(&mut self, layout: Layout) {
        self.inner.attach(layout)
    }
    fn choose_eviction_buffers(&self, b: &Buffers<'_>, want: usize, out: &mut Vec<u64>) {
        self.inner.choose_eviction_buffers(b, want, out)
    }
    fn is_evictable(&self, i: u64) -> bool {
        self.inner.is_evictable(i)
    }
    fn admit(&self, i: u64) -> bool {
        (self.refuse_every == 0 || !i.is_multiple_of(self.refuse_every)) && self.inner.admit(i)
    }
    fn has_prefetching(&self) -> bool {
        self.inner.has_prefetching()
    }
    fn choose_prefetch_buffers(&self, i: u64, out: &mut Vec<u64>) {
        self.inner.choose_prefetch_buffers(i, out)
    }
    fn wants_hits(&self) -> bool {
        self.inner.wants_hits()
    }
    fn on_miss(&self, i: u64) {
        self.inner.on_miss(i)
    }
    fn on_hit(&self, i: u64) {
        self.inner.on_hit(i)
    }
    fn on_insert(&self, i: u64) {
        self.inner.on_insert(i)
    }
    fn on_evict(&self, i: u64) {
        self.inner.on_evict(i)
    }
}

fn cfg_strategy() -> impl Strategy<Value = Cfg> {
    let obj_len = prop_oneof![
        (1u64..=12).prop_map(|k| k * 4096),
        1u64..=12 * 16384,
        (1u64..=12, 1u64..4096).prop_map(|(k, r)| k * 4096 + r),
    ];
    let len = prop_oneof![
        4 => Just(LenSel::Default),
        4 => (1u64..=40).prop_map(LenSel::Pages),
        3 => any::<u64>().prop_map(LenSel::Within),
        1 => prop_oneof![Just(0u64), Just(u64::MAX), Just(u64::MAX - 4095)].prop_map(LenSel::Raw),
    ];
    (
        (
            12u32..=14,
            obj_len,
            prop::bool::weighted(0.06),
            prop::bool::weighted(0.1),
        ),
        (0u64..=2, prop::bool::weighted(0.04), len),
        (prop_oneof![2u64..=8, 8u64..=80], 1usize..=4, any::<bool>()),
        (
            any::<bool>(),
            any::<bool>(),
            any::<bool>(),
            prop::bool::weighted(0.6),
        ),
        prop::bool::weighted(0.85),
        (
            prop::bool::weighted(0.25),
            prop::bool::weighted(0.25),
            prop::bool::weighted(0.3),
        ),
        prop::option::weighted(
            0.4,
            (0..POLICY_NAMES.len(), prop_oneof![Just(0u64), 1u64..4]),
        ),
        (prop::bool::weighted(0.3), prop::bool::weighted(0.85)),
    )
        .prop_map(
            |(
                (bs_shift, obj_len, absent, create),
                (off_pages, misaligned, len),
                (budget_bufs, batch, background),
                (transparent, track, readahead, writable),
                sane,
                (handler_threads, neighbour, end_fail),
                policy,
                (pool, pool_room),
            )| {
                let mut c = Cfg {
                    bs_shift,
                    obj_len,
                    absent,
                    create,
                    off_pages,
                    misaligned,
                    len,
                    budget_bufs,
                    batch,
                    background,
                    transparent,
                    track: transparent && track,
                    readahead,
                    writable,
                    handler_threads: transparent && handler_threads,
                    neighbour,
                    end_fail,
                    policy,
                    pool,
                    pool_room,
                };
                if sane {
                    c.make_sane();
                }
                c
            },
        )
}

/// What `map` must answer for `cfg`: the mapping's length, or the error it refuses with.
#[derive(Debug)]
enum MapExpect {
    Ok {
        len: u64,
    },
    BadArgument,
    BadLength,
    NotFound,
    BeyondObject,
    /// A pool mapping asked for transparent access.
    NotInPlace,
    /// A pool mapping whose budget cannot hold one chunk of frames.
    PoolTooSmall,
}

impl Cfg {
    /// Turns a random configuration into one that `map` accepts (most cases), keeping its
    /// shape: the length stays default, a page count or a byte count.
    fn make_sane(&mut self) {
        self.misaligned = false;
        if self.pool {
            self.pool_room = true;
            self.transparent = false;
            self.track = false;
            self.handler_threads = false;
        }
        self.batch = self.batch.min(self.budget_bufs as usize);
        if self.create && !self.writable {
            self.create = false;
        }
        if self.absent && !self.create {
            self.absent = false;
        }
        if self.absent {
            self.len = LenSel::Pages(match self.len {
                LenSel::Pages(k) => k,
                LenSel::Within(r) | LenSel::Raw(r) => 1 + r % 40,
                LenSel::Default => 3,
            });
        }
        let obj = self.existing_len();
        if !self.absent && self.off_pages * 4096 >= obj {
            self.off_pages = 0;
        }
        let after = obj.saturating_sub(self.offset());
        if let LenSel::Raw(r) = self.len {
            self.len = LenSel::Within(r);
        }
        if self.writable {
            match self.len {
                LenSel::Default if !after.is_multiple_of(4096) => {
                    self.len = LenSel::Pages(after.div_ceil(4096))
                }
                LenSel::Within(r) => {
                    self.len = LenSel::Pages((1 + r % after.max(1)).div_ceil(4096))
                }
                _ => {}
            }
        } else if let LenSel::Pages(k) = self.len {
            if k * 4096 > after {
                self.len = LenSel::Within(k);
            }
        }
    }

    fn bs(&self) -> u64 {
        1 << self.bs_shift
    }
    /// The cache's budget: `budget_bufs` buffers, and a pool chunk more for a pool mapping
    /// given room for one.
    fn budget(&self) -> u64 {
        self.budget_bufs * self.bs()
            + if self.pool && self.pool_room {
                POOL_CHUNK
            } else {
                0
            }
    }
    fn offset(&self) -> u64 {
        self.off_pages * 4096 + if self.misaligned { 512 } else { 0 }
    }
    /// The object's length as `map` finds it (a created object is empty).
    fn existing_len(&self) -> u64 {
        if self.absent {
            0
        } else {
            self.obj_len
        }
    }
    fn len_option(&self) -> Option<u64> {
        let after = self.existing_len().saturating_sub(self.offset());
        match self.len {
            LenSel::Default => None,
            LenSel::Pages(k) => Some(k * 4096),
            LenSel::Within(raw) => Some(1 + raw % after.max(1)),
            LenSel::Raw(l) => Some(l),
        }
    }
    fn map_options(&self) -> MapOptions {
        let mut o = MapOptions::new()
            .buffer_size(self.bs() as usize)
            .offset(self.offset())
            .writable(self.writable)
            .create(self.create)
            .transparent(self.transparent)
            .track_access(self.track)
            .readahead(self.readahead)
            .placement(if self.pool {
                Placement::Pool
            } else {
                Placement::InPlace
            });
        if let Some((k, refuse_every)) = self.policy {
            o = o.policy(Box::new(Picky {
                inner: policy_by_name(POLICY_NAMES[k]).expect("a built-in policy"),
                refuse_every,
            }));
        }
        if self.handler_threads {
            o = o.fault_handling(FaultHandling::HandlerThreads(1));
        }
        if let Some(l) = self.len_option() {
            o = o.len(l);
        }
        o
    }
    /// `MappingCore::new`'s checks, in its order, as its docs state them.
    fn expect(&self) -> MapExpect {
        if self.pool && self.transparent {
            return MapExpect::NotInPlace;
        }
        if self.pool && self.budget() < POOL_CHUNK.max(self.bs()) {
            return MapExpect::PoolTooSmall;
        }
        let offset = self.offset();
        if !offset.is_multiple_of(4096) {
            return MapExpect::BadArgument;
        }
        if self.create && !self.writable {
            return MapExpect::BadArgument;
        }
        let len = self.len_option();
        // A given length is checked before the store is asked (nothing is created for a
        // mapping refused for it).
        if let Some(l) = len {
            let overflows = offset.checked_add(l).is_none()
                || l.div_ceil(self.bs())
                    .checked_mul(self.bs())
                    .and_then(|b| b.checked_add(self.bs()))
                    .is_none();
            if l == 0 || overflows || (self.writable && !l.is_multiple_of(4096)) {
                return MapExpect::BadLength;
            }
        }
        if self.absent && !self.create {
            return MapExpect::NotFound;
        }
        let obj_len = self.existing_len();
        let len = match len {
            Some(l) => l,
            None if obj_len > offset => obj_len - offset,
            None => return MapExpect::BadLength,
        };
        let Some(end) = offset.checked_add(len) else {
            return MapExpect::BadLength;
        };
        if self.writable {
            if !len.is_multiple_of(4096) {
                return MapExpect::BadLength;
            }
        } else if end > obj_len {
            return MapExpect::BeyondObject;
        }
        // The buffers' bytes, plus the alignment padding of the reservation, must fit.
        let bytes = len.div_ceil(self.bs()).checked_mul(self.bs());
        if bytes.and_then(|b| b.checked_add(self.bs())).is_none() {
            return MapExpect::BadLength;
        }
        // Sizes that do not overflow but exceed the address space are not generated.
        assert!(len < 1 << 40, "generator made an unmappable length {len}");
        MapExpect::Ok { len }
    }
}

fn initial_bytes(n: u64, seed: u64) -> Vec<u8> {
    (0..n)
        .map(|k| {
            let x = (k ^ seed.rotate_left(17)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
            (x >> 56) as u8 | 1 // never zero, so zeros where bytes belong stand out
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Operations

/// A byte range chosen relative to the mapping's length, resolved when the op runs.
#[derive(Debug, Clone, Copy)]
enum Rg {
    /// A non-empty range inside the mapping (at most three buffers long).
    In(u64, u64),
    /// Exactly buffer `raw % buffers`.
    Buf(u64),
    /// The whole mapping.
    All,
    /// An empty range at an offset within `[0, len]`: valid.
    Zero(u64),
    /// Starts inside, ends past the mapping's end.
    PastEnd(u64, u64),
    /// Starts past the end (empty or not).
    Beyond(u64),
    /// `offset = u64::MAX - small`, a non-zero length: overflows.
    OverflowOff(u64),
    /// A valid offset and a length near `u64::MAX`: overflows.
    OverflowLen(u64),
}

#[derive(Debug, Clone, Copy)]
enum Ix {
    In(u64),
    Out(u64),
    Max,
}

/// A write into one buffer: `n` bytes of `byte` from `pos` (both resolved into the buffer's
/// valid bytes).
#[derive(Debug, Clone, Copy)]
struct Wr {
    pos: u64,
    n: u64,
    byte: u8,
}

/// What to do while holding an exclusive pin of buffer `i`.
#[derive(Debug, Clone, Copy)]
enum Nested {
    PinSharedSame,
    PinExclusiveSame,
    OptimisticSame,
    ReadSame,
    PinEachSame,
    LandingSame,
    MsyncAll,
    EvictAll,
    EnsureSame,
    PinSharedOther(u64),
    WritebackAll,
    PrefetchAll,
    /// Transparent mappings: a plain store into the held buffer (the holder's own).
    PlainStoreSame(u8),
    /// Transparent mappings: a plain store into, or a load of, another buffer.
    PlainStoreOther(u64, u8),
    PlainLoadOther(u64),
}

#[derive(Debug, Clone, Copy)]
enum AddrOp {
    EnsureCached,
    Prefetch,
    Evict,
    Writeback,
    Msync,
}

#[derive(Debug, Clone, Copy)]
enum FailKind {
    Msync,
    Writeback,
    Evict,
}

#[derive(Debug, Clone, Copy)]
enum ReadKind {
    Pin(Ix),
    Read(Rg),
    Ensure(Rg),
    PinEach(u64, u64),
    Landing(u64, u64),
    Prefetch(Rg),
}

#[derive(Debug, Clone)]
enum Op {
    PinShared(Ix),
    PinExclusive(Ix, Option<Wr>, bool),
    Hold(u64, Wr, Nested),
    Optimistic(Ix),
    Read(Rg),
    Ensure(Rg),
    EnsureBuffers(Vec<Ix>),
    PinEach(Vec<Ix>, usize),
    /// `Mapping::landing(list, depth)`, consuming at most `take` items, then dropped.
    Landing(Vec<Ix>, usize, usize),
    Prefetch(Rg),
    PrefetchBuffers(Vec<Ix>),
    Evict(Rg),
    Writeback(Rg),
    Msync(Rg),
    Load(Rg),
    Store(Rg, u8),
    TailLoad,
    /// Plain stores into the last buffer past the mapping's end: `(from, n, byte)`.
    TailStore(u64, u64, u8),
    Addr(AddrOp, Rg),
    FailWrites(FailKind, Rg),
    FailReads(bool, ReadKind),
    FailSync(Rg),
    /// Pins buffer `raw % 32` of the neighbour mapping (if any).
    Neighbour(u64),
    /// `Mapping::write` of `byte` over the range.
    Write(Rg, u8),
    /// `is_resident` of a buffer (only its refusal past the end is predictable).
    IsResident(Ix),
    EvictBuffers(Vec<Ix>),
    WritebackBuffers(Vec<Ix>),
    MsyncBuffers(Vec<Ix>),
    /// A typed read at byte `pos % (valid - 3)` of a buffer through a shared pin and an
    /// optimistic view, or (with a value, on a writable mapping) a typed write through an
    /// exclusive pin.
    Typed(Ix, u64, Option<u32>),
    /// A typed slice over a transparent mapping: the range read through `as_slice` (read-only)
    /// or `byte` stored over it through `as_mut_slice` (writable).
    Slice(Rg, u8),
}

fn rg() -> impl Strategy<Value = Rg> {
    prop_oneof![
        6 => (any::<u64>(), any::<u64>()).prop_map(|(a, b)| Rg::In(a, b)),
        4 => any::<u64>().prop_map(Rg::Buf),
        2 => Just(Rg::All),
        1 => any::<u64>().prop_map(Rg::Zero),
        1 => (any::<u64>(), any::<u64>()).prop_map(|(a, b)| Rg::PastEnd(a, b)),
        1 => any::<u64>().prop_map(Rg::Beyond),
        1 => (0u64..8192).prop_map(Rg::OverflowOff),
        1 => any::<u64>().prop_map(Rg::OverflowLen),
    ]
}

fn valid_rg() -> impl Strategy<Value = Rg> {
    prop_oneof![
        3 => (any::<u64>(), any::<u64>()).prop_map(|(a, b)| Rg::In(a, b)),
        2 => any::<u64>().prop_map(Rg::Buf),
        1 => Just(Rg::All),
    ]
}

fn ix() -> impl Strategy<Value = Ix> {
    prop_oneof![
        10 => any::<u64>().prop_map(Ix::In),
        1 => (0u64..3).prop_map(Ix::Out),
        1 => Just(Ix::Max),
    ]
}

fn wr() -> impl Strategy<Value = Wr> {
    (any::<u64>(), any::<u64>(), any::<u8>()).prop_map(|(pos, n, byte)| Wr { pos, n, byte })
}

fn nested() -> impl Strategy<Value = Nested> {
    prop_oneof![
        Just(Nested::PinSharedSame),
        Just(Nested::PinExclusiveSame),
        Just(Nested::OptimisticSame),
        Just(Nested::ReadSame),
        Just(Nested::PinEachSame),
        Just(Nested::LandingSame),
        Just(Nested::MsyncAll),
        Just(Nested::EvictAll),
        Just(Nested::EnsureSame),
        any::<u64>().prop_map(Nested::PinSharedOther),
        Just(Nested::WritebackAll),
        Just(Nested::PrefetchAll),
        any::<u8>().prop_map(Nested::PlainStoreSame),
        (any::<u64>(), any::<u8>()).prop_map(|(j, b)| Nested::PlainStoreOther(j, b)),
        any::<u64>().prop_map(Nested::PlainLoadOther),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let addr_op = prop_oneof![
        Just(AddrOp::EnsureCached),
        Just(AddrOp::Prefetch),
        Just(AddrOp::Evict),
        Just(AddrOp::Writeback),
        Just(AddrOp::Msync),
    ];
    let fail_kind = prop_oneof![
        Just(FailKind::Msync),
        Just(FailKind::Writeback),
        Just(FailKind::Evict)
    ];
    let read_kind = prop_oneof![
        ix().prop_map(ReadKind::Pin),
        rg().prop_map(ReadKind::Read),
        rg().prop_map(ReadKind::Ensure),
        (any::<u64>(), any::<u64>()).prop_map(|(a, b)| ReadKind::PinEach(a, b)),
        (any::<u64>(), any::<u64>()).prop_map(|(a, b)| ReadKind::Landing(a, b)),
        rg().prop_map(ReadKind::Prefetch),
    ];
    prop_oneof![
        6 => ix().prop_map(Op::PinShared),
        8 => (ix(), prop::option::weighted(0.9, wr()), any::<bool>())
            .prop_map(|(i, w, raw)| Op::PinExclusive(i, w, raw)),
        3 => (any::<u64>(), wr(), nested()).prop_map(|(i, w, n)| Op::Hold(i, w, n)),
        3 => ix().prop_map(Op::Optimistic),
        5 => rg().prop_map(Op::Read),
        3 => rg().prop_map(Op::Ensure),
        2 => prop::collection::vec(ix(), 0..6).prop_map(Op::EnsureBuffers),
        3 => (prop::collection::vec(ix(), 0..8), 0usize..5).prop_map(|(v, d)| Op::PinEach(v, d)),
        3 => (prop::collection::vec(ix(), 0..10), 0usize..5, 0usize..12)
            .prop_map(|(v, d, t)| Op::Landing(v, d, t)),
        2 => rg().prop_map(Op::Prefetch),
        1 => prop::collection::vec(ix(), 0..6).prop_map(Op::PrefetchBuffers),
        3 => rg().prop_map(Op::Evict),
        2 => rg().prop_map(Op::Writeback),
        4 => rg().prop_map(Op::Msync),
        4 => valid_rg().prop_map(Op::Load),
        5 => (valid_rg(), any::<u8>()).prop_map(|(r, b)| Op::Store(r, b)),
        1 => Just(Op::TailLoad),
        1 => (any::<u64>(), any::<u64>(), any::<u8>()).prop_map(|(a, n, b)| Op::TailStore(a, n, b)),
        3 => (addr_op, rg()).prop_map(|(o, r)| Op::Addr(o, r)),
        4 => (fail_kind, rg()).prop_map(|(k, r)| Op::FailWrites(k, r)),
        3 => (any::<bool>(), read_kind).prop_map(|(s, k)| Op::FailReads(s, k)),
        1 => rg().prop_map(Op::FailSync),
        3 => any::<u64>().prop_map(Op::Neighbour),
        4 => (rg(), any::<u8>()).prop_map(|(r, b)| Op::Write(r, b)),
        2 => ix().prop_map(Op::IsResident),
        2 => prop::collection::vec(ix(), 0..6).prop_map(Op::EvictBuffers),
        1 => prop::collection::vec(ix(), 0..6).prop_map(Op::WritebackBuffers),
        2 => prop::collection::vec(ix(), 0..6).prop_map(Op::MsyncBuffers),
        3 => (ix(), any::<u64>(), prop::option::of(any::<u32>()))
            .prop_map(|(i, p, v)| Op::Typed(i, p, v)),
        3 => (valid_rg(), any::<u8>()).prop_map(|(r, b)| Op::Slice(r, b)),
    ]
}

// ---------------------------------------------------------------------------------------------
// The harness: the system under test and the model side by side

struct Harness {
    cache: Cache,
    m: Mapping,
    mem: MemoryStore,
    faults: Arc<FaultConfig>,
    /// The object's bytes as they must be once everything is written back.
    obj: Vec<u8>,
    /// The object's bytes when mapped, past the mapping's end (for tail loads).
    beyond: Vec<u8>,
    offset: u64,
    len: u64,
    bs: u64,
    nbuf: u64,
    budget: u64,
    writable: bool,
    transparent: bool,
    /// A pool mapping: no addresses, and its budget held in chunks.
    pool: bool,
    log: Vec<String>,
    neighbour: Option<Mapping>,
    /// Bytes stored past the mapping's end in its last buffer, per byte (they may read back
    /// until the buffer is evicted, and are never written back).
    tail_stored: Vec<Vec<u8>>,
    tracked: bool,
    /// The whole mapping fits the budget and nothing else competes: nothing is evicted
    /// unless asked.
    fits: bool,
    end_fail: bool,
}

const NEIGHBOUR_BUFS: u64 = 32;

impl Harness {
    fn valid(&self, i: u64) -> u64 {
        (self.len - i * self.bs).min(self.bs)
    }
    fn view(&self, off: u64, n: u64) -> &[u8] {
        let s = (self.offset + off) as usize;
        &self.obj[s..s + n as usize]
    }
    fn view_mut(&mut self, off: u64, n: u64) -> &mut [u8] {
        let s = (self.offset + off) as usize;
        &mut self.obj[s..s + n as usize]
    }
    fn buf_view(&self, i: u64) -> &[u8] {
        self.view(i * self.bs, self.valid(i))
    }

    fn range(&self, r: Rg) -> (u64, u64) {
        let len = self.len;
        let bs = self.bs;
        match r {
            Rg::In(a, b) => {
                let off = a % len;
                (off, 1 + b % (len - off).min(3 * bs))
            }
            Rg::Buf(a) => {
                let i = a % self.nbuf;
                (i * bs, self.valid(i))
            }
            Rg::All => (0, len),
            Rg::Zero(a) => (a % (len + 1), 0),
            Rg::PastEnd(a, b) => {
                let off = a % (len + 1);
                (off, len - off + 1 + b % bs)
            }
            Rg::Beyond(a) => (len + 1 + a % bs, a % 3),
            Rg::OverflowOff(k) => (u64::MAX - k, 1 + k + (k & 1) * 4096),
            Rg::OverflowLen(a) => (1 + a % len, u64::MAX - (a & 1)),
        }
    }
    fn in_range(&self, (off, n): (u64, u64)) -> bool {
        off.checked_add(n).is_some_and(|e| e <= self.len)
    }
    fn buffers_of(&self, (off, n): (u64, u64)) -> std::ops::Range<u64> {
        if n == 0 {
            return 0..0;
        }
        off / self.bs..(off + n - 1) / self.bs + 1
    }
    fn index(&self, x: Ix) -> u64 {
        match x {
            Ix::In(a) => a % self.nbuf,
            Ix::Out(k) => self.nbuf + k,
            Ix::Max => u64::MAX,
        }
    }
    /// Whether `e` is the `OutOfRange` of a range call for `(off, n)`: the range asked for and
    /// the mapping's length.
    fn oor_range(&self, e: &Error, off: u64, n: u64) -> bool {
        let want = Bounds::Range {
            offset: off,
            len: n,
            mapping_len: self.len,
        };
        matches!(e, Error::OutOfRange(b) if *b == want)
    }
    /// Whether `e` is the `OutOfRange` of an index call for buffer `i`: the index and the
    /// buffer count.
    fn oor_index(&self, e: &Error, i: u64) -> bool {
        let want = Bounds::Buffer {
            index: i,
            buffers: self.nbuf,
        };
        matches!(e, Error::OutOfRange(b) if *b == want)
    }
    /// Whether `e` is the `OutOfRange` of an index-list call: the first index past the end.
    fn oor_list(&self, e: &Error, idx: &[u64]) -> bool {
        idx.iter()
            .find(|&&i| i >= self.nbuf)
            .is_some_and(|&i| self.oor_index(e, i))
    }

    fn budget_bufs(&self) -> u64 {
        self.budget / self.bs
    }

    fn invariants(&self, what: &str) {
        // The mapping's own counters are its share of the cache's: all of the demand
        // counters (only this thread moves them) when it is alone, at most them otherwise.
        let (mine, all) = (self.m.stats(), self.cache.stats());
        let (mine, all) = ((mine.hits, mine.misses), (all.hits, all.misses));
        if self.neighbour.is_none() {
            assert_eq!(
                mine, all,
                "{what}: the mapping's hits and misses are the cache's"
            );
        } else {
            assert!(
                mine.0 <= all.0 && mine.1 <= all.1,
                "{what}: {mine:?} > {all:?}"
            );
        }
        let used = self.cache.used();
        assert!(
            used <= self.budget,
            "{what}: used {used} > budget {}",
            self.budget
        );
        assert!(self.m.resident() <= self.nbuf, "{what}: resident > buffers");
        let r = self.m.state(self.nbuf);
        assert!(
            matches!(r, Err(Error::OutOfRange(Bounds::Buffer { index, buffers }))
                if index == self.nbuf && buffers == self.nbuf),
            "{what}: a state past the end: {r:?}"
        );
        if !self.tracked {
            // Every byte in use is a resident buffer's (IO threads and the evictor may be
            // between their two counters for a moment).
            // A pool holds whole chunks, whatever of them its buffers use.
            let pool = self.cache.pool_bytes();
            let expected = || {
                let mine = if self.pool {
                    pool
                } else {
                    self.m.resident() * self.bs
                };
                // Kept readahead markers' slots are held for as long as the mapping is.
                mine + self.m.reserved_bytes()
                    + self
                        .neighbour
                        .as_ref()
                        .map_or(0, |n| n.resident() * 4096 + n.reserved_bytes())
            };
            assert!(
                self.m.resident() * self.bs <= pool || !self.pool,
                "{what}: a pool mapping's buffers outgrew its pool"
            );
            // Waited for up to `HANG`: a thread descheduled between its two counters on a
            // loaded host once outlasted a bound of 2000 short sleeps. A leak never settles.
            common::until(
                &format!("{what}: used to match the resident buffers"),
                || self.cache.used() == expected(),
                || (self.cache.used(), expected()),
            );
        }
    }

    /// The store holds the model's bytes for every buffer overlapping `r`.
    fn check_store(&self, r: (u64, u64), what: &str) {
        let store = self.mem.get(NAME).expect("object exists");
        for i in self.buffers_of(r) {
            let s = (self.offset + i * self.bs) as usize;
            let e = s + self.valid(i) as usize;
            assert!(
                store.len() >= e,
                "{what}: store is {} bytes, buffer {i} ends at {e}",
                store.len()
            );
            if store[s..e] != self.obj[s..e] {
                let k = (s..e).find(|&k| store[k] != self.obj[k]).unwrap();
                panic!(
                    "{what}: after a successful msync the store differs in buffer {i} at object \
                     byte {k}: store {} model {}",
                    store[k], self.obj[k]
                );
            }
        }
    }

    fn check_bytes(&self, got: &[u8], off: u64, what: &str) {
        let want = self.view(off, got.len() as u64);
        if got != want {
            let k = (0..got.len()).find(|&k| got[k] != want[k]).unwrap();
            panic!(
                "{what}: mapping byte {} reads {} but the model has {} ({} bytes from {off})",
                off + k as u64,
                got[k],
                want[k],
                got.len()
            );
        }
    }

    /// Counters only this thread moves: a call refused by validation must not move them.
    /// A call over a byte range (`prefetch`, `evict`, `writeback`, `msync`): within the mapping
    /// it succeeds; past it (or overflowing) it is refused with `OutOfRange` naming the range,
    /// and changes nothing. Returns the range when the call ran.
    fn range_call(
        &mut self,
        rg: Rg,
        what: &str,
        call: impl FnOnce(&Mapping, u64, u64) -> Result<(), Error>,
    ) -> Option<(u64, u64)> {
        let (off, n) = self.range(rg);
        let before = self.demand_counters();
        let r = call(&self.m, off, n);
        if self.in_range((off, n)) {
            r.unwrap_or_else(|e| panic!("{what}: {e:?}"));
            Some((off, n))
        } else {
            self.expect_refused(&r, before, |e| self.oor_range(e, off, n), what);
            None
        }
    }

    /// A call on buffer `i` past the last one: refused with `OutOfRange` naming that buffer's
    /// address and size, changing nothing.
    fn expect_index_refused<T: Debug>(
        &self,
        r: &Result<T, Error>,
        before: (u64, u64),
        i: u64,
        what: &str,
    ) {
        self.expect_refused(r, before, |e| self.oor_index(e, i), what);
    }

    fn demand_counters(&self) -> (u64, u64) {
        let s = self.cache.stats();
        (s.hits, s.misses)
    }

    fn expect_refused<T: Debug>(
        &self,
        r: &Result<T, Error>,
        before: (u64, u64),
        ok_variant: impl Fn(&Error) -> bool,
        what: &str,
    ) {
        match r {
            Err(e) if ok_variant(e) => {}
            other => panic!("{what}: expected a refusal, got {other:?}"),
        }
        assert_eq!(
            self.demand_counters(),
            before,
            "{what}: a refused call loaded or pinned buffers"
        );
    }

    fn write(&self, i: u64, w: Wr) -> (u64, u64, u8) {
        let valid = self.valid(i);
        let pos = w.pos % valid;
        let n = 1 + w.n % (valid - pos);
        (pos, n, w.byte)
    }

    fn run(&mut self, op: &Op) {
        let what = format!("{op:?}");
        self.log.push(what.clone());
        match op {
            Op::PinShared(x) => {
                let i = self.index(*x);
                let before = self.demand_counters();
                let r = self.m.pin_shared(i);
                if i >= self.nbuf {
                    self.expect_index_refused(&r, before, i, &what);
                } else {
                    let g = r.unwrap_or_else(|e| panic!("{what}: {e:?}"));
                    assert_eq!(g.len() as u64, self.valid(i), "{what}: guard length");
                    self.check_bytes(&g, i * self.bs, &what);
                    assert!(
                        self.m.is_resident(i).unwrap(),
                        "{what}: a pinned buffer is resident"
                    );
                }
            }
            Op::PinExclusive(x, w, raw) => {
                let i = self.index(*x);
                let before = self.demand_counters();
                let r = self.m.pin_exclusive(i);
                if i >= self.nbuf {
                    self.expect_index_refused(&r, before, i, &what);
                    return;
                }
                if !self.writable {
                    self.expect_refused(&r, before, |e| matches!(e, Error::ReadOnly), &what);
                    return;
                }
                let mut g = r.unwrap_or_else(|e| panic!("{what}: {e:?}"));
                assert_eq!(g.len() as u64, self.valid(i), "{what}: guard length");
                self.check_bytes(&g, i * self.bs, &what);
                if let Some(w) = w {
                    let (pos, n, byte) = self.write(i, *w);
                    if *raw {
                        let p = g.as_mut_ptr();
                        // SAFETY: inside the buffer's valid bytes, under the exclusive pin.
                        unsafe { std::ptr::write_bytes(p.add(pos as usize), byte, n as usize) };
                        g.mark_dirty();
                    } else {
                        g[pos as usize..(pos + n) as usize].fill(byte);
                    }
                    drop(g);
                    self.view_mut(i * self.bs + pos, n).fill(byte);
                }
            }
            Op::Hold(a, w, nested) => self.hold(*a, *w, *nested, &what),
            Op::Optimistic(x) => {
                let i = self.index(*x);
                let before = self.demand_counters();
                let r = self.m.read_optimistic(i, |v| {
                    let mut out = vec![0u8; v.len()];
                    v.copy_to(0, &mut out);
                    out
                });
                if i >= self.nbuf {
                    self.expect_index_refused(&r, before, i, &what);
                } else {
                    let got = r.unwrap_or_else(|e| panic!("{what}: {e:?}"));
                    assert_eq!(got.len() as u64, self.valid(i), "{what}: view length");
                    self.check_bytes(&got, i * self.bs, &what);
                }
            }
            Op::Read(rg) => {
                let (off, n) = self.range(*rg);
                if self.in_range((off, n)) {
                    let mut buf = vec![0u8; n as usize];
                    let r = self.m.read(off, &mut buf);
                    r.unwrap_or_else(|e| panic!("{what} ({off}, {n}): {e:?}"));
                    self.check_bytes(&buf, off, &what);
                } else if n <= 1 << 22 {
                    // Overflowing lengths cannot be allocated; the others are refused whole.
                    let mut buf = vec![0u8; n as usize];
                    let before = self.demand_counters();
                    let r = self.m.read(off, &mut buf);
                    self.expect_refused(
                        &r,
                        before,
                        |e| self.oor_range(e, off, n),
                        &format!("{what} ({off}, {n})"),
                    );
                }
            }
            Op::Ensure(rg) => {
                let (off, n) = self.range(*rg);
                let before = self.demand_counters();
                let r = self.m.ensure_cached(off, n);
                self.expect_ensure(r, (off, n), before, &what);
            }
            Op::EnsureBuffers(v) => {
                let idx: Vec<u64> = v.iter().map(|&x| self.index(x)).collect();
                let before = self.demand_counters();
                let r = self.m.ensure_cached_buffers(&idx);
                let mut distinct = idx.clone();
                distinct.sort_unstable();
                distinct.dedup();
                if idx.iter().any(|&i| i >= self.nbuf) {
                    self.expect_refused(&r, before, |e| self.oor_list(e, &idx), &what);
                } else if distinct.len() as u64 > self.budget_bufs() {
                    self.expect_refused(&r, before, is_bad_length, &what);
                } else {
                    r.unwrap_or_else(|e| panic!("{what}: {e:?}"));
                }
            }
            Op::PinEach(v, depth) => {
                let idx: Vec<u64> = v.iter().map(|&x| self.index(x)).collect();
                self.pin_each(&idx, *depth, false, &what);
            }
            Op::Landing(v, depth, take) => {
                let idx: Vec<u64> = v.iter().map(|&x| self.index(x)).collect();
                self.landing(&idx, *depth, *take, false, &what);
            }
            Op::Prefetch(rg) => {
                self.range_call(*rg, &what, |m, off, n| m.prefetch(off, n));
            }
            Op::PrefetchBuffers(v) => {
                let idx: Vec<u64> = v.iter().map(|&x| self.index(x)).collect();
                let before = self.demand_counters();
                let r = self.m.prefetch_buffers(&idx);
                if idx.iter().any(|&i| i >= self.nbuf) {
                    self.expect_refused(&r, before, |e| self.oor_list(e, &idx), &what);
                } else {
                    r.unwrap_or_else(|e| panic!("{what}: {e:?}"));
                }
            }
            Op::Evict(rg) => {
                self.range_call(*rg, &what, |m, off, n| m.evict(off, n));
            }
            Op::Writeback(rg) => {
                self.range_call(*rg, &what, |m, off, n| m.writeback(off, n));
            }
            Op::Msync(rg) => {
                if let Some(done) = self.range_call(*rg, &what, |m, off, n| m.msync(off, n)) {
                    self.check_store(done, &what);
                }
            }
            Op::Load(rg) => {
                if !self.transparent {
                    return;
                }
                let (off, n) = self.range(*rg);
                let got = self.plain_load(off, n);
                self.check_bytes(&got, off, &what);
            }
            Op::Store(rg, byte) => {
                if !self.transparent || !self.writable {
                    return;
                }
                let (off, n) = self.range(*rg);
                let p = self.m.as_mut_ptr();
                watched(|| {
                    for k in off..off + n {
                        // SAFETY: inside a writable transparent mapping; stores fault into
                        // ucache.
                        unsafe { std::ptr::write_volatile(p.add(k as usize), *byte) };
                    }
                });
                self.view_mut(off, n).fill(*byte);
            }
            Op::TailStore(a, n, byte) => {
                let tail = self.nbuf * self.bs - self.len;
                if !self.transparent || !self.writable || tail == 0 {
                    return;
                }
                let from = a % tail;
                let n = 1 + n % (tail - from);
                let p = self.m.as_mut_ptr();
                let len = self.len;
                watched(|| {
                    for k in from..from + n {
                        // SAFETY: inside the last buffer of a writable transparent mapping.
                        unsafe { std::ptr::write_volatile(p.add((len + k) as usize), *byte) };
                    }
                });
                for k in from..from + n {
                    self.tail_stored[k as usize].push(*byte);
                }
            }
            Op::TailLoad => {
                if !self.transparent {
                    return;
                }
                let end = self.nbuf * self.bs;
                let got = self.plain_load(self.len, end - self.len);
                for (k, &b) in got.iter().enumerate() {
                    assert!(
                        b == 0 || b == self.beyond[k] || self.tail_stored[k].contains(&b),
                        "{what}: tail byte {} (mapping offset {}) reads {b}, neither 0 nor the \
                         object's {}",
                        k,
                        self.len + k as u64,
                        self.beyond[k]
                    );
                }
            }
            Op::Addr(o, rg) => self.addr_op(*o, *rg, &what),
            Op::Neighbour(a) => {
                if let Some(nb) = &self.neighbour {
                    let i = a % NEIGHBOUR_BUFS;
                    let g = nb.pin_shared(i).unwrap_or_else(|e| panic!("{what}: {e:?}"));
                    assert!(g.iter().all(|&b| b == i as u8), "{what}: neighbour bytes");
                }
            }
            Op::Write(rg, byte) => self.write_op(*rg, *byte, &what),
            Op::IsResident(x) => {
                let i = self.index(*x);
                let r = self.m.is_resident(i);
                if i >= self.nbuf {
                    self.expect_index_refused(&r, self.demand_counters(), i, &what);
                } else {
                    r.unwrap_or_else(|e| panic!("{what}: {e:?}"));
                }
            }
            Op::EvictBuffers(v) | Op::WritebackBuffers(v) | Op::MsyncBuffers(v) => {
                let idx: Vec<u64> = v.iter().map(|&x| self.index(x)).collect();
                let before = self.demand_counters();
                let r = match op {
                    Op::EvictBuffers(_) => self.m.evict_buffers(&idx),
                    Op::WritebackBuffers(_) => self.m.writeback_buffers(&idx),
                    _ => self.m.msync_buffers(&idx),
                };
                if idx.iter().any(|&i| i >= self.nbuf) {
                    self.expect_refused(&r, before, |e| self.oor_list(e, &idx), &what);
                    return;
                }
                r.unwrap_or_else(|e| panic!("{what}: {e:?}"));
                if let Op::MsyncBuffers(_) = op {
                    for &i in &idx {
                        self.check_store((i * self.bs, self.valid(i)), &what);
                    }
                }
            }
            Op::Typed(x, pos, value) => self.typed(*x, *pos, *value, &what),
            Op::Slice(rg, byte) => self.slice(*rg, *byte, &what),
            Op::FailWrites(k, rg) => self.fail_writes(*k, *rg, &what),
            Op::FailReads(short, k) => self.fail_reads(*short, *k, &what),
            Op::FailSync(rg) => {
                let (off, n) = self.range(*rg);
                self.faults.fail_sync.store(true, Relaxed);
                let r = self.m.msync(off, n);
                self.faults.fail_sync.store(false, Relaxed);
                if !self.in_range((off, n)) {
                    assert!(matches!(r, Err(Error::OutOfRange { .. })), "{what}: {r:?}");
                } else if !self.writable {
                    // A read-only mapping has nothing to write and does not sync.
                    assert!(r.is_ok(), "{what}: {r:?}");
                } else {
                    assert!(
                        matches!(&r, Err(Error::Io { op: "sync", .. })),
                        "{what}: a failing sync must fail msync: {r:?}"
                    );
                    // Had eviction or `writeback` written buffers since the last good sync,
                    // the mapping is poisoned now (tests/sync_failure.rs). This store loses
                    // nothing on a failed sync, so the application here accepts and clears.
                    self.m.clear_sync_failure();
                }
            }
        }
        self.invariants(&what);
    }

    fn expect_ensure(&self, r: Result<(), Error>, rg: (u64, u64), before: (u64, u64), what: &str) {
        if !self.in_range(rg) {
            let (off, n) = rg;
            self.expect_refused(&r, before, |e| self.oor_range(e, off, n), what);
        } else if self.buffers_of(rg).count() as u64 > self.budget_bufs() {
            let bytes = self.buffers_of(rg).count() as u64 * self.bs;
            self.expect_refused(
                &r,
                before,
                |e| matches!(e, Error::BadLength { len, .. } if *len == bytes),
                what,
            );
        } else {
            r.unwrap_or_else(|e| panic!("{what} {rg:?}: {e:?}"));
            if self.fits {
                for i in self.buffers_of(rg) {
                    let w = self.m.state(i).unwrap();
                    assert!(
                        format!("{w:?}").starts_with("Cached"),
                        "{what}: buffer {i} not resident after ensure_cached though the whole \
                         mapping fits the budget: {w:?}"
                    );
                }
            }
        }
    }

    fn plain_load(&self, off: u64, n: u64) -> Vec<u8> {
        let p = self.m.as_ptr();
        watched(|| {
            (off..off + n)
                // SAFETY: inside the transparent mapping's region; loads fault into ucache.
                .map(|k| unsafe { std::ptr::read_volatile(p.add(k as usize)) })
                .collect()
        })
    }

    /// `pin_each` over `idx`: returns the visits (index, bytes matched) and checks the result.
    /// `tolerate_io`: reads may fail (the store's reads are switched off).
    fn pin_each(&self, idx: &[u64], depth: usize, tolerate_io: bool, what: &str) {
        let mut visits: Vec<u64> = Vec::new();
        let mut bad: Option<String> = None;
        let before = self.demand_counters();
        let r = self.m.pin_each(idx.iter().copied(), depth, |i, bytes| {
            visits.push(i);
            if bad.is_none() {
                if i >= self.nbuf || bytes.len() as u64 != self.valid(i) {
                    bad = Some(format!("visited {i} with {} bytes", bytes.len()));
                } else if bytes != self.buf_view(i) {
                    bad = Some(format!("buffer {i} differs from the model"));
                }
            }
        });
        if let Some(b) = bad {
            panic!("{what}: {b}");
        }
        let mut want: BTreeMap<u64, usize> = BTreeMap::new();
        idx.iter().for_each(|&i| *want.entry(i).or_default() += 1);
        let mut got: BTreeMap<u64, usize> = BTreeMap::new();
        visits.iter().for_each(|&i| *got.entry(i).or_default() += 1);
        for (i, n) in &got {
            assert!(
                want.get(i).is_some_and(|w| w >= n),
                "{what}: visited {i} {n} times, asked {:?}",
                want.get(i)
            );
        }
        if depth == 0 {
            self.expect_refused(&r, before, |e| matches!(e, Error::BadArgument(_)), what);
            assert!(visits.is_empty(), "{what}: depth 0 visited buffers");
        } else if idx.iter().any(|&i| i >= self.nbuf) {
            assert!(matches!(r, Err(Error::OutOfRange { .. })), "{what}: {r:?}");
        } else if let (true, Err(e)) = (tolerate_io, &r) {
            assert!(is_read_failure(e), "{what}: {r:?}");
        } else {
            r.unwrap_or_else(|e| panic!("{what}: {e:?}"));
            assert_eq!(got, want, "{what}: every index visited as often as listed");
        }
    }

    /// `Mapping::landing`: every item that comes out is a listed index with the model's bytes,
    /// or a typed error (an index past the end names it and the buffer count; with
    /// `tolerate_io`, a read failure); consumed to the end, each index comes out as often as
    /// listed. Depth 0 is refused, loading nothing. Dropped early, nothing stays pinned (the
    /// later ops' exclusive pins would hang, caught by the watchdog).
    fn landing(&self, idx: &[u64], depth: usize, take: usize, tolerate_io: bool, what: &str) {
        let before = self.demand_counters();
        let it = self.m.landing(idx.iter().copied(), depth);
        if depth == 0 {
            self.expect_refused(&it, before, |e| matches!(e, Error::BadArgument(_)), what);
            return;
        }
        let mut want: BTreeMap<u64, usize> = BTreeMap::new();
        idx.iter().for_each(|&i| *want.entry(i).or_default() += 1);
        let mut got: BTreeMap<u64, usize> = BTreeMap::new();
        let mut n = 0;
        for r in it.unwrap().take(take) {
            n += 1;
            let i = match r {
                Ok(g) => {
                    let i = g.index();
                    assert!(
                        i < self.nbuf && g.len() as u64 == self.valid(i),
                        "{what}: {i} with {} bytes",
                        g.len()
                    );
                    assert!(&g[..] == self.buf_view(i), "{what}: buffer {i} differs");
                    i
                }
                Err(Error::OutOfRange(Bounds::Buffer { index, buffers })) => {
                    assert!(index >= self.nbuf && buffers == self.nbuf, "{what}");
                    index
                }
                Err(e) if tolerate_io && is_read_failure(&e) => continue,
                Err(e) => panic!("{what}: {e:?}"),
            };
            *got.entry(i).or_default() += 1;
        }
        assert_eq!(n, take.min(idx.len()), "{what}: items that came out");
        for (i, k) in &got {
            assert!(
                want.get(i).is_some_and(|w| w >= k),
                "{what}: {i} came out {k} times"
            );
        }
        if take >= idx.len() && !tolerate_io {
            assert_eq!(got, want, "{what}: every index as often as listed");
        }
    }

    /// `Mapping::write`: within a writable mapping it lands (the model too); past the end it
    /// is refused naming the range, on a read-only mapping with `ReadOnly`, changing nothing.
    fn write_op(&mut self, rg: Rg, byte: u8, what: &str) {
        let (off, n) = self.range(rg);
        if n > 1 << 22 {
            return; // An overflowing length cannot be allocated.
        }
        let data = vec![byte; n as usize];
        let before = self.demand_counters();
        let r = self.m.write(off, &data);
        if !self.in_range((off, n)) {
            self.expect_refused(&r, before, |e| self.oor_range(e, off, n), what);
        } else if !self.writable {
            self.expect_refused(&r, before, |e| matches!(e, Error::ReadOnly), what);
        } else {
            r.unwrap_or_else(|e| panic!("{what} ({off}, {n}): {e:?}"));
            self.view_mut(off, n).fill(byte);
        }
    }

    /// Typed reads (shared pin, optimistic view) and writes (exclusive pin) of a `u32`.
    fn typed(&mut self, x: Ix, pos: u64, value: Option<u32>, what: &str) {
        let i = self.index(x);
        if i >= self.nbuf {
            let before = self.demand_counters();
            let r = self.m.pin_shared(i);
            self.expect_index_refused(&r, before, i, what);
            return;
        }
        if self.valid(i) < 4 {
            return;
        }
        let p = pos % (self.valid(i) - 3);
        let at = i * self.bs + p;
        match value {
            Some(v) if self.writable => {
                let mut g = self
                    .m
                    .pin_exclusive(i)
                    .unwrap_or_else(|e| panic!("{what}: {e:?}"));
                g.write::<u32>(p as usize, v);
                assert_eq!(g.read::<u32>(p as usize), v, "{what}: read back");
                drop(g);
                self.view_mut(at, 4).copy_from_slice(&v.to_ne_bytes());
            }
            _ => {
                let want = u32::from_ne_bytes(self.view(at, 4).try_into().unwrap());
                let g = self
                    .m
                    .pin_shared(i)
                    .unwrap_or_else(|e| panic!("{what}: {e:?}"));
                assert_eq!(g.read::<u32>(p as usize), want, "{what}: shared pin");
                drop(g);
                let got = self
                    .m
                    .read_optimistic(i, |v| v.read::<u32>(p as usize))
                    .unwrap_or_else(|e| panic!("{what}: {e:?}"));
                assert_eq!(got, want, "{what}: optimistic view");
            }
        }
    }

    /// Typed slices: refused on a plain mapping; on a transparent one, `as_slice` reads a
    /// read-only mapping and `as_mut_slice` stores into a writable one.
    fn slice(&mut self, rg: Rg, byte: u8, what: &str) {
        let (off, n) = self.range(rg);
        let (s, e) = (off as usize, (off + n) as usize);
        if self.pool {
            let r = if self.writable {
                self.m.as_mut_slice::<u8>().map(|_| ())
            } else {
                self.m.as_slice::<u8>().map(|_| ())
            };
            assert!(matches!(r, Err(Error::NotInPlace { .. })), "{what}: {r:?}");
        } else if !self.transparent {
            let r = if self.writable {
                self.m.as_mut_slice::<u8>().map(|_| ())
            } else {
                self.m.as_slice::<u8>().map(|_| ())
            };
            assert!(matches!(r, Err(Error::BadArgument(_))), "{what}: {r:?}");
        } else if self.writable {
            assert!(
                matches!(self.m.as_slice::<u8>(), Err(Error::BadArgument(_))),
                "{what}: as_slice of a writable mapping"
            );
            let sl = self
                .m
                .as_mut_slice::<u8>()
                .unwrap_or_else(|e| panic!("{what}: {e:?}"));
            assert_eq!(sl.len() as u64, self.len, "{what}: slice length");
            watched(|| sl[s..e].fill(byte));
            self.view_mut(off, n).fill(byte);
        } else {
            assert!(
                matches!(self.m.as_mut_slice::<u8>(), Err(Error::ReadOnly)),
                "{what}: as_mut_slice of a read-only mapping"
            );
            let sl = self
                .m
                .as_slice::<u8>()
                .unwrap_or_else(|e| panic!("{what}: {e:?}"));
            let got = watched(|| sl[s..e].to_vec());
            self.check_bytes(&got, off, what);
        }
    }

    fn hold(&mut self, a: u64, w: Wr, nested: Nested, what: &str) {
        if !self.writable {
            return;
        }
        let i = a % self.nbuf;
        let (pos, n, byte) = self.write(i, w);
        let mut g = self
            .m
            .pin_exclusive(i)
            .unwrap_or_else(|e| panic!("{what}: {e:?}"));
        g[pos as usize..(pos + n) as usize].fill(byte);
        let m = &self.m;
        let deadlock = |r: Result<(), Error>, call: &str| {
            assert!(
                matches!(r, Err(Error::WouldDeadlock { index, .. }) if index == i),
                "{what}: {call} of a buffer this thread holds exclusively: {r:?}"
            );
        };
        let mut synced = false;
        let mut stored: Option<(u64, u8)> = None;
        let other = |b: u64| (self.nbuf > 1).then(|| (i + 1 + b % (self.nbuf - 1)) % self.nbuf);
        match nested {
            Nested::PlainStoreSame(b) => {
                if self.transparent {
                    // The byte after the guard's write: the guard's bytes stay as written.
                    let at = i * self.bs + (pos + n) % self.valid(i);
                    if !(pos..pos + n).contains(&(at - i * self.bs)) {
                        // SAFETY: inside the held buffer of a writable transparent mapping.
                        watched(|| unsafe {
                            std::ptr::write_volatile(m.as_mut_ptr().add(at as usize), b)
                        });
                        stored = Some((at, b));
                    }
                }
            }
            Nested::PlainStoreOther(j, b) => {
                if let (true, Some(j)) = (self.transparent, other(j)) {
                    let at = j * self.bs;
                    // SAFETY: inside a writable transparent mapping.
                    watched(|| unsafe {
                        std::ptr::write_volatile(m.as_mut_ptr().add(at as usize), b)
                    });
                    stored = Some((at, b));
                }
            }
            Nested::PlainLoadOther(j) => {
                if let (true, Some(j)) = (self.transparent, other(j)) {
                    let got = self.plain_load(j * self.bs, self.valid(j));
                    self.check_bytes(&got, j * self.bs, what);
                }
            }
            Nested::PinSharedSame => deadlock(m.pin_shared(i).map(drop), "pin_shared"),
            Nested::PinExclusiveSame => deadlock(m.pin_exclusive(i).map(drop), "pin_exclusive"),
            Nested::OptimisticSame => deadlock(m.read_optimistic(i, |_| ()), "read_optimistic"),
            Nested::ReadSame => {
                let mut b = vec![0u8; self.valid(i) as usize];
                deadlock(m.read(i * self.bs, &mut b), "read")
            }
            Nested::PinEachSame => deadlock(m.pin_each([i], 2, |_, _| ()), "pin_each"),
            Nested::LandingSame => {
                let items: Vec<_> = m.landing([i], 2).unwrap().collect();
                assert_eq!(items.len(), 1, "{what}: landing of the held buffer");
                deadlock(items.into_iter().next().unwrap().map(drop), "landing");
            }
            Nested::MsyncAll => {
                // The buffer may be dirty from before the pin (then the wait is refused) or
                // clean (then there is nothing to wait for).
                let r = m.msync(0, self.len);
                match r {
                    Ok(()) => synced = true,
                    // As tests/msync.rs has it: the refused wait is reported as the buffer's
                    // failed write-back.
                    Err(Error::WritebackFailed { first, .. }) if matches!(*first, Error::WouldDeadlock { index, .. } if index == i) =>
                        {}
                    other => panic!("{what}: {other:?}"),
                }
            }
            Nested::EvictAll => {
                m.evict(0, self.len)
                    .unwrap_or_else(|e| panic!("{what}: {e:?}"));
                let st = m.state(i).unwrap();
                assert!(st.exclusive(), "{what}: evict took a pinned buffer: {st:?}");
            }
            Nested::EnsureSame => m
                .ensure_cached(i * self.bs, 1)
                .unwrap_or_else(|e| panic!("{what}: {e:?}")),
            Nested::PinSharedOther(b) => {
                if self.nbuf > 1 {
                    let j = (i + 1 + b % (self.nbuf - 1)) % self.nbuf;
                    let gj = m.pin_shared(j).unwrap_or_else(|e| panic!("{what}: {e:?}"));
                    self.check_bytes(&gj, j * self.bs, what);
                }
            }
            Nested::WritebackAll => m.writeback(0, self.len).unwrap(),
            Nested::PrefetchAll => m.prefetch(0, self.len).unwrap(),
        }
        drop(g);
        self.view_mut(i * self.bs + pos, n).fill(byte);
        if let Some((at, b)) = stored {
            self.view_mut(at, 1)[0] = b;
        }
        if synced {
            // Every buffer but the pinned one (written after msync began) is durable.
            let store = self.mem.get(NAME).unwrap();
            for j in (0..self.nbuf).filter(|&j| j != i) {
                let s = (self.offset + j * self.bs) as usize;
                let e = s + self.valid(j) as usize;
                assert!(
                    store[s..e] == self.obj[s..e],
                    "{what}: msync returned Ok but buffer {j} is not in the store"
                );
            }
        }
        self.invariants(what);
    }

    fn addr_op(&mut self, o: AddrOp, rg: Rg, what: &str) {
        let (off, n) = self.range(rg);
        let addr = (self.m.as_ptr() as usize).wrapping_add(off as usize) as *const u8;
        let n = n as usize;
        let before = self.demand_counters();
        let r = match o {
            AddrOp::EnsureCached => self.cache.ensure_cached(addr, n),
            AddrOp::Prefetch => self.cache.prefetch(addr, n),
            AddrOp::Evict => self.cache.evict(addr, n),
            AddrOp::Writeback => self.cache.writeback(addr, n),
            AddrOp::Msync => self.cache.msync(addr, n),
        };
        let rg = (off, n as u64);
        if !self.in_range(rg) || self.pool {
            // The address calls have only the address to name; a pool mapping has none.
            let want = Bounds::Address {
                addr: addr as usize,
                len: n,
            };
            self.expect_refused(
                &r,
                before,
                |e| matches!(e, Error::OutOfRange(b) if *b == want),
                what,
            );
            return;
        }
        match o {
            AddrOp::EnsureCached => self.expect_ensure(r, rg, before, what),
            AddrOp::Msync => {
                r.unwrap_or_else(|e| panic!("{what}: {e:?}"));
                self.check_store(rg, what);
            }
            _ => r.unwrap_or_else(|e| panic!("{what}: {e:?}")),
        }
    }

    fn fail_writes(&mut self, k: FailKind, rg: Rg, what: &str) {
        let r = self.range(rg);
        self.faults.fail_writes.store(true, Relaxed);
        let writes = self.faults.writes();
        let res = match k {
            FailKind::Msync => self.m.msync(r.0, r.1),
            FailKind::Writeback => {
                let res = self.m.writeback(r.0, r.1);
                // Let the IO thread try (and fail) while the failure is on, if it has work.
                for _ in 0..50 {
                    if self.faults.writes() != writes {
                        break;
                    }
                    std::thread::sleep(std::time::Duration::from_micros(200));
                }
                std::thread::sleep(std::time::Duration::from_micros(200));
                res
            }
            FailKind::Evict => self.m.evict(r.0, r.1),
        };
        self.faults.fail_writes.store(false, Relaxed);
        if !self.in_range(r) {
            assert!(
                matches!(res, Err(Error::OutOfRange { .. })),
                "{what}: {res:?}"
            );
            return;
        }
        match (&res, k) {
            (Ok(()), FailKind::Msync) => {
                // Nothing in the range was dirty (or it was written before the failure began):
                // then the store holds it already.
                self.check_store(r, what);
            }
            (Ok(()), _) => {}
            (Err(Error::WritebackFailed { failed, first }), FailKind::Msync | FailKind::Evict) => {
                assert!(
                    self.writable,
                    "{what}: a read-only mapping wrote back: {res:?}"
                );
                assert!(*failed >= 1, "{what}: {res:?}");
                assert!(
                    matches!(**first, Error::Io { op: "write", .. }),
                    "{what}: {res:?}"
                );
            }
            _ => panic!("{what}: {res:?}"),
        }
    }

    fn fail_reads(&mut self, short: bool, k: ReadKind, what: &str) {
        let flag = if short {
            &self.faults.short_reads
        } else {
            &self.faults.fail_reads
        };
        flag.store(true, Relaxed);
        match k {
            ReadKind::Pin(x) => {
                let i = self.index(x);
                let r = self.m.pin_shared(i);
                if i >= self.nbuf {
                    assert!(matches!(r, Err(Error::OutOfRange { .. })), "{what}: {r:?}");
                } else {
                    match r {
                        Ok(g) => self.check_bytes(&g, i * self.bs, what),
                        Err(e) => assert!(is_read_failure(&e), "{what}: {e:?}"),
                    }
                }
            }
            ReadKind::Read(rg) => {
                let (off, n) = self.range(rg);
                if self.in_range((off, n)) {
                    let mut buf = vec![0u8; n as usize];
                    match self.m.read(off, &mut buf) {
                        Ok(()) => self.check_bytes(&buf, off, what),
                        Err(e) => assert!(is_read_failure(&e), "{what}: {e:?}"),
                    }
                }
            }
            ReadKind::Ensure(rg) => {
                let (off, n) = self.range(rg);
                let r = self.m.ensure_cached(off, n);
                if self.in_range((off, n))
                    && self.buffers_of((off, n)).count() as u64 <= self.budget_bufs()
                {
                    if let Err(e) = r {
                        assert!(is_read_failure(&e), "{what}: {e:?}");
                    }
                } else {
                    let before = self.demand_counters();
                    self.expect_ensure(r, (off, n), before, what);
                }
            }
            ReadKind::PinEach(a, b) => {
                let idx: Vec<u64> = (0..1 + b % 4).map(|k| (a + k * 7) % self.nbuf).collect();
                self.pin_each(&idx, 1 + (b as usize >> 8) % 4, true, what);
            }
            ReadKind::Landing(a, b) => {
                let idx: Vec<u64> = (0..1 + b % 4).map(|k| (a + k * 7) % self.nbuf).collect();
                self.landing(&idx, 1 + (b as usize >> 8) % 4, idx.len(), true, what);
            }
            ReadKind::Prefetch(rg) => {
                let (off, n) = self.range(rg);
                let r = self.m.prefetch(off, n);
                if self.in_range((off, n)) {
                    r.unwrap_or_else(|e| panic!("{what}: {e:?}"));
                } else {
                    assert!(matches!(r, Err(Error::OutOfRange { .. })), "{what}: {r:?}");
                }
            }
        }
        flag.store(false, Relaxed);
    }
}

/// Plain loads and stores cannot be interrupted: a livelocked fault would hang the test for
/// good. A watchdog aborts the process instead, naming the bug.
static DEADLINE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn now_ms() -> u64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    START
        .get_or_init(std::time::Instant::now)
        .elapsed()
        .as_millis() as u64
        + 1
}

/// Runs `f` (plain accesses) under the watchdog.
fn watched<R>(f: impl FnOnce() -> R) -> R {
    static WATCHDOG: std::sync::Once = std::sync::Once::new();
    WATCHDOG.call_once(|| {
        now_ms();
        std::thread::spawn(|| loop {
            std::thread::sleep(std::time::Duration::from_millis(100));
            let d = DEADLINE.load(Relaxed);
            if d != 0 && now_ms() > d {
                eprintln!(
                    "api_model: a plain access to a transparent mapping did not return in {:?} \
                     (livelock; see transparent::readahead_never_evicts_the_buffer_its_fault_waits_for)",
                    common::HANG
                );
                std::process::abort();
            }
        });
    });
    DEADLINE.store(now_ms() + common::HANG.as_millis() as u64, Relaxed);
    let r = f();
    DEADLINE.store(0, Relaxed);
    r
}

fn is_bad_length(e: &Error) -> bool {
    matches!(e, Error::BadLength { .. })
}
fn is_read_failure(e: &Error) -> bool {
    matches!(
        e,
        Error::Io { op: "read", .. } | Error::ShortIo { op: "read", .. }
    )
}

/// Builds the cache and mapping of `cfg`; `None` when `map` refused as expected.
fn setup(cfg: &Cfg) -> Option<Harness> {
    let bs = cfg.bs();
    let budget = cfg.budget();
    let cache = Cache::new(
        CacheOptions::new(budget)
            .batch(cfg.batch)
            .background_eviction(cfg.background),
    );
    // The budget holds one batch of 4 KiB buffers, and the mapping's batch of its own.
    let batch = cfg.batch as u64 * 4096;
    let cache = match cache {
        Ok(c) => {
            assert!(budget >= batch, "a budget under one batch was accepted");
            c
        }
        Err(Error::BudgetTooSmall {
            budget: b,
            batch: n,
        }) if b == budget && n == batch => {
            assert!(budget < batch);
            return None;
        }
        Err(e) => panic!("Cache::new: {e:?}"),
    };
    if budget < cfg.batch as u64 * bs {
        let r = cache.map(Arc::new(MemoryStore::new()), NAME, cfg.map_options());
        assert!(
            matches!(r, Err(Error::BudgetTooSmall { .. })),
            "a budget under one batch of the mapping's buffers: {r:?}"
        );
        return None;
    }
    let mem = MemoryStore::new();
    let initial = initial_bytes(cfg.obj_len, cfg.obj_len ^ cfg.budget_bufs);
    if !cfg.absent {
        mem.insert(NAME, initial.clone());
    }
    let store = FaultStore::new(Arc::new(mem.clone()));
    let faults = store.config().clone();
    let expect = cfg.expect();
    let r = cache.map(Arc::new(store), NAME, cfg.map_options());
    let len = match (&expect, r) {
        (MapExpect::Ok { len }, Ok(m)) => {
            assert_eq!(m.len(), *len, "mapping length");
            assert_eq!(m.buffers(), len.div_ceil(bs), "buffers");
            assert_eq!(m.is_writable(), cfg.writable);
            assert_eq!(m.is_transparent(), cfg.transparent);
            assert_eq!(m.placement() == Placement::Pool, cfg.pool);
            (m, *len)
        }
        (MapExpect::BadArgument, Err(Error::BadArgument(_)))
        | (MapExpect::BadLength, Err(Error::BadLength { .. }))
        | (MapExpect::NotFound, Err(Error::NotFound { .. }))
        | (MapExpect::BeyondObject, Err(Error::BeyondObject { .. }))
        | (MapExpect::NotInPlace, Err(Error::NotInPlace { .. }))
        | (MapExpect::PoolTooSmall, Err(Error::BudgetTooSmall { .. })) => {
            // Refused: the object is as it was (not created, not grown).
            let now = mem.get(NAME);
            if cfg.absent {
                assert_eq!(now, None, "a refused map created the object");
            } else {
                assert!(
                    now.as_deref() == Some(&initial[..]),
                    "a refused map changed the object"
                );
            }
            assert_eq!(cache.used(), 0);
            return None;
        }
        (e, r) => panic!("map: expected {e:?}, got {r:?}"),
    };
    let (m, len) = len;
    let offset = cfg.offset();
    let mut obj = if cfg.absent { Vec::new() } else { initial };
    let end = (offset + len) as usize;
    if obj.len() < end {
        assert!(cfg.writable);
        obj.resize(end, 0);
    }
    let stored = mem.get(NAME).expect("object exists after map");
    assert!(stored == obj, "map left the object other than the model's");
    let nbuf = len.div_ceil(bs);
    let neighbour = cfg.neighbour.then(|| {
        let nmem = MemoryStore::new();
        nmem.insert(
            "n",
            (0..NEIGHBOUR_BUFS * 4096)
                .map(|k| (k / 4096) as u8)
                .collect(),
        );
        cache
            .map(Arc::new(nmem), "n", MapOptions::new())
            .expect("neighbour mapping")
    });
    let beyond = (0..nbuf * bs - len)
        .map(|k| obj.get(end + k as usize).copied().unwrap_or(0))
        .collect();
    Some(Harness {
        cache,
        m,
        mem,
        faults,
        obj,
        beyond,
        offset,
        len,
        bs,
        nbuf,
        budget,
        writable: cfg.writable,
        transparent: cfg.transparent,
        pool: cfg.pool,
        log: Vec::new(),
        neighbour,
        tail_stored: vec![Vec::new(); (nbuf * bs - len) as usize],
        tracked: cfg.track,
        fits: !cfg.neighbour && !cfg.track && !cfg.background && nbuf * bs <= budget,
        end_fail: cfg.end_fail,
    })
}

fn finish(h: Harness) {
    let Harness {
        cache,
        m,
        mem,
        obj,
        faults,
        neighbour,
        end_fail,
        offset,
        len,
        ..
    } = h;
    let m = if end_fail {
        faults.fail_writes.store(true, Relaxed);
        let r = m.unmap();
        faults.fail_writes.store(false, Relaxed);
        match r {
            Ok(()) => {
                // Nothing was dirty: the store held everything already.
                None
            }
            Err(e) => {
                assert!(
                    matches!(
                        &e.error,
                        Error::WritebackFailed { .. } | Error::Io { op: "write", .. }
                    ),
                    "unmap with failing writes: {:?}",
                    e.error
                );
                // The mapping comes back whole, dirty data included, and in the cache again.
                let m = e.mapping;
                let mut all = vec![0u8; len as usize];
                m.read(0, &mut all)
                    .unwrap_or_else(|e| panic!("read after failed unmap: {e:?}"));
                let s = offset as usize;
                assert!(
                    all[..] == obj[s..s + len as usize],
                    "a failed unmap lost data"
                );
                if m.placement() == Placement::Pool {
                    m.msync(0, len)
                } else {
                    cache.msync(m.as_ptr(), len as usize)
                }
                .unwrap_or_else(|e| panic!("msync after a failed unmap: {e:?}"));
                Some(m)
            }
        }
    } else {
        Some(m)
    };
    if let Some(m) = m {
        m.unmap().unwrap_or_else(|e| panic!("unmap: {e:?}"));
    }
    if let Some(n) = neighbour {
        n.unmap().unwrap();
    }
    assert_eq!(cache.used(), 0, "unmap left budget in use");
    let stored = mem.get(NAME).unwrap();
    assert_eq!(stored.len(), obj.len(), "object length after unmap");
    if stored != obj {
        let k = (0..obj.len()).find(|&k| stored[k] != obj[k]).unwrap();
        panic!(
            "after unmap the store differs at object byte {k}: store {} model {}",
            stored[k], obj[k]
        );
    }
}

fn run_case(cfg: &Cfg, ops: &[Op]) {
    let Some(mut h) = setup(cfg) else {
        if std::env::var_os("API_MODEL_TRACE").is_some() {
            eprintln!("refused {:?}", cfg.expect());
        }
        return;
    };
    if std::env::var_os("API_MODEL_TRACE").is_some() {
        eprintln!(
            "case len {} bs {} bufs {} budget {} w {} t {} ops {}",
            h.len,
            h.bs,
            h.nbuf,
            h.budget_bufs(),
            h.writable,
            h.transparent,
            ops.len()
        );
    }
    let trace = std::env::var("API_MODEL_TRACE").is_ok_and(|v| v == "2");
    if trace {
        eprintln!("CASE {cfg:?}");
    }
    for op in ops {
        if trace {
            eprintln!("OP {op:?}");
        }
        h.run(op);
    }
    let base = h.m.as_ptr();
    let cache = h.cache.clone();
    finish(h);
    let r = cache.msync(base, 1);
    assert!(
        matches!(r, Err(Error::OutOfRange { .. })),
        "address after unmap: {r:?}"
    );
}

fn max_ops() -> usize {
    std::env::var("API_MODEL_OPS")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(60)
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("API_MODEL_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(64),
        max_shrink_iters: 2000,
        ..ProptestConfig::default()
    })]

    #[test]
    fn api_matches_model(cfg in cfg_strategy(), ops in prop::collection::vec(op(), 1..max_ops())) {
        run_case(&cfg, &ops);
    }
}
