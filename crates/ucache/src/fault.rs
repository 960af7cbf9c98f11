//! What happens when a plain access to a transparent mapping cannot be served.
//!
//! mmap answers an IO error under a load with `SIGBUS`, and so does ucache by default: the
//! signal goes to whatever `SIGBUS` handler the program had before ucache, or ends the
//! process. Programs that can do better (wait for a server to come back, fail one request
//! instead of the process) install a hook, which runs on the faulting thread, inside the
//! signal handler: it must not touch the faulting mapping's missing memory itself.

use std::sync::Arc;

use crate::error::Error;

/// Who serves the faults of a transparent mapping.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FaultHandling {
    /// The faulting thread itself, in its `SIGBUS` handler (fastest). Accesses the kernel
    /// makes on the program's behalf (a mapping pointer passed to `write(2)`) fail with
    /// `EFAULT` while their buffer is not resident: make it resident first (`ensure_cached`,
    /// a pin), or use [`FaultHandling::HandlerThreads`].
    #[default]
    OnFaultingThread,
    /// Handler threads reading the userfaultfd: every kind of fault is served, kernel-mode
    /// accesses included, at the cost of a hand-off between threads per fault.
    HandlerThreads(usize),
}

/// The hook's verdict on a fault that could not be served.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultAction {
    /// Run the access again, which faults again and retries the load.
    Retry,
    /// Deliver `SIGBUS` as mmap would.
    Signal,
}

/// Called with the faulting address and the error.
pub type FaultHook = Arc<dyn Fn(usize, &Error) -> FaultAction + Send + Sync>;
