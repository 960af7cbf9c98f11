//! Buffer indices from Python: any iterable of ints (a list, a `range`, a numpy integer
//! array), checked against the mapping before anything happens.
//!
//! The index-list primitives and `landing` take every index first, with the GIL held, and
//! only then release it for the call: the core never sees a bad index, and a bad list does
//! nothing. A negative index is refused rather than counted from the end, as Python sequences
//! would: a buffer list from arithmetic gone wrong should fail, not touch the last buffers.

use pyo3::exceptions::{PyOverflowError, PyTypeError};
use pyo3::prelude::*;

use crate::errors::{raise, Kind};

/// The indices of `obj`, each below `buffers`, in the order given (repeats kept: the
/// primitives treat a repeat as one, and `landing` yields a buffer as often as it is listed).
pub fn indices(obj: &Bound<'_, PyAny>, buffers: u64) -> PyResult<Vec<u64>> {
    let iter = obj.try_iter().map_err(|_| {
        PyTypeError::new_err(format!(
            "buffer indices must be an iterable of ints (a list, a range, a numpy integer \
             array), not {}",
            type_name(obj)
        ))
    })?;
    let mut v = Vec::with_capacity(obj.len().unwrap_or(0));
    for (k, item) in iter.enumerate() {
        v.push(index(&item?, k, buffers)?);
    }
    Ok(v)
}

/// Item `k` of a list as a buffer index below `buffers`.
fn index(item: &Bound<'_, PyAny>, k: usize, buffers: u64) -> PyResult<u64> {
    let out = |what: &str| {
        raise(
            Kind::OutOfRange,
            format!(
                "buffer index {item} (item {k} of the list) {what}: the mapping has {buffers} \
                 buffer(s), 0 to {}",
                buffers.saturating_sub(1)
            ),
        )
    };
    // Integers only, through `__index__` (so numpy integer scalars too, but not floats).
    match item.extract::<u64>() {
        Ok(i) if i < buffers => Ok(i),
        Ok(_) => Err(out("is past the last buffer")),
        Err(e) => {
            let py = item.py();
            match item.extract::<i64>() {
                Ok(_) => Err(out("is negative")),
                Err(e2) if e2.is_instance_of::<PyOverflowError>(py) => {
                    if item.lt(0)? {
                        Err(out("is negative"))
                    } else {
                        Err(out("is past the last buffer"))
                    }
                }
                Err(_) if e.is_instance_of::<PyOverflowError>(py) => {
                    Err(out("is past the last buffer"))
                }
                Err(_) => Err(PyTypeError::new_err(format!(
                    "buffer index (item {k} of the list) must be an int, not {}",
                    type_name(item)
                ))),
            }
        }
    }
}

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".into())
}
