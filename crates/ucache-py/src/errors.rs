//! ucache errors as Python exceptions.
//!
//! The exception classes are defined in Python (`python/ucache/errors.py`) because each one
//! also derives from the built-in exception a Python program would catch (`NotFound` is a
//! `FileNotFoundError`, `ReadOnly` a `PermissionError`), and PyO3's `create_exception!` takes a
//! single base. This file only decides which class each [`ucache_core::Error`] becomes; the
//! message is the error's own `Display`, which names the object, offset or argument.

use std::io::ErrorKind;

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::PyType;
use ucache_core::Error as CoreError;

/// The exception kinds of `ucache.errors`, by class name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Error,
    InvalidArgument,
    OutOfRange,
    NotFound,
    ReadOnly,
    StoreError,
    PermissionDenied,
    ObjectChanged,
    SyncPoisoned,
    BudgetExhausted,
    WouldDeadlock,
    InUse,
    Closed,
    PolicyError,
}

impl Kind {
    fn class_name(self) -> &'static str {
        match self {
            Kind::Error => "Error",
            Kind::InvalidArgument => "InvalidArgument",
            Kind::OutOfRange => "OutOfRange",
            Kind::NotFound => "NotFound",
            Kind::ReadOnly => "ReadOnly",
            Kind::StoreError => "StoreError",
            Kind::PermissionDenied => "PermissionDenied",
            Kind::ObjectChanged => "ObjectChanged",
            Kind::SyncPoisoned => "SyncPoisoned",
            Kind::BudgetExhausted => "BudgetExhausted",
            Kind::WouldDeadlock => "WouldDeadlock",
            Kind::InUse => "InUse",
            Kind::Closed => "Closed",
            Kind::PolicyError => "PolicyError",
        }
    }

    /// The kind a core error is raised as.
    fn of(e: &CoreError) -> Kind {
        match e {
            CoreError::BadBufferSize(_)
            | CoreError::BadLength { .. }
            | CoreError::BudgetTooSmall { .. }
            | CoreError::BadArgument(_) => Kind::InvalidArgument,
            CoreError::BeyondObject { .. } | CoreError::OutOfRange { .. } => Kind::OutOfRange,
            CoreError::NotFound { .. }
            | CoreError::DirectoryNotFound { .. }
            | CoreError::BucketNotFound { .. } => Kind::NotFound,
            CoreError::ObjectChanged { .. } => Kind::ObjectChanged,
            CoreError::ReadOnly => Kind::ReadOnly,
            CoreError::BudgetExhausted { .. } => Kind::BudgetExhausted,
            CoreError::SyncPoisoned { .. } => Kind::SyncPoisoned,
            CoreError::Io { source, .. } | CoreError::Os { source, .. }
                if source.kind() == ErrorKind::PermissionDenied =>
            {
                Kind::PermissionDenied
            }
            CoreError::WritebackFailed { first, .. } => match Kind::of(first) {
                Kind::PermissionDenied => Kind::PermissionDenied,
                _ => Kind::StoreError,
            },
            CoreError::ShortIo { .. } | CoreError::Io { .. } | CoreError::Os { .. } => {
                Kind::StoreError
            }
            CoreError::WouldDeadlock { .. } => Kind::WouldDeadlock,
            CoreError::InUse { .. } => Kind::InUse,
            CoreError::Unmapped => Kind::Closed,
            _ => Kind::Error,
        }
    }
}

/// A Python exception of `kind` carrying `msg`.
pub fn raise(kind: Kind, msg: impl Into<String>) -> PyErr {
    let msg = msg.into();
    Python::attach(|py| {
        let class = py
            .import("ucache.errors")
            .and_then(|m| m.getattr(kind.class_name()))
            .and_then(|c| c.cast_into::<PyType>().map_err(PyErr::from));
        match class {
            Ok(class) => PyErr::from_type(class, msg),
            // Only if the package is broken (errors.py missing): still an exception, never a
            // panic.
            Err(e) => PyRuntimeError::new_err(format!("{msg} (ucache.errors unavailable: {e})")),
        }
    })
}

/// The Python exception for a core error.
pub fn to_py(e: CoreError) -> PyErr {
    raise(Kind::of(&e), e.to_string())
}

/// `?` on core results inside `#[pymethods]`.
pub trait IntoPy<T> {
    fn py_err(self) -> PyResult<T>;
}

impl<T> IntoPy<T> for Result<T, CoreError> {
    fn py_err(self) -> PyResult<T> {
        self.map_err(to_py)
    }
}
