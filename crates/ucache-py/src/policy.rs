//! Policies from Python: a built-in one by spec (`"s3fifo"` plus keyword parameters), or an
//! object whose methods are the hooks of `ucache::policy::Policy`.
//!
//! A Python policy's hooks run with the GIL taken inside the hook (the calls that reach a hook
//! release the GIL first, so a hook on another thread, the background evictor's say, can take
//! it). The hooks, all optional but `choose_victims`:
//!
//! - `attach(buffers, capacity)`: once, before use (and again before each replay of
//!   `simulate`, so it must reset the object);
//! - `choose_victims(want) -> iterable of int`: up to `want` buffers to evict;
//! - `on_miss(i)`, `on_insert(i)`, `on_hit(i)`, `on_evict(i)`: the events;
//! - `admit(i) -> bool`, `is_evictable(i) -> bool`: admission and veto;
//! - `choose_prefetch(i) -> iterable of int`: buffers to read ahead after a miss on `i`;
//! - `name`: a string attribute (default: the class name).
//!
//! A hook that raises never unwinds into the cache: the first exception is kept, the policy
//! falls back for good (every hook becomes a no-op that admits, allows eviction and proposes
//! nothing, so the cache's own fallback victim search keeps it within budget), a
//! `RuntimeWarning` is issued, and the error is reported: `simulate` raises
//! `ucache.PolicyError` from it, a mapping shows it as `Mapping.policy_error`.
//!
//! Not on transparent mappings: their hooks run inside the SIGBUS handler of the faulting
//! thread, where taking the GIL can deadlock (the thread may hold it) and is not
//! async-signal-safe. `Cache.map` refuses that combination.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use pyo3::exceptions::PyRuntimeWarning;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString, PyType};
use ucache_core::policy::{policy_from_spec, Buffers, Layout, Policy};

use crate::errors::{raise, Kind};

/// The spec of a built-in policy with keyword parameters: `name` (itself possibly
/// `name:preset,...`) followed by `key=value` for each parameter, in the order given.
pub fn spec_with_params(name: &str, params: Option<&Bound<'_, PyDict>>) -> PyResult<String> {
    let mut spec = name.to_string();
    let Some(params) = params else {
        return Ok(spec);
    };
    for (k, v) in params.iter() {
        let k: String = k
            .extract()
            .map_err(|_| raise(Kind::InvalidArgument, "policy parameter names are strings"))?;
        if v.is_instance_of::<pyo3::types::PyBool>() {
            return Err(raise(
                Kind::InvalidArgument,
                format!("policy parameter {k}: a number or a string, not a bool"),
            ));
        }
        let v = v.str()?.to_cow()?.into_owned();
        spec.push(if spec.contains(':') { ',' } else { ':' });
        spec.push_str(&format!("{k}={v}"));
    }
    Ok(spec)
}

/// A built-in policy from its spec, or `InvalidArgument` naming what is wrong.
pub fn builtin(spec: &str) -> PyResult<Box<dyn Policy>> {
    policy_from_spec(spec).map_err(|e| raise(Kind::InvalidArgument, e.to_string()))
}

/// The first exception a Python policy raised, shared with whoever reports it.
#[derive(Default)]
pub struct Failure {
    failed: AtomicBool,
    /// The report's message and the hook's own exception.
    error: Mutex<Option<(String, PyErr)>>,
}

impl Failure {
    /// Whether a hook has raised.
    pub fn failed(&self) -> bool {
        self.failed.load(Ordering::Acquire)
    }

    /// `ucache.PolicyError` describing the failure, with the hook's exception as its cause.
    pub fn error(&self, py: Python<'_>) -> Option<PyErr> {
        let e = self.error.lock();
        let (msg, cause) = e.as_ref()?;
        let err = raise(Kind::PolicyError, msg.clone());
        err.set_cause(py, Some(cause.clone_ref(py)));
        Some(err)
    }

    fn record(&self, py: Python<'_>, policy: &str, hook: &str, e: PyErr) {
        if self.failed.swap(true, Ordering::AcqRel) {
            return;
        }
        let type_name = e
            .get_type(py)
            .name()
            .map(|n| n.to_string())
            .unwrap_or_else(|_| "Exception".into());
        let msg = format!(
            "policy {policy}: {hook} raised {type_name}: {}; the cache now evicts by its \
             fallback for this mapping",
            e.value(py)
        );
        *self.error.lock() = Some((msg.clone(), e));
        // A warning filter that turns warnings into errors must not fail the hook either.
        let category = py.get_type::<PyRuntimeWarning>();
        let c_msg = std::ffi::CString::new(msg.replace('\0', " ")).unwrap_or_default();
        if let Err(w) = PyErr::warn(py, &category, &c_msg, 1) {
            w.write_unraisable(py, None);
        }
    }
}

/// Which optional hooks the object defines, looked up once.
struct Hooks {
    attach: bool,
    on_miss: bool,
    on_insert: bool,
    on_hit: bool,
    on_evict: bool,
    admit: bool,
    is_evictable: bool,
    choose_prefetch: bool,
}

/// A Python object as a `Policy`.
pub struct PyPolicy {
    obj: Py<PyAny>,
    name: String,
    hooks: Hooks,
    failure: Arc<Failure>,
}

impl PyPolicy {
    /// Wraps `obj`, which must have `choose_victims`.
    pub fn new(obj: &Bound<'_, PyAny>) -> PyResult<Self> {
        let has = |n: &str| obj.hasattr(n).unwrap_or(false);
        if !has("choose_victims") {
            return Err(raise(
                Kind::InvalidArgument,
                format!(
                    "a policy is a name (str) or an object with a choose_victims(want) method; \
                     {} has none",
                    obj.get_type().name()?
                ),
            ));
        }
        let name = match obj.getattr("name") {
            Ok(n) if n.is_instance_of::<PyString>() => n.extract()?,
            _ => obj.get_type().name()?.to_string(),
        };
        Ok(PyPolicy {
            obj: obj.clone().unbind(),
            name,
            hooks: Hooks {
                attach: has("attach"),
                on_miss: has("on_miss"),
                on_insert: has("on_insert"),
                on_hit: has("on_hit"),
                on_evict: has("on_evict"),
                admit: has("admit"),
                is_evictable: has("is_evictable"),
                choose_prefetch: has("choose_prefetch"),
            },
            failure: Arc::default(),
        })
    }

    /// Where the first exception of a hook is kept.
    pub fn failure(&self) -> Arc<Failure> {
        self.failure.clone()
    }

    /// Calls hook `hook` with `args` under the GIL; `None` once any hook has raised (and when
    /// this one raises, which is then recorded).
    fn call<'py, A: pyo3::call::PyCallArgs<'py>>(
        &self,
        py: Python<'py>,
        hook: &Bound<'py, PyString>,
        args: A,
    ) -> Option<Bound<'py, PyAny>> {
        if self.failure.failed() {
            return None;
        }
        match self.obj.bind(py).call_method1(hook, args) {
            Ok(r) => Some(r),
            Err(e) => {
                self.failure
                    .record(py, &self.name, hook.to_str().unwrap_or("?"), e);
                None
            }
        }
    }

    /// An event hook: a call whose result is ignored.
    fn event(&self, defined: bool, hook: fn(Python<'_>) -> &Bound<'_, PyString>, index: u64) {
        if !defined || self.failure.failed() {
            return;
        }
        Python::attach(|py| {
            self.call(py, hook(py), (index,));
        });
    }

    /// A yes/no hook; `true` when undefined or failed.
    fn ask(&self, defined: bool, hook: fn(Python<'_>) -> &Bound<'_, PyString>, index: u64) -> bool {
        if !defined || self.failure.failed() {
            return true;
        }
        Python::attach(|py| {
            let h = hook(py);
            match self.call(py, h, (index,)).map(|r| r.is_truthy()) {
                Some(Ok(b)) => b,
                Some(Err(e)) => {
                    self.failure
                        .record(py, &self.name, h.to_str().unwrap_or("?"), e);
                    true
                }
                None => true,
            }
        })
    }

    /// A hook returning indices, appended to `out` (at most `limit`).
    fn indices(
        &self,
        hook: fn(Python<'_>) -> &Bound<'_, PyString>,
        arg: u64,
        limit: usize,
        out: &mut Vec<u64>,
    ) {
        if self.failure.failed() {
            return;
        }
        Python::attach(|py| {
            let h = hook(py);
            let Some(r) = self.call(py, h, (arg,)) else {
                return;
            };
            let got = (|| -> PyResult<()> {
                let start = out.len();
                for item in r.try_iter()? {
                    if out.len() - start >= limit {
                        break;
                    }
                    out.push(item?.extract::<u64>()?);
                }
                Ok(())
            })();
            if let Err(e) = got {
                self.failure
                    .record(py, &self.name, h.to_str().unwrap_or("?"), e);
            }
        });
    }
}

impl Policy for PyPolicy {
    fn name(&self) -> &str {
        &self.name
    }

    fn attach(&mut self, layout: Layout) {
        if !self.hooks.attach {
            return;
        }
        Python::attach(|py| {
            self.call(
                py,
                intern!(py, "attach"),
                (layout.buffers, layout.capacity.min(layout.buffers)),
            );
        });
    }

    fn choose_eviction_buffers(&self, _buffers: &Buffers<'_>, want: usize, out: &mut Vec<u64>) {
        self.indices(|py| intern!(py, "choose_victims"), want as u64, want, out);
    }

    fn is_evictable(&self, index: u64) -> bool {
        self.ask(
            self.hooks.is_evictable,
            |py| intern!(py, "is_evictable"),
            index,
        )
    }

    fn admit(&self, index: u64) -> bool {
        self.ask(self.hooks.admit, |py| intern!(py, "admit"), index)
    }

    fn has_prefetching(&self) -> bool {
        self.hooks.choose_prefetch
    }

    fn choose_prefetch_buffers(&self, index: u64, out: &mut Vec<u64>) {
        if self.hooks.choose_prefetch {
            self.indices(|py| intern!(py, "choose_prefetch"), index, 1 << 16, out);
        }
    }

    fn wants_hits(&self) -> bool {
        self.hooks.on_hit
    }

    fn on_miss(&self, index: u64) {
        self.event(self.hooks.on_miss, |py| intern!(py, "on_miss"), index);
    }

    fn on_hit(&self, index: u64) {
        self.event(self.hooks.on_hit, |py| intern!(py, "on_hit"), index);
    }

    fn on_insert(&self, index: u64) {
        self.event(self.hooks.on_insert, |py| intern!(py, "on_insert"), index);
    }

    fn on_evict(&self, index: u64) {
        self.event(self.hooks.on_evict, |py| intern!(py, "on_evict"), index);
    }
}

/// What a `policy=` argument named: a built-in policy, or a Python one with its failure slot.
pub enum Chosen {
    Builtin(Box<dyn Policy>),
    Python(PyPolicy),
}

/// A `policy=` argument: a spec string (with `params` appended), a Python policy object, or a
/// Python policy class (instantiated with no arguments).
pub fn choose(policy: &Bound<'_, PyAny>, params: Option<&Bound<'_, PyDict>>) -> PyResult<Chosen> {
    if let Ok(s) = policy.cast::<PyString>() {
        let spec = spec_with_params(&s.to_cow()?, params)?;
        return Ok(Chosen::Builtin(builtin(&spec)?));
    }
    if params.is_some_and(|p| !p.is_empty()) {
        return Err(raise(
            Kind::InvalidArgument,
            "policy parameters apply to a built-in policy named by a string; give a Python \
             policy its parameters when constructing it",
        ));
    }
    let obj = if policy.is_instance_of::<PyType>() {
        policy.call0()?
    } else {
        policy.clone()
    };
    Ok(Chosen::Python(PyPolicy::new(&obj)?))
}
