//! The code the fuzz targets exercise that lives in crates too heavy to build instrumented in
//! a test run (ucache-cli and ucache-object bring tokio, reqwest, TLS and plotting): its
//! self-contained parsing modules are compiled here from their own source files, unchanged.

#![allow(dead_code)]

/// The trace readers of `ucache sim` and the parsers of its `--sizes` and `--generate`.
#[path = "../../crates/ucache-cli/src/sim"]
pub mod sim {
    pub mod csv;
    pub mod generate;
    pub mod msr;
    pub mod oracle;
    pub mod record;
    pub mod sizes;
    pub mod text;
    pub mod trace;
}

/// `parse_size` and `format_size`, the command line's byte sizes.
#[path = "../../crates/ucache-cli/src/size.rs"]
pub mod size;

/// The chunked S3 store's manifest.
#[path = "../../crates/ucache-object/src/manifest.rs"]
pub mod manifest;
