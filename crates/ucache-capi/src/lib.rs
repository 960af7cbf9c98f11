//! The C API of ucache: `libucache.so`, `libucache.a` and `include/ucache.h` (generated from
//! this crate's sources by cbindgen; see README.md).
//!
//! Every exported function runs its body through [`status::guard`]: errors become
//! [`status::ucache_status`] codes with a thread-local message, and panics are caught there,
//! never unwinding into C.
#![allow(non_camel_case_types)]

mod cache;
mod handle;
mod mapping;
mod pin;
mod policy;
mod status;
mod store;

pub use cache::*;
pub use mapping::*;
pub use pin::*;
pub use policy::*;
pub use status::*;
pub use store::*;
