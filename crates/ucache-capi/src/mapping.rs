//! Mappings: options, map and unmap, and the explicit primitives.

use std::ffi::{c_char, c_int, c_void};
use std::sync::Arc;

use ucache_core::{FaultAction, FaultHandling, MapOptions, Mapping};

use crate::cache::{cache_of, ucache_cache};
use crate::handle::{arg, c_str, slice, slice_mut, Out, Registry};
use crate::policy::{by_name, ucache_policy_ops, CPolicy};
use crate::status::{call, ucache_status, Fail};
use crate::store::{ucache_store, STORES};

/// A mapping: an object of a store behind a contiguous range of memory, cut into buffers.
/// Opaque; created by `ucache_map`, ended by `ucache_unmap` (or `ucache_mapping_close`).
pub struct ucache_mapping {
    _private: (),
}

pub(crate) static MAPPINGS: Registry<Mapping> =
    Registry::new(3, "ucache_mapping", ucache_status::UCACHE_ERR_UNMAPPED);

/// The mapping a handle names; the `Arc` keeps it alive for the call.
pub(crate) fn mapping_of(m: *const ucache_mapping) -> Result<Arc<Mapping>, Fail> {
    MAPPINGS.get(m as usize)
}

/// Called on the faulting thread, inside its `SIGBUS` handler, when a plain access to a
/// transparent mapping cannot be served (an IO error, a write to a read-only mapping), with
/// the faulting address and the error's code. Return nonzero to retry the access, 0 to
/// deliver `SIGBUS` as mmap would. Must not touch the mapping's missing memory, nor unwind.
pub type ucache_fault_hook =
    Option<unsafe extern "C" fn(addr: usize, status: ucache_status, user: *mut c_void) -> c_int>;

/// How to map an object. Fill it with `ucache_map_options_init`, then change fields.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ucache_map_options {
    /// Bytes per buffer: a power of two from 4096 to 1 GiB (default 4096).
    pub buffer_size: usize,
    /// Where in the object the mapping starts, a multiple of 4096 (default 0).
    pub offset: u64,
    /// Bytes to map; 0 (default): from `offset` to the end of the object. A writable mapping
    /// larger than its object grows it.
    pub len: u64,
    /// Allow exclusive pins, dirty buffers and write-back (default false).
    pub writable: bool,
    /// Create the object if missing (default false). Needs `len`, and `writable` true as
    /// well: `create` without `writable` is refused by `ucache_map` with
    /// `UCACHE_ERR_BAD_ARGUMENT` before anything is created.
    pub create: bool,
    /// Plain loads and stores through the mapping's base pointer, like mmap (userfaultfd;
    /// Linux x86-64). Default false.
    pub transparent: bool,
    /// Sequential readahead (default true): pins of explicit mappings whose policy does not
    /// prefetch, and transparent mappings with the default policy (`MapOptions::readahead`).
    pub readahead: bool,
    /// Readahead windows read by the missing (or faulting) thread before its miss returns,
    /// not by the cache's IO threads (default false; `MapOptions::readahead_inline`): for
    /// programs whose own threads keep every core busy on a device as fast as memory.
    pub readahead_inline: bool,
    /// Map the file itself as a view whose pages ucache reveals and hides, with no copy
    /// (default false; implies `transparent`; `MapOptions::file_view`): read-only, buffers of
    /// 64 KiB or more, a store whose objects are files (`"file"`, `"uring"`), otherwise
    /// `UCACHE_ERR_BAD_ARGUMENT`. For scans of files on a device as fast as memory.
    pub file_view: bool,
    /// Transparent mappings: give eviction candidates a second chance (default false).
    pub track_access: bool,
    /// This mapping's claim on the shared budget relative to others (default 1; 0 refused).
    pub weight: u32,
    /// Transparent mappings: 0 (default) serves faults on the faulting thread; n > 0 starts
    /// n handler threads, which also serve accesses the kernel makes for the program.
    pub fault_handler_threads: usize,
    /// A built-in policy by name (`ucache_policy_name`), optionally with parameters and presets
    /// ("s3fifo:libcachesim,small_size_ratio=0.2", see docs/policies.md); NULL: the default
    /// (CLOCK).
    pub policy_name: *const c_char,
    /// A policy written in C; NULL: none. At most one of `policy_name` and `policy_ops`.
    pub policy_ops: *const ucache_policy_ops,
    /// The user pointer of `policy_ops`; owned by the mapping from the `ucache_map` call on
    /// (see `ucache_map`).
    pub policy_user: *mut c_void,
    /// Transparent mappings: what to do when a fault cannot be served (NULL: `SIGBUS`).
    pub on_fault_error: ucache_fault_hook,
    /// The user pointer of `on_fault_error`; must outlive the mapping.
    pub fault_user: *mut c_void,
}

/// Fills `options` with the defaults: read-only, 4 KiB buffers, the whole object, CLOCK.
///
/// Ownership: `options` is the caller's; only written. Thread safety: any thread.
#[no_mangle]
pub extern "C" fn ucache_map_options_init(options: *mut ucache_map_options) -> ucache_status {
    call(|| {
        Out::new(options, "options")?.set(ucache_map_options {
            buffer_size: 4096,
            offset: 0,
            len: 0,
            writable: false,
            create: false,
            transparent: false,
            readahead: true,
            readahead_inline: false,
            file_view: false,
            track_access: false,
            weight: 1,
            fault_handler_threads: 0,
            policy_name: std::ptr::null(),
            policy_ops: std::ptr::null(),
            policy_user: std::ptr::null_mut(),
            on_fault_error: None,
            fault_user: std::ptr::null_mut(),
        });
        Ok(())
    })
}

/// A callback's user pointer, which ucache passes through without reading it.
struct User(*mut c_void);

/// The fault hook's user pointer, moved into the hook closure.
struct FaultUser(*mut c_void);
// SAFETY: `ucache_map_options.fault_user` is documented as used from any faulting thread.
unsafe impl Send for FaultUser {}
// SAFETY: as above.
unsafe impl Sync for FaultUser {}

/// The Rust options for C options: the policy first, so that a C policy is owned (and
/// destroyed once) whatever is refused after.
fn map_options(o: &ucache_map_options) -> Result<MapOptions, Fail> {
    let c_policy = if o.policy_ops.is_null() {
        None
    } else {
        Some(CPolicy::new(
            arg(o.policy_ops, "policy_ops")?,
            o.policy_user,
        )?)
    };
    let mut m = MapOptions::new()
        .buffer_size(o.buffer_size)
        .offset(o.offset)
        .writable(o.writable)
        .create(o.create)
        .transparent(o.transparent)
        .readahead(o.readahead)
        .readahead_inline(o.readahead_inline)
        .file_view(o.file_view)
        .track_access(o.track_access)
        .weight(o.weight);
    if o.len != 0 {
        m = m.len(o.len);
    }
    if o.fault_handler_threads > 0 {
        m = m.fault_handling(FaultHandling::HandlerThreads(o.fault_handler_threads));
    }
    match (c_policy, o.policy_name.is_null()) {
        (Some(_), false) => return Err(Fail::bad("set policy_name or policy_ops, not both")),
        (Some(p), true) => m = m.policy(Box::new(p)),
        (None, false) => m = m.policy(by_name(c_str(o.policy_name, "policy_name")?)?),
        (None, true) => {}
    }
    if let Some(hook) = o.on_fault_error {
        let user = FaultUser(o.fault_user);
        m = m.on_fault_error(Arc::new(move |addr, e| {
            let user = &user;
            // SAFETY: the C hook with its user pointer; the contract of `ucache_fault_hook`.
            match unsafe { hook(addr, ucache_status::of(e), user.0) } {
                0 => FaultAction::Signal,
                _ => FaultAction::Retry,
            }
        }));
    }
    Ok(m)
}

/// Maps `object` of `store` into `cache` and stores the mapping's handle in `*out`.
/// `options` may be NULL for the defaults.
///
/// Ownership: `object` and `options` are only read. A C policy's `policy_user` belongs to
/// the mapping from this call on, even when it fails: `policy_ops->destroy` is called once,
/// when the mapping is gone or before this call returns an error. The handle belongs to the
/// caller, who ends it with `ucache_unmap` (or `ucache_mapping_close`). The mapping holds the
/// cache and the store: their handles may be freed before it.
/// Thread safety: any thread; the handle may be used from many threads at once.
#[no_mangle]
pub extern "C" fn ucache_map(
    cache: *const ucache_cache,
    store: *const ucache_store,
    object: *const c_char,
    options: *const ucache_map_options,
    out: *mut *mut ucache_mapping,
) -> ucache_status {
    call(|| {
        let opts = if options.is_null() {
            MapOptions::new()
        } else {
            map_options(arg(options, "options")?)?
        };
        let out = Out::new(out, "out")?;
        let cache = cache_of(cache)?;
        let store = STORES.get(store as usize)?.store.clone();
        let object = c_str(object, "object")?;
        let mapping = cache.map(store, object, opts)?;
        out.set(MAPPINGS.insert(mapping) as *mut ucache_mapping);
        Ok(())
    })
}

/// Writes back everything, releases the mapping's memory and ends the handle.
///
/// Refused with `UCACHE_ERR_IN_USE` while pins of the mapping are held or other threads are
/// inside calls on it. On any error the handle stays valid and the mapping whole (dirty data
/// included), to retry, or to abandon with `ucache_mapping_close`.
/// Ownership: consumes the handle on success; any later use of it returns
/// `UCACHE_ERR_UNMAPPED`. As with munmap, plain loads and stores through a transparent
/// mapping's pointer must have ended. Thread safety: any thread.
#[no_mangle]
pub extern "C" fn ucache_unmap(mapping: *mut ucache_mapping) -> ucache_status {
    call(|| {
        let h = mapping as usize;
        let m = MAPPINGS.take_sole(h)?;
        m.unmap().map_err(|e| {
            let fail = Fail::from(e.error);
            MAPPINGS.reinsert(h, Arc::new(e.mapping));
            fail
        })
    })
}

/// Ends the handle without waiting: the mapping is written back and released once its last
/// pin is released (at once if there is none). A write-back failure then is printed to
/// stderr, not returned: call `ucache_unmap` to handle it.
///
/// Ownership: consumes the handle (later uses return `UCACHE_ERR_UNMAPPED`); pins still held
/// stay valid until `ucache_unpin`. Thread safety: any thread.
#[no_mangle]
pub extern "C" fn ucache_mapping_close(mapping: *mut ucache_mapping) -> ucache_status {
    call(|| MAPPINGS.remove(mapping as usize).map(drop))
}

/// What a mapping is.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ucache_mapping_info {
    /// The base address: buffer i lives at `base + i * buffer_size`. Plain loads and stores
    /// through it are allowed on transparent mappings only; on others use pins.
    pub base: *mut u8,
    /// Mapped bytes.
    pub len: u64,
    /// Bytes per buffer.
    pub buffer_size: usize,
    /// Buffers (the last may be partial).
    pub buffers: u64,
    /// Buffers resident now.
    pub resident: u64,
    pub writable: bool,
    pub transparent: bool,
}

/// Describes the mapping in `*out`.
///
/// Ownership: `out` is the caller's; `base` stays valid until the mapping is unmapped.
/// Thread safety: any thread.
#[no_mangle]
pub extern "C" fn ucache_mapping_get_info(
    mapping: *const ucache_mapping,
    out: *mut ucache_mapping_info,
) -> ucache_status {
    call(|| {
        let out = Out::new(out, "out")?;
        let m = mapping_of(mapping)?;
        out.set(ucache_mapping_info {
            base: m.as_mut_ptr(),
            len: m.len(),
            buffer_size: m.buffer_size(),
            buffers: m.buffers(),
            resident: m.resident(),
            writable: m.is_writable(),
            transparent: m.is_transparent(),
        });
        Ok(())
    })
}

/// Called by `ucache_read_optimistic` with the buffer's bytes, which nobody pinned: they may
/// be torn or stale, and are known good only once `ucache_read_optimistic` returns. The
/// callback must not act on them (nor keep `data`) before that; it may be called again.
/// Its return value is handed back through `*result`. Must not unwind.
pub type ucache_read_fn =
    Option<unsafe extern "C" fn(data: *const u8, len: usize, user: *mut c_void) -> c_int>;

/// Reads buffer `index` without pinning it: calls `read(data, len, user)` on its bytes, then
/// checks that the buffer was neither evicted nor written meanwhile, and calls it again if it
/// was. `*result` gets the return value of the validated call. Loads the buffer if missing.
///
/// Ownership: `user` is passed through. Thread safety: any thread, concurrently with pins
/// and other readers.
#[no_mangle]
pub extern "C" fn ucache_read_optimistic(
    mapping: *const ucache_mapping,
    index: u64,
    read: ucache_read_fn,
    user: *mut c_void,
    result: *mut c_int,
) -> ucache_status {
    call(|| {
        let result = Out::new(result, "result")?;
        let read = read.ok_or_else(|| Fail::null("read"))?;
        let m = mapping_of(mapping)?;
        let bs = m.buffer_size() as u64;
        let start = index.saturating_mul(bs);
        let len = m.len().saturating_sub(start).min(bs) as usize;
        let user = User(user);
        let r = m.read_optimistic(index, |_view| {
            // The view proves `index` is in range; its bytes are at the base plus its offset.
            let data = m.as_ptr().wrapping_add(start as usize);
            // SAFETY: the C callback with `len` bytes of the live mapping region at `data`
            // (racy reads there are what `ucache_read_fn` documents) and its user pointer.
            unsafe { read(data, len, user.0) }
        })?;
        result.set(r);
        Ok(())
    })
}

/// Copies `len` bytes at `offset` of the mapping into `buf`, through the cache.
///
/// Ownership: `buf` is the caller's. Thread safety: any thread.
#[no_mangle]
pub extern "C" fn ucache_read(
    mapping: *const ucache_mapping,
    offset: u64,
    buf: *mut u8,
    len: usize,
) -> ucache_status {
    call(|| {
        let m = mapping_of(mapping)?;
        Ok(m.read(offset, slice_mut(buf, len, "buf")?)?)
    })
}

/// A primitive over a byte range of one mapping.
type RangeOp = fn(&Mapping, u64, u64) -> ucache_core::Result<()>;

fn range_op(mapping: *const ucache_mapping, offset: u64, len: u64, op: RangeOp) -> ucache_status {
    call(|| Ok(op(&*mapping_of(mapping)?, offset, len)?))
}

/// A primitive over a list of buffers of one mapping.
type IndexOp = fn(&Mapping, &[u64]) -> ucache_core::Result<()>;

fn index_op(
    mapping: *const ucache_mapping,
    indices: *const u64,
    count: usize,
    op: IndexOp,
) -> ucache_status {
    call(|| {
        Ok(op(
            &*mapping_of(mapping)?,
            slice(indices, count, "indices")?,
        )?)
    })
}

/// Brings every buffer overlapping `[offset, offset+len)` into memory, reading the missing
/// ones in one batch; resident when it returns.
///
/// Thread safety (this and every range or index primitive below): any thread, concurrently.
#[no_mangle]
pub extern "C" fn ucache_ensure_cached(
    mapping: *const ucache_mapping,
    offset: u64,
    len: u64,
) -> ucache_status {
    range_op(mapping, offset, len, Mapping::ensure_cached)
}

/// Brings the `count` buffers listed in `indices` into memory in one batch.
///
/// Ownership: `indices` is only read (NULL allowed when `count` is 0).
#[no_mangle]
pub extern "C" fn ucache_ensure_cached_buffers(
    mapping: *const ucache_mapping,
    indices: *const u64,
    count: usize,
) -> ucache_status {
    index_op(mapping, indices, count, Mapping::ensure_cached_buffers)
}

/// Starts loading the buffers overlapping the range in the background.
#[no_mangle]
pub extern "C" fn ucache_prefetch(
    mapping: *const ucache_mapping,
    offset: u64,
    len: u64,
) -> ucache_status {
    range_op(mapping, offset, len, Mapping::prefetch)
}

/// Starts loading the listed buffers in the background.
///
/// Ownership: `indices` is only read, during the call.
#[no_mangle]
pub extern "C" fn ucache_prefetch_buffers(
    mapping: *const ucache_mapping,
    indices: *const u64,
    count: usize,
) -> ucache_status {
    index_op(mapping, indices, count, Mapping::prefetch_buffers)
}

/// Evicts the unpinned buffers overlapping the range, writing dirty ones back first.
#[no_mangle]
pub extern "C" fn ucache_evict(
    mapping: *const ucache_mapping,
    offset: u64,
    len: u64,
) -> ucache_status {
    range_op(mapping, offset, len, Mapping::evict)
}

/// Evicts the listed buffers, as `ucache_evict` does a range. Every index is checked first:
/// one past the end is `UCACHE_ERR_OUT_OF_RANGE` and nothing is evicted.
///
/// Ownership: `indices` is only read, during the call.
#[no_mangle]
pub extern "C" fn ucache_evict_buffers(
    mapping: *const ucache_mapping,
    indices: *const u64,
    count: usize,
) -> ucache_status {
    index_op(mapping, indices, count, Mapping::evict_buffers)
}

/// Starts writing back the dirty buffers overlapping the range in the background.
#[no_mangle]
pub extern "C" fn ucache_writeback(
    mapping: *const ucache_mapping,
    offset: u64,
    len: u64,
) -> ucache_status {
    range_op(mapping, offset, len, Mapping::writeback)
}

/// Starts writing back the listed buffers that are dirty, in the background, as
/// `ucache_writeback` does a range. Every index is checked first.
///
/// Ownership: `indices` is only read, during the call.
#[no_mangle]
pub extern "C" fn ucache_writeback_buffers(
    mapping: *const ucache_mapping,
    indices: *const u64,
    count: usize,
) -> ucache_status {
    index_op(mapping, indices, count, Mapping::writeback_buffers)
}

/// Writes back the dirty buffers overlapping the range; durable when it returns
/// `UCACHE_OK`. After a failed sync (`UCACHE_ERR_IO`) the buffers it wrote are dirty again;
/// if write-backs made earlier by eviction or `ucache_writeback` may have been lost with it,
/// the mapping is poisoned and every later msync and unmap returns
/// `UCACHE_ERR_SYNC_POISONED` until `ucache_clear_sync_failure`.
#[no_mangle]
pub extern "C" fn ucache_msync(
    mapping: *const ucache_mapping,
    offset: u64,
    len: u64,
) -> ucache_status {
    range_op(mapping, offset, len, Mapping::msync)
}

/// Writes back the listed buffers that are dirty; durable when it returns `UCACHE_OK`, with
/// the failure rules of `ucache_msync`. Every index is checked first: one past the end is
/// `UCACHE_ERR_OUT_OF_RANGE` and nothing is written.
///
/// Ownership: `indices` is only read, during the call.
#[no_mangle]
pub extern "C" fn ucache_msync_buffers(
    mapping: *const ucache_mapping,
    indices: *const u64,
    count: usize,
) -> ucache_status {
    index_op(mapping, indices, count, Mapping::msync_buffers)
}

/// Lifts the poison a failed sync left on the mapping (see `ucache_msync`), once the
/// application has dealt with the writes that may have been lost. Sets `*was_poisoned` to
/// whether it was poisoned (may be NULL).
///
/// Ownership: `was_poisoned` is the caller's. Thread safety: any thread.
#[no_mangle]
pub extern "C" fn ucache_clear_sync_failure(
    mapping: *const ucache_mapping,
    was_poisoned: *mut bool,
) -> ucache_status {
    call(|| {
        let cleared = mapping_of(mapping)?.clear_sync_failure().is_some();
        if !was_poisoned.is_null() {
            Out::new(was_poisoned, "was_poisoned")?.set(cleared);
        }
        Ok(())
    })
}

/// Called by `ucache_pin_each` with each buffer, pinned shared for the call. `data` is valid
/// only during the call. It may pin, but should not block for long; must not unwind.
pub type ucache_visit_fn =
    Option<unsafe extern "C" fn(index: u64, data: *const u8, len: usize, user: *mut c_void)>;

/// Visits the `count` buffers listed in `indices` as they become available, keeping up to
/// `depth` reads in flight: calls `visit(index, data, len, user)` on each. Stops at the first
/// error.
///
/// Ownership: `indices` is only read; `user` is passed through. Thread safety: any thread.
#[no_mangle]
pub extern "C" fn ucache_pin_each(
    mapping: *const ucache_mapping,
    indices: *const u64,
    count: usize,
    depth: usize,
    visit: ucache_visit_fn,
    user: *mut c_void,
) -> ucache_status {
    call(|| {
        let visit = visit.ok_or_else(|| Fail::null("visit"))?;
        let m = mapping_of(mapping)?;
        let indices = slice(indices, count, "indices")?;
        let user = User(user);
        Ok(m.pin_each(indices.iter().copied(), depth, |i, bytes| {
            // SAFETY: the C callback with the pinned buffer's bytes and its user pointer.
            unsafe { visit(i, bytes.as_ptr(), bytes.len(), user.0) }
        })?)
    })
}
