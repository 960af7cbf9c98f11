//! The chunked S3 store's manifest as read from the server (`prefix/manifest`): any bytes.
//! What `parse_manifest` accepts must be a length and chunk size the store can work with (a
//! chunk is allocated whole and every buffer is split at chunk boundaries), and must read back
//! the same once written again.

#![no_main]

use libfuzzer_sys::fuzz_target;
use ucache_fuzz::manifest::{manifest_text, parse_manifest, MAX_CHUNK_SIZE, MAX_LEN};

fuzz_target!(|data: &[u8]| {
    let Some((len, cs)) = parse_manifest(data) else {
        return;
    };
    assert!(
        cs > 0 && cs % 4096 == 0 && cs <= MAX_CHUNK_SIZE,
        "chunk_size {cs}"
    );
    assert!(len <= MAX_LEN, "length {len}");
    // The arithmetic the store does with them stays in range.
    let chunks = len.div_ceil(cs);
    assert!(chunks.checked_mul(cs).is_some());
    assert_eq!(
        parse_manifest(manifest_text(len, cs).as_bytes()),
        Some((len, cs))
    );
});
