//! `ucache.Landing`: the core's landing iterator (`Mapping::landing`) as a Python iterator of
//! [`Pin`]s, yielded in the order their buffers land.
//!
//! The core iterator borrows the mapping, and a Python iterator lives across Python calls, so
//! it is kept with an `Arc` of the mapping it borrows ([`Running`]), as a pin keeps its guard.
//! Each item is an ordinary shared [`Pin`] holding its own clone of the `Arc`, so its memoryview
//! is made safe by the pin's mechanism (counted exports), not a second one.
//!
//! Every call into the core iterator (`next`, and its drop, which waits for the reads it
//! started) runs with the GIL released: it waits for reads, and the IO threads that do them
//! may need the GIL themselves to run a policy written in Python.

use std::sync::Arc;

use parking_lot::Mutex;
use pyo3::prelude::*;
use ucache_core::{Landing as CoreLanding, Mapping as CoreMapping};

use crate::errors::{raise, IntoPy, Kind};
use crate::pin::{Pin, Pinned};

/// A core landing iterator, its lifetime erased, and the mapping it borrows. Fields drop in
/// declaration order: the iterator (unpinning what it holds, waiting for its reads) before the
/// mapping can go.
struct Running {
    landing: CoreLanding<'static, std::vec::IntoIter<u64>>,
    mapping: Arc<CoreMapping>,
}

// SAFETY: the iterator holds shared guards (unpinned by an atomic update of the buffer's state
// word, valid from any thread), a reference to the core mapping (which is `Sync`), indices and
// errors. Nothing in it is tied to the thread that made it, and the Mutex around it lets one
// thread at a time use it.
unsafe impl Send for Running {}

impl Running {
    fn start(
        mapping: Arc<CoreMapping>,
        indices: Vec<u64>,
        depth: usize,
    ) -> ucache_core::Result<Self> {
        let landing = mapping.landing(indices, depth)?;
        // SAFETY: the iterator borrows the core mapping inside `mapping`'s Arc allocation,
        // whose address does not change while `Running` owns the Arc; `Running` drops the
        // iterator first (field order), and every guard it yields goes into a `Pin` with a
        // clone of the same Arc ([`Pinned::shared`]'s contract). So no borrow outlives the
        // mapping, and `close` (which needs the last Arc) cannot unmap under one.
        let landing: CoreLanding<'static, _> = unsafe { std::mem::transmute(landing) };
        Ok(Running { landing, mapping })
    }

    /// The core iterator's next item; its guard goes into a Pin with a clone of `mapping`.
    fn next(&mut self) -> Option<ucache_core::Result<Pinned>> {
        // SAFETY: the guard borrows the core mapping in `self.mapping`, whose clone the
        // caller hands with it to `Pin::from_pinned`.
        self.landing
            .next()
            .map(|r| r.map(|g| unsafe { Pinned::shared(g) }))
    }
}

enum State {
    Idle(Box<Running>),
    /// A thread is in `__next__` (with the GIL released).
    Busy,
    /// Exhausted or closed: nothing held, nothing in flight.
    Done,
}

/// Drops `run` with the GIL released (see the module docs).
fn finish(py: Python<'_>, run: Box<Running>) {
    py.detach(move || drop(run));
}

/// Shared pins of a list of buffers in the order they land (see `Mapping.landing`).
#[pyclass(frozen, module = "ucache")]
pub struct Landing {
    state: Mutex<State>,
    name: String,
}

impl Landing {
    /// Starts the reads of `indices` (checked already), with the GIL released.
    pub fn start(
        py: Python<'_>,
        mapping: Arc<CoreMapping>,
        name: &str,
        indices: Vec<u64>,
        depth: usize,
    ) -> PyResult<Landing> {
        let run = py
            .detach(|| Running::start(mapping, indices, depth))
            .py_err()?;
        Ok(Landing {
            state: Mutex::new(State::Idle(Box::new(run))),
            name: name.to_string(),
        })
    }

    /// Takes the iterator out for a call (`None` once done), so that no lock is held while the
    /// GIL is released: another thread calling meanwhile is refused instead of blocking with
    /// the GIL held.
    fn take(&self) -> PyResult<Option<Box<Running>>> {
        let mut st = self.state.lock();
        match std::mem::replace(&mut *st, State::Busy) {
            State::Idle(run) => Ok(Some(run)),
            State::Done => {
                *st = State::Done;
                Ok(None)
            }
            State::Busy => Err(raise(
                Kind::InUse,
                format!(
                    "landing iterator of '{}' is in use by another thread",
                    self.name
                ),
            )),
        }
    }

    fn put(&self, state: State) {
        *self.state.lock() = state;
    }
}

impl Drop for Landing {
    fn drop(&mut self) {
        if let State::Idle(run) = std::mem::replace(self.state.get_mut(), State::Done) {
            // Dropped by Python (the object's last reference), so the GIL is held.
            Python::attach(|py| finish(py, run));
        }
    }
}

#[pymethods]
impl Landing {
    fn __iter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    /// The next buffer to land, as a shared `Pin`; the reads ahead go on meanwhile.
    fn __next__(&self, py: Python<'_>) -> PyResult<Option<Pin>> {
        let Some(mut run) = self.take()? else {
            return Ok(None);
        };
        let item = py.detach(|| run.next());
        match item {
            None => {
                self.put(State::Done);
                finish(py, run);
                Ok(None)
            }
            Some(r) => {
                let mapping = run.mapping.clone();
                self.put(State::Idle(run));
                let pinned = r.py_err()?;
                Ok(Some(Pin::from_pinned(pinned, mapping, &self.name)))
            }
        }
    }

    /// Stops early: unpins the buffers read ahead and not yet yielded, and waits for the reads
    /// in flight (at most the window). Pins already yielded stay valid. Idempotent.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        if let Some(run) = self.take()? {
            self.put(State::Done);
            finish(py, run);
        }
        Ok(())
    }

    #[getter]
    fn closed(&self) -> bool {
        matches!(*self.state.lock(), State::Done)
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
        let st = match *self.state.lock() {
            State::Idle(ref run) => format!("{:?}", run.landing),
            State::Busy => "running".into(),
            State::Done => "done".into(),
        };
        format!("<ucache.Landing of '{}' {st}>", self.name)
    }
}
