//! `ucache.Pin`: a pinned buffer as a context manager whose memoryview is valid inside the
//! `with` block and refused after it.
//!
//! Python can keep a memoryview (or a numpy array, or a slice, made from one) past the block
//! that produced it, so unpinning cannot simply follow the block: the buffer could be evicted
//! and refilled under a live pointer. Instead every export of the buffer is counted
//! ([`Exports`]). Leaving the block releases the memoryview it handed out, which makes any
//! further use of that memoryview raise `ValueError`; if other exports made from it are still
//! alive, leaving the block raises `ucache.InUse` and the buffer stays pinned until the last of
//! them is released (`__releasebuffer__` then unpins). Either way no view can ever see memory
//! that is no longer pinned.

use std::ffi::c_int;
use std::sync::Arc;

use parking_lot::Mutex;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyMemoryView;
use pyo3::{PyTraverseError, PyVisit};
use ucache_core::{ExclusiveGuard, Mapping as CoreMapping, SharedGuard};

use crate::buffer::Exports;
use crate::errors::{raise, IntoPy, Kind};

/// A pin, its lifetime erased: it borrows the core mapping that [`Held`] keeps alive.
enum Guard {
    Shared(#[allow(dead_code)] SharedGuard<'static>),
    Exclusive(ExclusiveGuard<'static>),
}

/// A guard and the mapping it borrows, which may be dropped on any thread. Fields drop in
/// declaration order: the guard unpins before the mapping can go, and once unpinned the pin
/// no longer keeps the mapping from being closed.
struct Held {
    guard: Guard,
    /// Never read: owned so that the mapping the guard borrows outlives it.
    #[allow(dead_code)]
    mapping: Arc<CoreMapping>,
}

// SAFETY: unpinning is an atomic update of the buffer's state word, valid from any thread.
// An exclusive guard dropped on a thread other than the one that took it (only when the last
// view of it is released there, or the pin is garbage collected there) leaves that thread's
// record of its exclusive pins, which serves only to report `WouldDeadlock` instead of waiting
// on oneself, one entry too long: at worst a later wait of that thread on that very buffer
// reports `WouldDeadlock`. No memory is touched through the guard after the move.
unsafe impl Send for Guard {}

enum State {
    Held(Held),
    /// Leaving the block found exports still alive: unpinned by the last `__releasebuffer__`.
    Releasing(Held),
    Released,
}

/// A pinned buffer (see `Mapping.pin`).
#[pyclass(frozen, module = "ucache")]
pub struct Pin {
    state: Mutex<State>,
    /// The memoryview `__enter__` handed out, released on exit.
    view: Mutex<Option<Py<PyAny>>>,
    exports: Exports,
    index: u64,
    exclusive: bool,
    ptr: usize,
    len: usize,
    name: String,
}

/// A guard taken with the GIL released, its lifetime erased, with what a [`Pin`] needs of
/// it: made by [`Pinned::shared`] or [`Pinned::exclusive`], the one place where a guard's
/// lifetime is erased, and turned into a `Pin` (which owns the mapping the guard borrows) by
/// [`Pin::from_pinned`].
pub(crate) struct Pinned {
    guard: Guard,
    index: u64,
    exclusive: bool,
    ptr: usize,
    len: usize,
}

impl Pinned {
    /// # Safety
    /// `g` borrows the core mapping inside an `Arc<CoreMapping>` that the caller hands,
    /// with the result, to [`Pin::from_pinned`]: the Pin owns a clone of that Arc and drops
    /// it after the guard, so the borrow outlives the guard at a fixed address.
    pub(crate) unsafe fn shared(g: SharedGuard<'_>) -> Pinned {
        let (index, ptr, len) = (g.index(), g.as_ptr() as usize, g.len());
        // SAFETY: per this function's contract.
        let g: SharedGuard<'static> = unsafe { std::mem::transmute(g) };
        Pinned {
            guard: Guard::Shared(g),
            index,
            exclusive: false,
            ptr,
            len,
        }
    }

    /// # Safety
    /// As [`Pinned::shared`].
    unsafe fn exclusive(index: u64, mut g: ExclusiveGuard<'_>) -> Pinned {
        let (ptr, len) = (g.as_mut_ptr() as usize, g.len());
        // SAFETY: per this function's contract.
        let g: ExclusiveGuard<'static> = unsafe { std::mem::transmute(g) };
        Pinned {
            guard: Guard::Exclusive(g),
            index,
            exclusive: true,
            ptr,
            len,
        }
    }
}

impl Pin {
    /// Pins buffer `index` of `mapping`, waiting for its load with the GIL released.
    pub fn new(
        py: Python<'_>,
        mapping: Arc<CoreMapping>,
        name: &str,
        index: u64,
        exclusive: bool,
    ) -> PyResult<Pin> {
        let pinned = py
            .detach(|| -> ucache_core::Result<Pinned> {
                if exclusive {
                    let g = mapping.pin_exclusive(index)?;
                    // SAFETY: the guard borrows the core mapping inside `mapping`'s Arc, which
                    // goes with it to `from_pinned` below.
                    Ok(unsafe { Pinned::exclusive(index, g) })
                } else {
                    let g = mapping.pin_shared(index)?;
                    // SAFETY: as above.
                    Ok(unsafe { Pinned::shared(g) })
                }
            })
            .py_err()?;
        Ok(Pin::from_pinned(pinned, mapping, name))
    }

    /// The Python object of a guard of `mapping` (see [`Pinned`]'s constructors, whose
    /// contract names this `mapping`).
    pub(crate) fn from_pinned(p: Pinned, mapping: Arc<CoreMapping>, name: &str) -> Pin {
        Pin {
            state: Mutex::new(State::Held(Held {
                guard: p.guard,
                mapping,
            })),
            view: Mutex::new(None),
            exports: Exports::default(),
            index: p.index,
            exclusive: p.exclusive,
            ptr: p.ptr,
            len: p.len,
            name: name.to_string(),
        }
    }

    fn released_error(&self) -> PyErr {
        raise(
            Kind::Closed,
            format!(
                "pin of buffer {} of '{}' was released",
                self.index, self.name
            ),
        )
    }

    /// Unpins now if no export is alive; otherwise leaves the unpin to the last release.
    fn finish(&self) -> PyResult<()> {
        let mut st = self.state.lock();
        let held = match std::mem::replace(&mut *st, State::Released) {
            State::Held(h) | State::Releasing(h) => h,
            State::Released => return Ok(()),
        };
        let views = self.exports.count();
        if views > 0 {
            *st = State::Releasing(held);
            return Err(raise(
                Kind::InUse,
                format!(
                    "buffer {} of '{}' has {views} view(s) still alive (a numpy array or slice \
                     made from the pin's memoryview): it stays pinned until they are released",
                    self.index, self.name
                ),
            ));
        }
        drop(held);
        Ok(())
    }
}

#[pymethods]
impl Pin {
    #[getter]
    fn index(&self) -> u64 {
        self.index
    }
    #[getter]
    fn exclusive(&self) -> bool {
        self.exclusive
    }
    /// Whether the pin has been released (views of it may still hold the buffer pinned).
    #[getter]
    fn released(&self) -> bool {
        !matches!(*self.state.lock(), State::Held(_))
    }
    fn __len__(&self) -> usize {
        self.len
    }

    /// The buffer as a memoryview (writable for an exclusive pin), released with the pin.
    #[getter]
    fn view<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        let this = slf.get();
        if let Some(v) = &*this.view.lock() {
            return Ok(v.bind(slf.py()).clone());
        }
        if !matches!(*this.state.lock(), State::Held(_)) {
            return Err(this.released_error());
        }
        let v = PyMemoryView::from(slf.as_any())?.into_any();
        *this.view.lock() = Some(v.clone().unbind());
        Ok(v)
    }

    fn __enter__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        Self::view(slf)
    }

    /// Releases the memoryview and unpins. Raises `InUse` (and unpins later) if views made
    /// from it are still alive.
    fn release(&self, py: Python<'_>) -> PyResult<()> {
        let view = self.view.lock().take();
        if let Some(v) = view {
            // Fails with BufferError if exports were made from the memoryview itself (a numpy
            // array): those are counted below and end the pin when released.
            let _ = v.bind(py).call_method0("release");
        }
        self.finish()
    }

    fn __exit__(
        &self,
        py: Python<'_>,
        _ty: &Bound<'_, PyAny>,
        _value: &Bound<'_, PyAny>,
        _tb: &Bound<'_, PyAny>,
    ) -> PyResult<bool> {
        self.release(py)?;
        Ok(false)
    }

    fn __repr__(&self) -> String {
        format!(
            "<ucache.Pin buffer {} ({}){}>",
            self.index,
            if self.exclusive {
                "exclusive"
            } else {
                "shared"
            },
            if self.released() { ", released" } else { "" }
        )
    }

    unsafe fn __getbuffer__(
        slf: Bound<'_, Self>,
        view: *mut ffi::Py_buffer,
        flags: c_int,
    ) -> PyResult<()> {
        let this = slf.get();
        let mut st = this.state.lock();
        let State::Held(Held { guard, .. }) = &mut *st else {
            return Err(this.released_error());
        };
        if let Guard::Exclusive(g) = guard {
            // Python may write through the view: the buffer is written back when unpinned.
            g.mark_dirty();
        }
        // SAFETY: the buffer is pinned while `state` holds the guard, and the guard is only
        // dropped once this export is released (`finish` checks the count under this lock).
        unsafe {
            this.exports.export(
                slf.clone().into_any(),
                view,
                flags,
                this.ptr as *mut u8,
                this.len,
                this.exclusive,
            )
        }
    }

    unsafe fn __releasebuffer__(&self, _view: *mut ffi::Py_buffer) {
        if self.exports.release() == 0 {
            let mut st = self.state.lock();
            if matches!(*st, State::Releasing(_)) {
                *st = State::Released;
            }
        }
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        if let Some(v) = self.view.try_lock().as_deref().and_then(Option::as_ref) {
            visit.call(v)?;
        }
        Ok(())
    }

    fn __clear__(&self) {
        self.view.lock().take();
    }
}
