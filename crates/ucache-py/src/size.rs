//! Byte sizes as Python arguments: an int, or a string such as `"1GiB"` or `"256M"`, parsed
//! by the same function as the `ucache` command's `--memory`, so both spell sizes alike.

use pyo3::prelude::*;
use pyo3::types::PyString;

use crate::errors::{raise, Kind};

/// A byte count given as `int` or size string.
#[derive(Clone, Copy, Debug)]
pub struct Size(pub u64);

impl<'a, 'py> FromPyObject<'a, 'py> for Size {
    type Error = PyErr;

    fn extract(ob: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        if let Ok(s) = ob.cast::<PyString>() {
            let s = s.to_cow()?;
            return ucache_cli::size::parse_size(&s)
                .map(Size)
                .map_err(|e| raise(Kind::InvalidArgument, e));
        }
        match ob.extract::<i128>() {
            Ok(n) => u64::try_from(n).map(Size).map_err(|_| {
                raise(
                    Kind::InvalidArgument,
                    format!("size {n} must be between 0 and 2^64-1 bytes"),
                )
            }),
            Err(_) => Err(raise(
                Kind::InvalidArgument,
                format!(
                    "a size must be an int or a string such as '1GiB', not {}",
                    ob.get_type().name()?
                ),
            )),
        }
    }
}
