//! Cache statistics as a Python dict.

use pyo3::prelude::*;
use pyo3::types::PyDict;
use ucache_core::StatsSnapshot;

/// One dict item per counter. The snapshot is destructured without `..`, so a counter added to
/// the core without being named here fails to build instead of going missing from Python.
macro_rules! counters_dict {
    ($d:expr, $s:expr; $($f:ident),* $(,)?) => {{
        let StatsSnapshot { $($f,)* miss_latency } = $s;
        $( $d.set_item(stringify!($f), *$f)?; )*
        $d.set_item("miss_latency", miss_latency.clone())?;
    }};
}

/// Every counter of `s` (see `ucache_core::StatsSnapshot` for their meaning), and
/// `miss_latency`, the histogram of miss latencies in power-of-two nanosecond buckets.
pub fn stats_dict<'py>(py: Python<'py>, s: &StatsSnapshot) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    counters_dict!(d, s; hits, misses, waits, evictions, evictions_ahead, eviction_cancels,
        writebacks, writeback_failures, read_failures, budget_stalls, bytes_read, bytes_written,
        bytes_read_past_cache,
        prefetches, prefetch_used, prefetch_wasted, bypasses, faults, write_faults, faults_timed,
        fault_ns, fault_evict_ns, fault_io_ns, fault_install_ns, fault_bookkeeping_ns, set_aside,
        restores, installs, installed_bytes, store_reads, store_reads_overlapped, marker_hits);
    Ok(d)
}
