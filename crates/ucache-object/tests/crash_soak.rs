//! The crash-and-restart soak on the S3 chunked store: the cycles of
//! crates/ucache/tests/soak/mod.rs (shared by path), with SIGKILLs that include the point
//! after a chunk PUT was acknowledged and before the cache heard of it or the sync (which PUTs
//! a pending manifest) ran. Same server discovery as tests/s3.rs: skipped without
//! `UCACHE_S3_ENDPOINT`, failed with `UCACHE_S3_REQUIRED=1`.

mod common;
#[path = "../../ucache/tests/soak/mod.rs"]
mod soak;

use std::sync::Arc;

use ucache_object::S3Store;

use common::{config, endpoint, unique};
use soak::Soak;

/// Four 4 KiB buffers per chunk, so writers of different buffers share chunks and their
/// write-backs read, patch and PUT them.
const CHUNK: u64 = 16 << 10;

#[test]
fn soak_s3_chunked() {
    let Some(ep) = endpoint("soak_s3_chunked") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let prefix = unique("crash-soak");
    let make = move || -> Arc<dyn ucache::store::Store> {
        Arc::new(S3Store::chunked(config(&ep, ""), CHUNK).unwrap())
    };
    Soak {
        label: "s3_chunked",
        test: "soak_s3_chunked",
        make: &make,
        // A PUT takes milliseconds, a whole-mapping msync many of them.
        pace: 6,
        cycles: 15,
    }
    .run(dir.path(), &prefix);
}
