//! Policies: the built-in ones by name, and policies written in C as a table of functions.

use std::ffi::{c_char, c_void, CStr, CString};
use std::sync::OnceLock;

use ucache_core::policy::{policy_from_spec, Buffers, Layout, Policy, POLICY_NAMES};

use crate::status::{guard, Fail};

/// The number of built-in policies (`ucache_policy_name`).
///
/// Thread safety: any thread.
#[no_mangle]
pub extern "C" fn ucache_policy_count() -> usize {
    POLICY_NAMES.len()
}

/// The name of built-in policy `i` (0 is the default, "clock"), for
/// `ucache_map_options.policy_name`; NULL when `i` is out of range.
///
/// Ownership: a static string. Thread safety: any thread.
#[no_mangle]
pub extern "C" fn ucache_policy_name(i: usize) -> *const c_char {
    static NAMES: OnceLock<Vec<CString>> = OnceLock::new();
    let names = NAMES.get_or_init(|| {
        POLICY_NAMES
            .iter()
            .map(|n| CString::new(*n).unwrap_or_default())
            .collect()
    });
    names.get(i).map_or(std::ptr::null(), |n| n.as_ptr())
}

/// A built-in policy by name, with optional parameters and presets
/// (`s3fifo:libcachesim,small_size_ratio=0.2`); the error names the policy, parameter or
/// value that is wrong.
pub(crate) fn by_name(name: &str) -> Result<Box<dyn Policy>, Fail> {
    policy_from_spec(name).map_err(|e| Fail::bad(e.to_string()))
}

/// The state words of a mapping's buffers, as a policy's `choose_eviction` sees them. Opaque;
/// valid only during that call.
pub struct ucache_buffers {
    _private: (),
}

/// The buffers a `ucache_buffers` pointer stands for.
fn buffers<'a>(b: *const ucache_buffers) -> Result<&'a Buffers<'a>, Fail> {
    if b.is_null() {
        return Err(Fail::null("buffers"));
    }
    // SAFETY: the pointer was made from a `&Buffers` in `CPolicy::choose_eviction_buffers`,
    // and the API allows its use only during that call, while the reference lives.
    Ok(unsafe { &*(b as *const Buffers<'a>) })
}

/// [`buffers`] and an index checked against them.
fn buffer<'a>(b: *const ucache_buffers, index: u64) -> Result<&'a Buffers<'a>, Fail> {
    let bufs = buffers(b)?;
    if index >= bufs.len() {
        return Err(Fail::new(
            crate::status::ucache_status::UCACHE_ERR_OUT_OF_RANGE,
            format!("buffer {index} of {}", bufs.len()),
        ));
    }
    Ok(bufs)
}

/// The number of buffers of the mapping (0 if `buffers` is NULL).
///
/// Ownership: `buffers` is ucache's, valid only inside `choose_eviction`. Thread safety: the
/// thread of that call.
#[no_mangle]
pub extern "C" fn ucache_buffers_len(buffers: *const ucache_buffers) -> u64 {
    guard(|| Ok(self::buffers(buffers)?.len()))
}

/// Whether buffer `index` could be evicted now: cached and held by nobody. False for an index
/// out of range (with `ucache_last_error` set).
///
/// Ownership and thread safety as `ucache_buffers_len`.
#[no_mangle]
pub extern "C" fn ucache_buffers_is_candidate(buffers: *const ucache_buffers, index: u64) -> bool {
    guard(|| Ok(buffer(buffers, index)?.is_candidate(index)))
}

/// Clears the referenced bit of buffer `index` (set by each pin and access) and says whether
/// it was set: CLOCK's second chance. False for an index out of range.
///
/// Ownership and thread safety as `ucache_buffers_len`.
#[no_mangle]
pub extern "C" fn ucache_buffers_test_and_clear_referenced(
    buffers: *const ucache_buffers,
    index: u64,
) -> bool {
    guard(|| Ok(buffer(buffers, index)?.test_and_clear_referenced(index)))
}

/// The most buffers one `choose_prefetch` call may propose.
pub const UCACHE_PREFETCH_MAX: usize = 256;

/// A per-mapping policy written in C: a table of hooks, each given the `policy_user` pointer
/// of the mapping options. Only `choose_eviction` is required; a NULL hook does what a
/// policy that does not care would want (evictable, admitted, no prefetch, nothing to do).
///
/// Contract: hooks are called concurrently from any thread that uses the mapping (and, for a
/// transparent mapping, from inside the faulting thread's `SIGBUS` handler: there a hook must
/// not touch the mapping's memory). They must be quick, thread-safe and must not unwind (no
/// C++ exceptions, no `longjmp` out), nor call back into ucache on the same mapping. The
/// policy only proposes: the cache checks every candidate, so a wrong proposal costs hit
/// ratio, never correctness.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ucache_policy_ops {
    /// A short name for statistics (copied; NULL: "c-policy").
    pub name: *const c_char,
    /// Optional. Called once before the mapping is used: its buffers, the most of them that
    /// fit the budget, and the buffer size.
    pub attach: Option<
        unsafe extern "C" fn(user: *mut c_void, buffers: u64, capacity: u64, buffer_size: usize),
    >,
    /// Required. Proposes up to `want` buffers to evict: writes their indices to
    /// `out[0..want]` and returns how many it wrote. `buffers` gives the state of each buffer
    /// (`ucache_buffers_*`) during the call.
    pub choose_eviction: Option<
        unsafe extern "C" fn(
            user: *mut c_void,
            buffers: *const ucache_buffers,
            want: usize,
            out: *mut u64,
        ) -> usize,
    >,
    /// Optional. Whether buffer `index` may be evicted now (the application's veto).
    pub is_evictable: Option<unsafe extern "C" fn(user: *mut c_void, index: u64) -> bool>,
    /// Optional. Whether a missing buffer about to be read may enter the cache.
    pub admit: Option<unsafe extern "C" fn(user: *mut c_void, index: u64) -> bool>,
    /// Optional. After a miss on `index`, proposes buffers to read ahead: writes up to
    /// `max` (`UCACHE_PREFETCH_MAX`) indices to `out` and returns how many.
    pub choose_prefetch: Option<
        unsafe extern "C" fn(user: *mut c_void, index: u64, out: *mut u64, max: usize) -> usize,
    >,
    /// Optional (NULL costs nothing on hits). An access found buffer `index` cached.
    pub on_hit: Option<unsafe extern "C" fn(user: *mut c_void, index: u64)>,
    /// Optional. A demand access missed on buffer `index` (before room is made for it).
    pub on_miss: Option<unsafe extern "C" fn(user: *mut c_void, index: u64)>,
    /// Optional. Buffer `index` became resident.
    pub on_insert: Option<unsafe extern "C" fn(user: *mut c_void, index: u64)>,
    /// Optional. Buffer `index` left the cache.
    pub on_evict: Option<unsafe extern "C" fn(user: *mut c_void, index: u64)>,
    /// Optional. Called once when the policy is dropped: at unmap, or when `ucache_map`
    /// fails.
    pub destroy: Option<unsafe extern "C" fn(user: *mut c_void)>,
}

type Hook = Option<unsafe extern "C" fn(*mut c_void, u64)>;
type Ask = Option<unsafe extern "C" fn(*mut c_void, u64) -> bool>;

/// A C policy as a Rust [`Policy`].
pub(crate) struct CPolicy {
    ops: ucache_policy_ops,
    user: *mut c_void,
    name: String,
}

// SAFETY: `ucache_policy_ops` documents that its hooks are called from any thread,
// concurrently, with this user pointer: the C code promises that is safe.
unsafe impl Send for CPolicy {}
// SAFETY: as above.
unsafe impl Sync for CPolicy {}

impl CPolicy {
    /// Takes ownership of `user` at once: from here on, `destroy` is called exactly once
    /// (when the result is dropped), whatever fails next.
    pub(crate) fn new(ops: &ucache_policy_ops, user: *mut c_void) -> Result<CPolicy, Fail> {
        let mut p = CPolicy {
            ops: *ops,
            user,
            name: "c-policy".into(),
        };
        if !ops.name.is_null() {
            // SAFETY: not NULL; documented as a NUL-terminated string valid for the call.
            p.name = unsafe { CStr::from_ptr(ops.name) }
                .to_string_lossy()
                .into_owned();
        }
        if ops.choose_eviction.is_none() {
            return Err(Fail::null("policy_ops->choose_eviction"));
        }
        Ok(p)
    }

    fn hook(&self, f: Hook, index: u64) {
        if let Some(f) = f {
            // SAFETY: a hook of the table with the policy's user pointer; the contract of
            // `ucache_policy_ops`.
            unsafe { f(self.user, index) }
        }
    }

    fn ask(&self, f: Ask, index: u64) -> bool {
        match f {
            // SAFETY: as in `hook`.
            Some(f) => unsafe { f(self.user, index) },
            None => true,
        }
    }
}

impl Drop for CPolicy {
    fn drop(&mut self) {
        if let Some(destroy) = self.ops.destroy {
            // SAFETY: the table's destructor, called once, with the user pointer.
            unsafe { destroy(self.user) }
        }
    }
}

impl Policy for CPolicy {
    fn name(&self) -> &str {
        &self.name
    }

    fn attach(&mut self, layout: Layout) {
        if let Some(f) = self.ops.attach {
            // SAFETY: a hook of the table with the policy's user pointer.
            unsafe {
                f(
                    self.user,
                    layout.buffers,
                    layout.capacity,
                    layout.buffer_size,
                )
            }
        }
    }

    fn choose_eviction_buffers(&self, buffers: &Buffers<'_>, want: usize, out: &mut Vec<u64>) {
        let f = self.ops.choose_eviction.expect("checked by CPolicy::new");
        let start = out.len();
        out.resize(start + want, 0);
        let b = buffers as *const Buffers<'_> as *const ucache_buffers;
        // SAFETY: a hook of the table with the policy's user pointer, `buffers` alive for the
        // call, and room for `want` indices at `out[start..]`.
        let n = unsafe { f(self.user, b, want, out[start..].as_mut_ptr()) };
        out.truncate(start + n.min(want));
    }

    fn is_evictable(&self, index: u64) -> bool {
        self.ask(self.ops.is_evictable, index)
    }

    fn admit(&self, index: u64) -> bool {
        self.ask(self.ops.admit, index)
    }

    fn has_prefetching(&self) -> bool {
        self.ops.choose_prefetch.is_some()
    }

    fn choose_prefetch_buffers(&self, index: u64, out: &mut Vec<u64>) {
        if let Some(f) = self.ops.choose_prefetch {
            let start = out.len();
            out.resize(start + UCACHE_PREFETCH_MAX, 0);
            // SAFETY: a hook of the table with room for `UCACHE_PREFETCH_MAX` indices.
            let n = unsafe {
                f(
                    self.user,
                    index,
                    out[start..].as_mut_ptr(),
                    UCACHE_PREFETCH_MAX,
                )
            };
            out.truncate(start + n.min(UCACHE_PREFETCH_MAX));
        }
    }

    fn wants_hits(&self) -> bool {
        self.ops.on_hit.is_some()
    }

    fn on_miss(&self, index: u64) {
        self.hook(self.ops.on_miss, index)
    }

    fn on_hit(&self, index: u64) {
        self.hook(self.ops.on_hit, index)
    }

    fn on_insert(&self, index: u64) {
        self.hook(self.ops.on_insert, index)
    }

    fn on_evict(&self, index: u64) {
        self.hook(self.ops.on_evict, index)
    }
}
