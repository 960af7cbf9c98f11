//! ucache: a customizable IO cache for data-intensive programs.

pub mod error;
pub mod state;
pub mod store;

pub use error::{Error, Result};
