//! `ucache.Cache`: a memory budget, the `map` call that puts files and S3 objects behind it,
//! and its statistics.

use std::time::Duration;

use crate::policy::{choose, Chosen};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use ucache_core::policy::prefetch::{ColumnChunks, WithPrefetch};
use ucache_core::policy::{Clock, Policy};
use ucache_core::{Cache as CoreCache, CacheOptions, MapOptions};

use crate::errors::{raise, IntoPy, Kind};
use crate::mapping::Mapping;
use crate::size::Size;
use crate::stats::stats_dict;
use crate::store::{locate, S3Options};

/// Buffer size of S3 mappings when none is given: each miss is a ranged GET, so buffers much
/// smaller than this pay a round trip for a few KiB.
const S3_DEFAULT_BUFFER: u64 = 1 << 20;

/// A memory budget shared by mappings.
#[pyclass(frozen, module = "ucache")]
pub struct Cache {
    inner: CoreCache,
}

#[pymethods]
impl Cache {
    /// `memory`: the budget (int bytes or "1GiB"); `batch` buffers or `batch_bytes` evicted per
    /// round; `io_threads` for prefetch and write-back; `budget_wait` seconds a load waits for
    /// memory when nothing is evictable before raising `BudgetExhausted`; `keep_idle_shares`:
    /// mapping weights as reservations, kept by mappings nobody uses (default: an idle
    /// mapping's buffers go first, `ucache::policy::ReservedShares`).
    #[new]
    #[pyo3(signature = (memory = Size(1 << 30), *, batch = None, batch_bytes = None,
        io_threads = None, background_eviction = true, budget_wait = None,
        profile_faults = false, keep_idle_shares = false))]
    // Python's keyword arguments, one each.
    #[allow(clippy::too_many_arguments)]
    fn new(
        memory: Size,
        batch: Option<usize>,
        batch_bytes: Option<Size>,
        io_threads: Option<usize>,
        background_eviction: bool,
        budget_wait: Option<f64>,
        profile_faults: bool,
        keep_idle_shares: bool,
    ) -> PyResult<Self> {
        let mut o = CacheOptions::new(memory.0)
            .background_eviction(background_eviction)
            .profile_faults(profile_faults);
        if keep_idle_shares {
            o = o.global_policy(std::sync::Arc::new(ucache_core::policy::ReservedShares));
        }
        if batch.is_some() && batch_bytes.is_some() {
            return Err(raise(
                Kind::InvalidArgument,
                "give batch (buffers) or batch_bytes, not both",
            ));
        }
        if let Some(b) = batch {
            o = o.batch(b);
        }
        if let Some(b) = batch_bytes {
            o = o.batch_bytes(b.0);
        }
        if let Some(n) = io_threads {
            o = o.io_threads(n);
        }
        if let Some(s) = budget_wait {
            let d = Duration::try_from_secs_f64(s).map_err(|_| {
                raise(
                    Kind::InvalidArgument,
                    format!("budget_wait {s} is not a number of seconds"),
                )
            })?;
            o = o.budget_wait(d);
        }
        Ok(Cache {
            inner: CoreCache::new(o).py_err()?,
        })
    }

    /// The budget in bytes.
    #[getter]
    fn memory(&self) -> u64 {
        self.inner.budget()
    }

    /// Bytes of buffers resident now, across mappings.
    #[getter]
    fn used(&self) -> u64 {
        self.inner.used()
    }

    /// Maps a local path or an `s3://bucket/key` URL. See the type stubs for every option.
    #[pyo3(signature = (path, *, buffer_size = None, writable = false, create = false,
        length = None, offset = 0, transparent = false, policy = None, policy_params = None,
        readahead = true, readahead_inline = false, file_view = false,
        track_access = false, weight = 1, endpoint = None, access_key = None,
        secret_key = None, session_token = None, region = None, allow_http = None,
        coalesce_gap = None, column_chunks = None, column_chunks_depth = 2))]
    #[allow(clippy::too_many_arguments)]
    fn map(
        &self,
        py: Python<'_>,
        path: &Bound<'_, PyAny>,
        buffer_size: Option<Size>,
        writable: bool,
        create: bool,
        length: Option<Size>,
        offset: u64,
        transparent: bool,
        policy: Option<Bound<'_, PyAny>>,
        policy_params: Option<Bound<'_, PyDict>>,
        readahead: bool,
        readahead_inline: bool,
        file_view: bool,
        track_access: bool,
        weight: u32,
        endpoint: Option<String>,
        access_key: Option<String>,
        secret_key: Option<String>,
        session_token: Option<String>,
        region: Option<String>,
        allow_http: Option<bool>,
        coalesce_gap: Option<Size>,
        column_chunks: Option<Vec<Vec<(u64, u64)>>>,
        column_chunks_depth: usize,
    ) -> PyResult<Mapping> {
        // str or os.PathLike, as open() takes.
        let url: String = py
            .import("os")?
            .getattr("fspath")?
            .call1((path,))?
            .extract()
            .map_err(|_| raise(Kind::InvalidArgument, "path must be a str or os.PathLike"))?;
        let s3 = S3Options {
            endpoint,
            access_key,
            secret_key,
            session_token,
            region,
            allow_http,
            coalesce_gap: coalesce_gap.map(|g| g.0 as usize),
        };
        let will_write = writable;
        let mut o = MapOptions::new()
            .offset(offset)
            .writable(writable)
            .create(create)
            .transparent(transparent)
            .readahead(readahead)
            .readahead_inline(readahead_inline)
            .file_view(file_view)
            .track_access(track_access)
            .weight(weight);
        if let Some(l) = length {
            o = o.len(l.0);
        }
        let mut failure = None;
        // The policy chosen, wrapped with the column-chunk prefetcher when one is given.
        let prefetching = |p: Box<dyn Policy>| -> Box<dyn Policy> {
            match &column_chunks {
                Some(chunks) => Box::new(WithPrefetch::new(
                    p,
                    ColumnChunks::new(chunks.clone(), column_chunks_depth),
                )),
                None => p,
            }
        };
        if policy.is_none() && column_chunks.is_some() {
            o = o.policy(prefetching(Box::new(Clock::new())));
        }
        match &policy {
            Some(p) => match choose(p, policy_params.as_ref())? {
                Chosen::Builtin(b) => o = o.policy(prefetching(b)),
                Chosen::Python(_) if transparent => {
                    return Err(raise(
                        Kind::InvalidArgument,
                        "a policy written in Python cannot run on a transparent mapping: its \
                         hooks run inside the fault handler, where the GIL cannot be taken \
                         safely; use an explicit mapping (pins, read) or a built-in policy",
                    ))
                }
                Chosen::Python(p) => {
                    failure = Some(p.failure());
                    o = o.policy(prefetching(Box::new(p)));
                }
            },
            None if policy_params.as_ref().is_some_and(|d| !d.is_empty()) => {
                return Err(raise(
                    Kind::InvalidArgument,
                    "policy_params given without a policy name",
                ))
            }
            None => {}
        }
        let inner = &self.inner;
        let (mapping, name) = py
            .detach(|| -> ucache_core::Result<_> {
                let at = locate(&url, &s3, will_write)?;
                let bs = match buffer_size {
                    Some(b) => b.0,
                    None if at.remote => S3_DEFAULT_BUFFER,
                    None => 4096,
                };
                let bs = usize::try_from(bs)
                    .map_err(|_| ucache_core::Error::BadBufferSize(usize::MAX))?;
                let m = inner.map(at.store, &at.name, o.buffer_size(bs))?;
                Ok((m, at.name))
            })
            .py_err()?;
        Ok(Mapping::new(mapping, name, failure))
    }

    /// The cache's counters as a dict (hits, misses, evictions, bytes_read, ...), plus
    /// `memory` (the budget) and `used` (bytes resident).
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = stats_dict(py, &self.inner.stats())?;
        d.set_item("memory", self.inner.budget())?;
        d.set_item("used", self.inner.used())?;
        Ok(d)
    }

    /// Names the object's address: fsspec tells filesystem instances apart by the repr of
    /// their arguments, so two caches of the same size must not look alike.
    fn __repr__(&self) -> String {
        format!(
            "<ucache.Cache at {:#x} memory={}>",
            self as *const Self as usize,
            self.inner.budget()
        )
    }
}
