//! Zero-copy exports of cache memory through the buffer protocol, counted.
//!
//! An exporter (a transparent mapping, a pin) hands Python a raw pointer into the mapping. The
//! pointer is valid only while the mapping is mapped (and, for a pin, while the buffer is
//! pinned), so every export is counted here and the owner refuses to unmap or unpin while the
//! count is not zero: Python calls `__releasebuffer__` once the last memoryview, numpy array or
//! slice made from an export is gone, and only then may the memory go.

use std::ffi::c_int;
use std::sync::atomic::{AtomicUsize, Ordering};

use pyo3::ffi;
use pyo3::prelude::*;

/// Live exports of one object.
#[derive(Default, Debug)]
pub struct Exports(AtomicUsize);

impl Exports {
    pub fn count(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }

    /// Fills `view` with `len` bytes at `ptr`, owned by `owner`, and counts the export.
    /// `PyBuffer_FillInfo` refuses a writable request on read-only memory with `BufferError`.
    ///
    /// # Safety
    /// `view` comes from the buffer protocol; `ptr..ptr+len` stays valid (and writable, if
    /// `writable`) until the matching [`Exports::release`], which the owner guarantees by
    /// refusing to release the memory while [`Exports::count`] is not zero.
    pub unsafe fn export(
        &self,
        owner: Bound<'_, PyAny>,
        view: *mut ffi::Py_buffer,
        flags: c_int,
        ptr: *mut u8,
        len: usize,
        writable: bool,
    ) -> PyResult<()> {
        let py = owner.py();
        // SAFETY: per this function's contract; FillInfo takes a new reference to `owner`
        // into `view.obj`, which keeps the owner alive until the view is released.
        let rc = unsafe {
            ffi::PyBuffer_FillInfo(
                view,
                owner.as_ptr(),
                ptr.cast(),
                len as ffi::Py_ssize_t,
                c_int::from(!writable),
                flags,
            )
        };
        if rc != 0 {
            return Err(PyErr::fetch(py));
        }
        self.0.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    /// One export is gone. Returns the exports left.
    pub fn release(&self) -> usize {
        self.0.fetch_sub(1, Ordering::SeqCst) - 1
    }
}
