//! The benchmark's object in S3: the data file's offset pattern, uploaded when the object is
//! missing, of the wrong size, or not holding the pattern, so every system reads the same
//! bytes and checks them exactly as it does from the local file.

use ucache::store::Object;
use ucache_object::S3Store;

use super::datafile::{fill_pattern, word_ok};
use super::system::s3_config;

/// Makes `url` hold `size` bytes of the pattern; returns why it was (re)uploaded, if it was.
pub fn ensure(url: &str, endpoint: Option<&str>, size: u64) -> Result<Option<String>, String> {
    let cfg = s3_config(url, endpoint)?;
    let store = S3Store::new(cfg.clone()).map_err(|e| e.to_string())?;
    let reason = match store.open_object(cfg.key()) {
        Ok(o) => check(&*o, size),
        Err(ucache::Error::NotFound { .. }) => Some("missing".to_string()),
        Err(e) => return Err(e.to_string()),
    };
    if let Some(why) = &reason {
        let len = usize::try_from(size).map_err(|_| "--data too large for one upload")?;
        let mut data = vec![0u8; len];
        fill_pattern(&mut data, 0);
        store
            .put(cfg.key(), data)
            .map_err(|e| format!("uploading {url} ({why}): {e}"))?;
    }
    Ok(reason)
}

/// Why the object cannot be used as it is, if it cannot: its size, or the pattern at its
/// first and last 4 KiB.
fn check(o: &dyn Object, size: u64) -> Option<String> {
    let len = o.len().unwrap_or(0);
    if len != size {
        return Some(format!("{len} bytes, not {size}"));
    }
    let mut buf = vec![0u8; 4096];
    for base in [0, size.saturating_sub(4096)] {
        let n = o.read_at(&mut buf, base).unwrap_or(0);
        if n < 8 || !(0..n / 8).all(|k| word_ok(&buf, base, k * 8)) {
            return Some(format!("pattern differs near offset {base}"));
        }
    }
    None
}
