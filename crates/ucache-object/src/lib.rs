//! ucache stores over S3-compatible object stores, built on the `object_store` crate.
//!
//! Kept out of the core crate so that programs without object stores never build tokio,
//! reqwest or TLS. Two layouts (see [`S3Store`]):
//! - [`S3Object`]: one existing object, read-only, ETag-checked, misses fetched by ranged GETs
//!   with the misses of a batch merged into few GETs (across gaps up to [`S3Config::coalesce_gap`])
//!   and many requests in flight;
//! - [`ChunkedObject`]: a read-write object stored as fixed-size chunk objects under a prefix
//!   plus a manifest; write-back PUTs whole chunks and `msync` returns once they are
//!   acknowledged.
//!
//! Errors name the object (`s3://bucket/key`): a missing bucket or key is
//! [`ucache::Error::NotFound`], bad credentials an IO error of kind `PermissionDenied`, an
//! object replaced behind the cache [`ucache::Error::ObjectChanged`], and an unreachable server
//! an IO error that leaves dirty data dirty. No error text quotes a credential (the access key
//! id, the secret, the session token), not even one a server's answer echoes back. Several nodes sharing a prefix each cache on their
//! own and the last writer of a chunk wins; see [`chunked`] and docs/object-store.md.

pub mod chunked;
pub mod coalesce;
mod config;
mod error;
pub mod manifest;
mod readonly;
mod redact;
mod runtime;
mod store;

pub use chunked::{ChunkedObject, DEFAULT_CHUNK_SIZE};
pub use config::{redact_endpoint, S3Config, DEFAULT_COALESCE_GAP};
pub use readonly::S3Object;
pub use store::S3Store;
