//! Entry points for the model checker (tests/model.rs, `--features shuttle`) into two paths
//! that no public call runs on a thread shuttle controls:
//!
//! - a transparent mapping's fault, which the kernel starts in a `SIGBUS` handler (shuttle's
//!   scheduler must not run there): [`Mapping::model_fault`] serves it as the handler would, so
//!   the model can interleave write-protect faults with pins, write-backs and evictions;
//! - the background evictor, whose thread is an OS thread and is not started under the model:
//!   [`crate::Cache::model_evict_ahead`] (in `cache.rs`, the façade above the mappings) runs
//!   one of its eviction rounds.
//!
//! Hidden and compiled only with the `shuttle` feature; not an API.

use crate::error::{Error, Result};

use super::Mapping;

impl Mapping {
    /// Serves a fault at byte `offset` of this transparent mapping, as its `SIGBUS` handler
    /// would (`write`: a store). `Ok` means the access may run again.
    #[doc(hidden)]
    pub fn model_fault(&self, offset: usize, write: bool) -> Result<()> {
        if !self.core.is_transparent() {
            return Err(Error::BadArgument(
                "model_fault: not a transparent mapping".into(),
            ));
        }
        self.core.fault(offset, write)
    }
}
