//! Handles and raw arguments.
//!
//! A cache, store or mapping handle is not a pointer to anything: it is a number that names
//! an entry of a registry, never reused, tagged with its type. So a handle that was freed or
//! unmapped, one of another type, or plain garbage is recognised and refused with an error
//! code instead of being dereferenced. The registry holds the object in an `Arc`: a call in
//! progress (and a pin) keeps it alive even if another thread frees the handle meanwhile.
//!
//! Raw pointer arguments (out-parameters, C strings, arrays) are read through the helpers at
//! the end of this file, which refuse NULL before anything is done.

use std::collections::BTreeMap;
use std::ffi::{c_char, CStr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::RwLock;

use crate::status::{ucache_status, Fail};

/// Handle numbers: `serial << TAG_BITS | tag`, serials from 1, shared by all types.
static NEXT_SERIAL: AtomicUsize = AtomicUsize::new(1);
const TAG_BITS: u32 = 2;

/// The live handles of one type.
pub(crate) struct Registry<T> {
    tag: usize,
    kind: &'static str,
    /// The status for a handle of this type that was released.
    gone: ucache_status,
    /// A B-tree rather than a hash map: its allocations are pointed to at their start, so
    /// leak checkers (valgrind) see the registry's memory as reachable at exit.
    live: RwLock<BTreeMap<usize, Arc<T>>>,
}

impl<T> Registry<T> {
    pub(crate) const fn new(tag: usize, kind: &'static str, gone: ucache_status) -> Self {
        Registry {
            tag,
            kind,
            gone,
            live: RwLock::new(BTreeMap::new()),
        }
    }

    /// A new handle for `value`.
    pub(crate) fn insert(&self, value: T) -> usize {
        let h = NEXT_SERIAL.fetch_add(1, Ordering::Relaxed) << TAG_BITS | self.tag;
        self.reinsert(h, Arc::new(value));
        h
    }

    /// Puts a removed entry back under its old handle.
    pub(crate) fn reinsert(&self, h: usize, value: Arc<T>) {
        self.live.write().insert(h, value);
    }

    /// Why `h` names no live entry.
    fn refuse(&self, h: usize) -> Fail {
        if h == 0 {
            Fail::null(self.kind)
        } else if h & ((1 << TAG_BITS) - 1) != self.tag
            || h >> TAG_BITS >= NEXT_SERIAL.load(Ordering::Relaxed)
        {
            Fail::new(
                ucache_status::UCACHE_ERR_BAD_HANDLE,
                format!("{h:#x} is not a {} handle", self.kind),
            )
        } else {
            Fail::new(
                self.gone,
                format!("{} handle {h:#x} was already released", self.kind),
            )
        }
    }

    /// The entry `h` names.
    pub(crate) fn get(&self, h: usize) -> Result<Arc<T>, Fail> {
        self.live
            .read()
            .get(&h)
            .cloned()
            .ok_or_else(|| self.refuse(h))
    }

    /// Removes `h`, whoever else still holds its entry.
    pub(crate) fn remove(&self, h: usize) -> Result<Arc<T>, Fail> {
        self.live.write().remove(&h).ok_or_else(|| self.refuse(h))
    }

    /// Removes `h` only if nobody else holds its entry (no call in progress, no pin), and
    /// returns it; otherwise `UCACHE_ERR_IN_USE` and the handle stays.
    pub(crate) fn take_sole(&self, h: usize) -> Result<T, Fail> {
        let mut live = self.live.write();
        let Some(entry) = live.get(&h) else {
            return Err(self.refuse(h));
        };
        // New holders clone under the read lock, which we exclude: the count can only fall.
        let others = Arc::strong_count(entry) - 1;
        if others > 0 {
            return Err(Fail::new(
                ucache_status::UCACHE_ERR_IN_USE,
                format!(
                    "{} handle {h:#x} is still in use ({others} pin(s) or call(s) in progress)",
                    self.kind
                ),
            ));
        }
        live.remove(&h)
            .and_then(|e| Arc::try_unwrap(e).ok())
            .ok_or_else(|| self.refuse(h))
    }
}

/// An out-parameter, checked for NULL when the call starts so that nothing is created for a
/// result that could not be handed over.
pub(crate) struct Out<T>(*mut T);

impl<T> Out<T> {
    pub(crate) fn new(p: *mut T, what: &str) -> Result<Self, Fail> {
        if p.is_null() {
            Err(Fail::null(what))
        } else {
            Ok(Out(p))
        }
    }
    pub(crate) fn set(self, value: T) {
        // SAFETY: not NULL (checked in `new`); the API documents every out-parameter as a
        // pointer to writable memory of its type, which is the caller's promise.
        unsafe { self.0.write(value) }
    }
}

/// A struct argument passed by pointer, read for the call.
pub(crate) fn arg<'a, T>(p: *const T, what: &str) -> Result<&'a T, Fail> {
    if p.is_null() {
        return Err(Fail::null(what));
    }
    // SAFETY: not NULL; the API documents struct arguments as pointing to an initialised
    // value of their type, valid for the call, which is the caller's promise.
    Ok(unsafe { &*p })
}

/// A NUL-terminated UTF-8 string argument.
pub(crate) fn c_str<'a>(p: *const c_char, what: &str) -> Result<&'a str, Fail> {
    if p.is_null() {
        return Err(Fail::null(what));
    }
    // SAFETY: not NULL; the API documents string arguments as NUL-terminated and valid for
    // the call, which is the caller's promise.
    let s = unsafe { CStr::from_ptr(p) };
    s.to_str()
        .map_err(|_| Fail::bad(format!("{what} is not valid UTF-8")))
}

/// Checks an array argument of `len` elements: NULL is allowed for an empty one only.
/// Returns whether it is empty.
fn check_array<T>(p: *const T, len: usize, what: &str) -> Result<bool, Fail> {
    if len == 0 {
        return Ok(true);
    }
    if p.is_null() {
        return Err(Fail::null(what));
    }
    if len
        .checked_mul(size_of::<T>().max(1))
        .is_none_or(|b| b > isize::MAX as usize)
    {
        return Err(Fail::bad(format!(
            "{what}: {len} elements is not a valid size"
        )));
    }
    if !(p as usize).is_multiple_of(align_of::<T>()) {
        return Err(Fail::bad(format!("{what} is not aligned")));
    }
    Ok(false)
}

/// An array argument of `len` elements.
pub(crate) fn slice<'a, T>(p: *const T, len: usize, what: &str) -> Result<&'a [T], Fail> {
    if check_array(p, len, what)? {
        return Ok(&[]);
    }
    // SAFETY: checked not NULL, aligned, and of a size that fits; the API documents array
    // arguments as valid for reads of `len` elements during the call, which is the caller's
    // promise.
    Ok(unsafe { std::slice::from_raw_parts(p, len) })
}

/// A writable array argument of `len` elements.
pub(crate) fn slice_mut<'a, T>(p: *mut T, len: usize, what: &str) -> Result<&'a mut [T], Fail> {
    if check_array(p, len, what)? {
        return Ok(&mut []);
    }
    // SAFETY: as in `slice`, and the API documents writable array arguments as valid for
    // writes and untouched by other threads during the call.
    Ok(unsafe { std::slice::from_raw_parts_mut(p, len) })
}
