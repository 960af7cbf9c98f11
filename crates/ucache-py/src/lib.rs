//! The `ucache._ucache` extension module: the native half of the Python package `ucache`
//! (python/ucache), which re-exports it and adds the fsspec filesystem and the
//! libCacheSim-style simulator wrappers in Python.
//!
//! Every call that can block (a load, a write-back, an S3 request, a replay) releases the GIL,
//! and every error is a `ucache.Error` (see [`errors`]); nothing panics across into Python.

mod buffer;
mod cache;
mod errors;
mod indices;
mod landing;
mod mapping;
mod pin;
mod policy;
mod simulate;
mod size;
mod stats;
mod store;

use pyo3::prelude::*;

#[pymodule]
fn _ucache(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<cache::Cache>()?;
    m.add_class::<mapping::Mapping>()?;
    m.add_class::<pin::Pin>()?;
    m.add_class::<landing::Landing>()?;
    m.add_function(wrap_pyfunction!(simulate::simulate, m)?)?;
    m.add("POLICY_NAMES", ucache_core::policy::POLICY_NAMES.to_vec())?;
    Ok(())
}
