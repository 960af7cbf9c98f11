//! Where a mapped name lives: a local path, or an `s3://bucket/key` object reached with the
//! keyword arguments of `Cache.map` or, where those are missing, the `AWS_*` variables that
//! `ucache_object::S3Config::from_env` reads.

use std::sync::Arc;

use ucache_core::store::{FileStore, Store};
use ucache_core::Result;
use ucache_object::{S3Config, S3Store, DEFAULT_CHUNK_SIZE};

/// S3 settings given as keyword arguments; each overrides its environment variable.
#[derive(Default)]
pub struct S3Options {
    pub endpoint: Option<String>,
    pub access_key: Option<String>,
    pub secret_key: Option<String>,
    pub session_token: Option<String>,
    pub region: Option<String>,
    pub allow_http: Option<bool>,
    /// Largest gap between misses one GET reads through (`S3Config::coalesce_gap`).
    pub coalesce_gap: Option<usize>,
}

/// The store holding `url` and the name to open in it.
pub struct Located {
    pub store: Arc<dyn Store>,
    pub name: String,
    pub remote: bool,
}

/// Finds the store of `url`. A writable S3 mapping uses the chunked layout (a key prefix of
/// chunk objects plus a manifest), since an S3 object can only be replaced whole.
pub fn locate(url: &str, s3: &S3Options, writable: bool) -> Result<Located> {
    let scheme = url.split_once("://").map(|(s, _)| s);
    let bad = |why: String| Err(ucache_core::Error::BadArgument(why));
    match scheme {
        Some("s3") | Some("file") => {}
        Some(other) if !other.contains('/') => {
            return bad(format!(
                "'{url}': unsupported URL scheme '{other}' (use a local path, file:// or s3://)"
            ))
        }
        _ if url.starts_with("s3:") => {
            return bad(format!("'{url}' is not an s3:// URL (s3://bucket/key)"))
        }
        _ => {}
    }
    if !url.starts_with("s3://") {
        let path = url.strip_prefix("file://").unwrap_or(url);
        return Ok(Located {
            store: Arc::new(FileStore::new()),
            name: path.to_string(),
            remote: false,
        });
    }
    let mut cfg = S3Config::from_env(url)?;
    if let Some(e) = &s3.endpoint {
        cfg = cfg.endpoint(e.clone());
    }
    if let Some(r) = &s3.region {
        cfg = cfg.region(r.clone());
    }
    match (&s3.access_key, &s3.secret_key) {
        (Some(a), Some(s)) => cfg = cfg.credentials(a, s),
        (None, None) => {}
        _ => {
            return Err(ucache_core::Error::BadArgument(
                "access_key and secret_key go together".into(),
            ))
        }
    }
    if let Some(t) = &s3.session_token {
        cfg = cfg.session_token(t.clone());
    }
    if let Some(h) = s3.allow_http {
        cfg = cfg.allow_http(h);
    }
    if let Some(g) = s3.coalesce_gap {
        cfg = cfg.coalesce_gap(g);
    }
    let store = if writable {
        S3Store::chunked(cfg, DEFAULT_CHUNK_SIZE)?
    } else {
        S3Store::new(cfg)?
    };
    Ok(Located {
        store: Arc::new(store),
        name: url.to_string(),
        remote: true,
    })
}
