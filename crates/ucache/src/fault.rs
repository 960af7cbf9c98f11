//! What happens when a plain access to a transparent mapping cannot be served.
//!
//! mmap answers an IO error under a load with `SIGBUS`, and so does ucache by default: the
//! signal goes to whatever `SIGBUS` handler the program had before ucache, or ends the
//! process. Programs that can do better (wait for a server to come back, fail one request
//! instead of the process) install a hook, which runs on the faulting thread, inside the
//! signal handler: it must not touch the faulting mapping's missing memory itself.

use std::sync::Arc;

use crate::error::Error;

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
