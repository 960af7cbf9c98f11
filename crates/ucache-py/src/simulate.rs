//! `ucache._simulate`: replays a trace through the cache's policies, with the very code of
//! `ucache sim` (its trace readers, renumbering and replay runner, from the `ucache-cli`
//! library), so that a miss ratio computed from Python equals the command's to the last digit.

use std::collections::HashMap;
use std::path::PathBuf;

use clap::ValueEnum;
use indicatif::ProgressBar;
use pyo3::buffer::PyBuffer;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};
use ucache_cli::sim::format::{self, Format};
use ucache_cli::sim::runner::{replay_policy, run_all, Job, Outcome};
use ucache_cli::sim::sizes::parse_sizes;
use ucache_cli::sim::trace::{Remapper, Trace};
use ucache_core::policy::Policy;

use crate::errors::{raise, Kind};
use crate::policy::{builtin, choose, spec_with_params, Chosen};

fn invalid(msg: impl Into<String>) -> PyErr {
    raise(Kind::InvalidArgument, msg)
}

/// The trace: a file in `format`, or a buffer of `uint64` ids (a C-contiguous numpy array).
fn load(py: Python<'_>, trace: &Bound<'_, PyAny>, fmt: &str, column: usize) -> PyResult<Trace> {
    if let Ok(s) = trace.cast::<PyString>() {
        let path = PathBuf::from(s.to_cow()?.as_ref());
        let fmt = Format::from_str(fmt, true).map_err(|_| {
            invalid(format!(
                "unknown trace format '{fmt}' (known: text, csv, oracle, msr, record)"
            ))
        })?;
        return py
            .detach(|| {
                if !path.exists() {
                    return Err((Kind::NotFound, format!("{}: no such file", path.display())));
                }
                format::load(&path, fmt, column, &mut |_| {})
                    .map_err(|e| (Kind::InvalidArgument, e))
            })
            .map_err(|(k, e)| raise(k, e));
    }
    let buf = PyBuffer::<u64>::get(trace).map_err(|e| {
        invalid(format!(
            "ids must be a trace file path or a buffer of uint64 (numpy.uint64 array): {e}"
        ))
    })?;
    let ids = buf.to_vec(py)?;
    py.detach(|| {
        let mut map = Remapper::new();
        for id in ids {
            map.push(id)?;
        }
        Ok::<_, String>(map.finish())
    })
    .map_err(invalid)
}

/// Replays `trace` through every policy at every size (a number of buffers, or "N%" of the
/// distinct ids) on `threads` threads. A policy is a spec string (with `params` appended as
/// `key=value`), or a Python policy (an object or a class; see `policy.rs`), which replays on
/// the calling thread. Returns the trace's request and distinct-id counts and one dict per
/// (policy, size), in the order given: policy, cache_size (buffers), requests, misses,
/// miss_ratio, requests_per_sec (of the replay loop, by its thread's CPU time). A Python policy
/// that raised makes the call raise `PolicyError` (its numbers would describe the fallback).
#[pyfunction]
#[pyo3(name = "_simulate", signature = (trace, policies, sizes, format = "text", column = 1,
    threads = None, params = None))]
#[allow(clippy::too_many_arguments)]
pub fn simulate<'py>(
    py: Python<'py>,
    trace: &Bound<'py, PyAny>,
    policies: Vec<Bound<'py, PyAny>>,
    sizes: Vec<String>,
    format: &str,
    column: usize,
    threads: Option<usize>,
    params: Option<Bound<'py, PyDict>>,
) -> PyResult<(u64, u64, Vec<Bound<'py, PyDict>>)> {
    if policies.is_empty() {
        return Err(invalid("no policies given"));
    }
    // Specs for built-in policies, checked before the trace is read; Python ones as given.
    let mut specs: Vec<Option<String>> = Vec::with_capacity(policies.len());
    for p in &policies {
        if let Ok(s) = p.cast::<PyString>() {
            let spec = spec_with_params(&s.to_cow()?, params.as_ref())?;
            builtin(&spec)?;
            specs.push(Some(spec));
        } else {
            choose(p, params.as_ref())?; // refuses objects without hooks, and parameters
            specs.push(None);
        }
    }
    let sizes = parse_sizes(&sizes.join(",")).map_err(invalid)?;
    let trace = load(py, trace, format, column)?;
    let requests = trace.requests.len() as u64;
    if requests == 0 {
        return Err(invalid("the trace holds no requests"));
    }
    let resolved: Vec<u64> = sizes.iter().map(|s| s.resolve(trace.unique)).collect();
    let mut jobs: Vec<Job> = Vec::new();
    let mut index: HashMap<(String, u64), usize> = HashMap::new();
    for spec in specs.iter().flatten() {
        for &c in &resolved {
            index.entry((spec.clone(), c)).or_insert_with(|| {
                jobs.push(Job {
                    policy: spec.clone(),
                    cache_size: c,
                });
                jobs.len() - 1
            });
        }
    }
    let threads =
        threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let outcomes = py
        .detach(|| run_all(&trace, &jobs, threads, &ProgressBar::hidden()))
        .map_err(|e| raise(Kind::Error, e))?;
    let mut rows = Vec::with_capacity(policies.len() * resolved.len());
    for (p, spec) in policies.iter().zip(&specs) {
        for &c in &resolved {
            let python;
            let o = match spec {
                Some(spec) => &outcomes[index[&(spec.clone(), c)]],
                None => {
                    python = replay_python(py, &trace, p, c)?;
                    &python
                }
            };
            let d = PyDict::new(py);
            d.set_item("policy", &o.policy)?;
            d.set_item("cache_size", o.cache_size)?;
            d.set_item("requests", o.requests)?;
            d.set_item("misses", o.misses)?;
            d.set_item("miss_ratio", o.miss_ratio())?;
            d.set_item("requests_per_sec", o.requests_per_sec())?;
            rows.push(d);
        }
    }
    Ok((requests, trace.unique, rows))
}

/// One replay of a Python policy at `cache_size`, on this thread with the GIL held (each hook
/// takes it again, which costs a check, not a wait). A class is instantiated afresh.
fn replay_python(
    py: Python<'_>,
    trace: &Trace,
    policy: &Bound<'_, PyAny>,
    cache_size: u64,
) -> PyResult<Outcome> {
    let Chosen::Python(p) = choose(policy, None)? else {
        unreachable!("a str is a built-in policy");
    };
    let failure = p.failure();
    let job = Job {
        policy: p.name().to_string(),
        cache_size,
    };
    let o = replay_policy(trace, Box::new(p), &job, &ProgressBar::hidden())
        .map_err(|e| raise(Kind::Error, e))?;
    match failure.error(py) {
        Some(e) => Err(e),
        None => Ok(o),
    }
}
