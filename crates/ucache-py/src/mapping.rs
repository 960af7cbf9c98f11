//! `ucache.Mapping`: one mapped object, its explicit primitives, and (when transparent) its
//! memory as a zero-copy buffer.
//!
//! The core mapping sits in an `Arc` so that pins and calls in progress keep it alive without
//! holding a lock while the GIL is released; `close` unmaps only when it holds the last
//! reference and no buffer export is alive, so no pointer handed to Python can outlive the
//! memory it points to.

use std::ffi::c_int;
use std::sync::Arc;

use parking_lot::RwLock;
use pyo3::buffer::PyBuffer;
use pyo3::exceptions::PyBufferError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use ucache_core::Mapping as CoreMapping;

use crate::buffer::Exports;
use crate::errors::{raise, IntoPy, Kind};
use crate::pin::Pin;

/// A mapped object (see `Cache.map`).
#[pyclass(frozen, module = "ucache")]
pub struct Mapping {
    /// `None` once closed.
    inner: RwLock<Option<Arc<CoreMapping>>>,
    exports: Exports,
    name: String,
    /// A Python policy's first exception, if the mapping runs one.
    policy_failure: Option<Arc<crate::policy::Failure>>,
}

impl Mapping {
    pub fn new(
        inner: CoreMapping,
        name: String,
        policy_failure: Option<Arc<crate::policy::Failure>>,
    ) -> Self {
        Mapping {
            inner: RwLock::new(Some(Arc::new(inner))),
            exports: Exports::default(),
            name,
            policy_failure,
        }
    }

    /// The core mapping, or `Closed`.
    fn get(&self) -> PyResult<Arc<CoreMapping>> {
        self.inner.read().clone().ok_or_else(|| closed(&self.name))
    }

    /// Runs the explicit primitive `op` on the range (checked as [`range`] does) with the GIL
    /// released.
    fn range_op(
        &self,
        py: Python<'_>,
        offset: u64,
        length: Option<u64>,
        op: fn(&CoreMapping, u64, u64) -> ucache_core::Result<()>,
    ) -> PyResult<()> {
        let m = self.get()?;
        let (o, n) = range(&m, offset, length)?;
        py.detach(|| op(&m, o, n)).py_err()
    }

    /// Runs the index-list primitive `op` on `indices` (any iterable of ints, every one
    /// checked first: a bad list does nothing) with the GIL released.
    fn indices_op(
        &self,
        py: Python<'_>,
        indices: &Bound<'_, PyAny>,
        op: fn(&CoreMapping, &[u64]) -> ucache_core::Result<()>,
    ) -> PyResult<()> {
        let m = self.get()?;
        let v = crate::indices::indices(indices, m.buffers())?;
        py.detach(|| op(&m, &v)).py_err()
    }
}

fn closed(name: &str) -> PyErr {
    raise(Kind::Closed, format!("mapping of '{name}' is closed"))
}

/// `OutOfRange` for buffer `index` of `m`, past its last.
fn past_last(m: &CoreMapping, index: u64) -> PyErr {
    raise(
        Kind::OutOfRange,
        format!("buffer {index} is past the last buffer ({})", m.buffers()),
    )
}

/// `[offset, offset + length)` checked against the mapping; `length` defaults to the rest.
fn range(m: &CoreMapping, offset: u64, length: Option<u64>) -> PyResult<(u64, u64)> {
    let len = m.len();
    let out = |what: String| raise(Kind::OutOfRange, what);
    if offset > len {
        return Err(out(format!(
            "offset {offset} is past the end of the mapping ({len} bytes)"
        )));
    }
    let n = length.unwrap_or(len - offset);
    if n > len - offset {
        return Err(out(format!(
            "range of {n} bytes at offset {offset} exceeds the mapping ({len} bytes)"
        )));
    }
    Ok((offset, n))
}

/// Copies `data` to `offset` through exclusive pins, one buffer at a time.
fn write_from(m: &CoreMapping, offset: u64, data: &[u8]) -> ucache_core::Result<()> {
    let bs = m.buffer_size() as u64;
    let mut done = 0usize;
    while done < data.len() {
        let at = offset + done as u64;
        let index = at / bs;
        let within = (at % bs) as usize;
        let mut g = m.pin_exclusive(index)?;
        let n = (g.len() - within).min(data.len() - done);
        g[within..within + n].copy_from_slice(&data[done..done + n]);
        done += n;
    }
    Ok(())
}

/// A mapping the program drops without `close` (garbage collected) is unmapped with the
/// interpreter lock released: unmapping waits for loads in flight, and the IO threads that
/// finish them call a Python policy's hooks, which take the lock.
impl Drop for Mapping {
    fn drop(&mut self) {
        if let Some(m) = self.inner.get_mut().take() {
            Python::attach(|py| py.detach(move || drop(m)));
        }
    }
}

#[pymethods]
impl Mapping {
    /// Mapped bytes.
    fn __len__(&self) -> PyResult<usize> {
        Ok(self.get()?.len() as usize)
    }
    #[getter]
    fn size(&self) -> PyResult<u64> {
        Ok(self.get()?.len())
    }
    #[getter]
    fn name(&self) -> &str {
        &self.name
    }
    #[getter]
    fn buffer_size(&self) -> PyResult<usize> {
        Ok(self.get()?.buffer_size())
    }
    /// Number of buffers (the last may be partial).
    #[getter]
    fn buffers(&self) -> PyResult<u64> {
        Ok(self.get()?.buffers())
    }
    /// Buffers resident now.
    #[getter]
    fn resident(&self) -> PyResult<u64> {
        Ok(self.get()?.resident())
    }
    /// The requests the store sent for this mapping (`{"reads", "bytes_read"}`: S3's GETs and
    /// the bytes they asked for, gaps read through included), or None where the store does
    /// not count them (local files).
    fn store_requests<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let Some(r) = self.get()?.store_requests() else {
            return Ok(None);
        };
        let d = PyDict::new(py);
        d.set_item("reads", r.reads)?;
        d.set_item("bytes_read", r.bytes_read)?;
        Ok(Some(d))
    }
    #[getter]
    fn writable(&self) -> PyResult<bool> {
        Ok(self.get()?.is_writable())
    }
    #[getter]
    fn transparent(&self) -> PyResult<bool> {
        Ok(self.get()?.is_transparent())
    }
    #[getter]
    fn policy(&self) -> PyResult<String> {
        Ok(self.get()?.policy_name().to_string())
    }
    /// A Python policy's first hook exception, as a `ucache.PolicyError` whose `__cause__` is
    /// the exception (the mapping runs on the cache's fallback since), or `None`.
    #[getter]
    fn policy_error<'py>(
        &self,
        py: Python<'py>,
    ) -> Option<Bound<'py, pyo3::exceptions::PyBaseException>> {
        let f = self.policy_failure.as_ref()?;
        f.error(py).map(|e| e.into_value(py).into_bound(py))
    }
    #[getter]
    fn closed(&self) -> bool {
        self.inner.read().is_none()
    }
    /// Whether buffer `index` is resident now (for diagnostics and tests).
    fn is_resident(&self, index: u64) -> PyResult<bool> {
        let m = self.get()?;
        match m.state(index) {
            Ok(w) => Ok(w.phase() == ucache_core::Phase::Cached),
            Err(_) => Err(past_last(&m, index)),
        }
    }
    /// The buffer holding byte `offset`.
    fn buffer_of(&self, offset: u64) -> PyResult<u64> {
        let m = self.get()?;
        range(&m, offset, Some(0))?;
        Ok(m.buffer_of(offset))
    }

    /// Brings the buffers overlapping the range into memory (one batch of reads).
    #[pyo3(signature = (offset = 0, length = None))]
    fn ensure_cached(&self, py: Python<'_>, offset: u64, length: Option<u64>) -> PyResult<()> {
        self.range_op(py, offset, length, CoreMapping::ensure_cached)
    }

    /// Starts loading the buffers overlapping the range in the background.
    #[pyo3(signature = (offset = 0, length = None))]
    fn prefetch(&self, py: Python<'_>, offset: u64, length: Option<u64>) -> PyResult<()> {
        self.range_op(py, offset, length, CoreMapping::prefetch)
    }

    /// Evicts the unpinned buffers overlapping the range, writing dirty ones back first.
    #[pyo3(signature = (offset = 0, length = None))]
    fn evict(&self, py: Python<'_>, offset: u64, length: Option<u64>) -> PyResult<()> {
        self.range_op(py, offset, length, CoreMapping::evict)
    }

    /// Starts writing back the dirty buffers overlapping the range.
    #[pyo3(signature = (offset = 0, length = None))]
    fn writeback(&self, py: Python<'_>, offset: u64, length: Option<u64>) -> PyResult<()> {
        self.range_op(py, offset, length, CoreMapping::writeback)
    }

    /// Writes back the dirty buffers overlapping the range and makes them durable.
    #[pyo3(signature = (offset = 0, length = None))]
    fn msync(&self, py: Python<'_>, offset: u64, length: Option<u64>) -> PyResult<()> {
        self.range_op(py, offset, length, CoreMapping::msync)
    }

    /// Brings the listed buffers into memory (one batch of reads).
    fn ensure_cached_buffers(&self, py: Python<'_>, indices: &Bound<'_, PyAny>) -> PyResult<()> {
        self.indices_op(py, indices, CoreMapping::ensure_cached_buffers)
    }

    /// Starts loading the listed buffers in the background.
    fn prefetch_buffers(&self, py: Python<'_>, indices: &Bound<'_, PyAny>) -> PyResult<()> {
        self.indices_op(py, indices, CoreMapping::prefetch_buffers)
    }

    /// Evicts the listed buffers that are not pinned, writing dirty ones back first.
    fn evict_buffers(&self, py: Python<'_>, indices: &Bound<'_, PyAny>) -> PyResult<()> {
        self.indices_op(py, indices, CoreMapping::evict_buffers)
    }

    /// Starts writing back the listed buffers that are dirty.
    fn writeback_buffers(&self, py: Python<'_>, indices: &Bound<'_, PyAny>) -> PyResult<()> {
        self.indices_op(py, indices, CoreMapping::writeback_buffers)
    }

    /// Writes back the listed buffers that are dirty and makes them durable.
    fn msync_buffers(&self, py: Python<'_>, indices: &Bound<'_, PyAny>) -> PyResult<()> {
        self.indices_op(py, indices, CoreMapping::msync_buffers)
    }

    /// Shared pins of the listed buffers in the order they land, with up to `depth` reads
    /// in flight ahead of the consumer (see `ucache.Landing`).
    #[pyo3(signature = (indices, depth = 32))]
    fn landing(
        &self,
        py: Python<'_>,
        indices: &Bound<'_, PyAny>,
        depth: usize,
    ) -> PyResult<crate::landing::Landing> {
        let m = self.get()?;
        let v = crate::indices::indices(indices, m.buffers())?;
        crate::landing::Landing::start(py, m, &self.name, v, depth)
    }

    /// Lifts the poison of a failed sync; returns the failure it cleared, if any.
    fn clear_sync_failure(&self) -> PyResult<Option<String>> {
        Ok(self.get()?.clear_sync_failure())
    }

    /// `n` bytes at `offset` (default: to the end), copied through the cache.
    #[pyo3(signature = (offset = 0, n = None))]
    fn read<'py>(
        &self,
        py: Python<'py>,
        offset: u64,
        n: Option<u64>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let m = self.get()?;
        let (o, n) = range(&m, offset, n)?;
        // One call however large: `Mapping::read` keeps many reads in flight and streams
        // through the budget, and a program reading in pieces reads ahead across its calls.
        PyBytes::new_with(py, n as usize, |buf| py.detach(|| m.read(o, buf)).py_err())
    }

    /// Copies `data` (any bytes-like object) to `offset` through exclusive pins.
    fn write(&self, py: Python<'_>, offset: u64, data: &Bound<'_, PyAny>) -> PyResult<()> {
        let m = self.get()?;
        let bytes = PyBuffer::<u8>::get(data)?.to_vec(py)?;
        range(&m, offset, Some(bytes.len() as u64))?;
        py.detach(|| write_from(&m, offset, &bytes)).py_err()
    }

    /// Pins buffer `index` (shared, or exclusive for writing). Use as a context manager:
    /// `with m.pin(i) as view:` gives a memoryview of the buffer, released after the block.
    #[pyo3(signature = (index, exclusive = false))]
    fn pin(&self, py: Python<'_>, index: u64, exclusive: bool) -> PyResult<Pin> {
        let m = self.get()?;
        if index >= m.buffers() {
            return Err(past_last(&m, index));
        }
        Pin::new(py, m, &self.name, index, exclusive)
    }

    /// Writes back everything and unmaps. Refused (`InUse`) while pins or views of the
    /// memory are alive; a failed write-back leaves the mapping open, dirty data included.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let taken = {
            let mut g = self.inner.write();
            let Some(arc) = g.take() else {
                return Ok(());
            };
            let views = self.exports.count();
            if views > 0 {
                *g = Some(arc);
                return Err(raise(
                    Kind::InUse,
                    format!(
                        "mapping of '{}' has {views} live view(s) of its memory (memoryviews, \
                         numpy arrays): release them before closing",
                        self.name
                    ),
                ));
            }
            match Arc::try_unwrap(arc) {
                Ok(m) => m,
                Err(arc) => {
                    let users = Arc::strong_count(&arc) - 1;
                    *g = Some(arc);
                    return Err(raise(
                        Kind::InUse,
                        format!(
                            "mapping of '{}' has {users} pin(s), landing iterator(s) or \
                             call(s) in progress: release the pins and finish or close the \
                             iterators before closing",
                            self.name
                        ),
                    ));
                }
            }
        };
        match py.detach(|| taken.unmap()) {
            Ok(()) => Ok(()),
            Err(e) => {
                let err = crate::errors::to_py(e.error);
                *self.inner.write() = Some(Arc::new(e.mapping));
                Err(err)
            }
        }
    }

    fn __enter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    fn __exit__(
        &self,
        py: Python<'_>,
        _ty: &Bound<'_, PyAny>,
        _value: &Bound<'_, PyAny>,
        _tb: &Bound<'_, PyAny>,
    ) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }

    fn __repr__(&self) -> String {
        match &*self.inner.read() {
            Some(m) => format!(
                "<ucache.Mapping '{}' {} bytes, buffers of {}, {}{}{}>",
                self.name,
                m.len(),
                m.buffer_size(),
                if m.is_writable() {
                    "writable"
                } else {
                    "read-only"
                },
                if m.is_transparent() {
                    ", transparent"
                } else {
                    ""
                },
                format_args!(", policy {}", m.policy_name()),
            ),
            None => format!("<ucache.Mapping '{}' closed>", self.name),
        }
    }

    /// A transparent mapping's memory, zero-copy; writable when the mapping is.
    unsafe fn __getbuffer__(
        slf: Bound<'_, Self>,
        view: *mut ffi::Py_buffer,
        flags: c_int,
    ) -> PyResult<()> {
        let this = slf.get();
        let g = this.inner.read();
        let m = g.as_ref().ok_or_else(|| closed(&this.name))?;
        if !m.is_transparent() {
            return Err(PyBufferError::new_err(format!(
                "mapping of '{}' is not transparent: map it with transparent=True to use its \
                 memory directly, or use pin() or read()",
                this.name
            )));
        }
        let (ptr, len, writable) = (m.as_mut_ptr(), m.len() as usize, m.is_writable());
        // SAFETY: the mapping is alive (we hold the lock that `close` needs) and `close`
        // refuses to unmap while this export is counted; loads and stores to a transparent
        // mapping are served by its fault handler, so any byte of it may be touched.
        unsafe {
            this.exports
                .export(slf.clone().into_any(), view, flags, ptr, len, writable)
        }
    }

    unsafe fn __releasebuffer__(&self, _view: *mut ffi::Py_buffer) {
        self.exports.release();
    }
}
