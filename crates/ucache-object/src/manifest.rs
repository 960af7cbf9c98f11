//! The manifest of a [`crate::ChunkedObject`] (`prefix/manifest`): the object's length and
//! chunk size, as text. It is read from the server, so it is input like any other: parsed
//! strictly, and fuzzed (fuzz/fuzz_targets/manifest.rs includes this file, which is why it
//! uses nothing but `std`).

/// Largest chunk size: S3's largest single PUT (5 GiB). A chunk is held whole in memory while
/// it is read-modify-written, so a manifest from the server naming more is refused rather than
/// allocated.
pub const MAX_CHUNK_SIZE: u64 = 5 << 30;

/// Largest object length a manifest may give: the largest file length Linux allows (2^63 - 1),
/// so `offset + len` arithmetic on the object never overflows.
pub const MAX_LEN: u64 = i64::MAX as u64;

/// The manifest `put_manifest` uploads for an object of `len` bytes in chunks of `chunk_size`.
pub fn manifest_text(len: u64, chunk_size: u64) -> String {
    format!("ucache-chunked 1\nlength {len}\nchunk_size {chunk_size}\n")
}

/// `(length, chunk_size)` of a manifest as read from the server, or `None` when it is not one
/// this library could have written: the server's bytes are input, so a chunk size that is not
/// a positive multiple of 4096 of at most [`MAX_CHUNK_SIZE`], or a length above [`MAX_LEN`],
/// is refused (a chunk size of 1 would split every 4 KiB buffer into 4096 GETs, one of
/// `u64::MAX` would be allocated).
pub fn parse_manifest(b: &[u8]) -> Option<(u64, u64)> {
    let text = std::str::from_utf8(b).ok()?;
    let mut lines = text.lines();
    if lines.next()? != "ucache-chunked 1" {
        return None;
    }
    let (mut len, mut cs) = (None, None);
    for l in lines {
        match l.split_once(' ') {
            Some(("length", v)) => len = v.parse().ok(),
            Some(("chunk_size", v)) => cs = v.parse().ok(),
            _ => {}
        }
    }
    Some((
        len.filter(|&l| l <= MAX_LEN)?,
        cs.filter(|&c| valid_chunk_size(c))?,
    ))
}

/// A positive multiple of 4096 of at most [`MAX_CHUNK_SIZE`].
pub(crate) fn valid_chunk_size(c: u64) -> bool {
    c > 0 && c.is_multiple_of(4096) && c <= MAX_CHUNK_SIZE
}
