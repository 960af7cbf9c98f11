//! [`S3Store`]: a bucket as a [`Store`], sharing one client and one runtime between the
//! objects it opens.

use std::sync::Arc;

use object_store::{ObjectStore, ObjectStoreExt};
use ucache::store::{Object, OpenOptions, Store};
use ucache::{Error, Result};

use crate::chunked::{ChunkedObject, DEFAULT_CHUNK_SIZE};
use crate::config::S3Config;
use crate::readonly::S3Object;
use crate::runtime::Runtime;

/// A bucket. Names passed to [`Store::open`] (and so to `Cache::map`) are keys, or full
/// `s3://bucket/key` URLs of the same bucket.
///
/// Two layouts, chosen when the store is made, because an S3 key can only be replaced whole:
/// [`S3Store::new`] maps existing objects read-only ([`S3Object`]); [`S3Store::chunked`] maps
/// key prefixes of chunk objects read-write ([`ChunkedObject`]).
pub struct S3Store {
    cfg: S3Config,
    client: Arc<dyn ObjectStore>,
    rt: Arc<Runtime>,
    chunk_size: Option<u64>,
}

/// Shows the configuration as [`S3Config`]'s `Debug` does: secrets and the endpoint's user
/// info redacted.
impl std::fmt::Debug for S3Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Store")
            .field("config", &self.cfg)
            .field("chunk_size", &self.chunk_size)
            .finish_non_exhaustive()
    }
}

impl S3Store {
    /// Existing objects of `cfg`'s bucket, read-only.
    pub fn new(cfg: S3Config) -> Result<Self> {
        Self::make(cfg, None)
    }

    /// Key prefixes of `cfg`'s bucket as chunked read-write objects; `chunk_size` (a multiple
    /// of 4096, e.g. [`DEFAULT_CHUNK_SIZE`]) applies to prefixes created through this store.
    pub fn chunked(cfg: S3Config, chunk_size: u64) -> Result<Self> {
        Self::make(cfg, Some(chunk_size))
    }

    fn make(cfg: S3Config, chunk_size: Option<u64>) -> Result<Self> {
        let rt = Arc::new(Runtime::new(cfg.threads())?);
        let client = cfg.build()?;
        Ok(S3Store {
            cfg,
            client,
            rt,
            chunk_size,
        })
    }

    /// The object_store client, for uploads and checks outside the cache.
    pub fn client(&self) -> &Arc<dyn ObjectStore> {
        &self.client
    }

    pub fn config(&self) -> &S3Config {
        &self.cfg
    }

    fn key_config(&self, name: &str) -> Result<S3Config> {
        match name.strip_prefix("s3://") {
            Some(_) => {
                let c = S3Config::new(name)?;
                if c.bucket() != self.cfg.bucket() {
                    return Err(Error::BadArgument(format!(
                        "'{name}' is not in bucket '{}' of this store",
                        self.cfg.bucket()
                    )));
                }
                Ok(self.cfg.with_key(c.key()))
            }
            None => Ok(self.cfg.with_key(name)),
        }
    }

    /// Uploads `data` as `key` in one PUT (replacing what is there), for programs and
    /// benchmarks that create their input; mapping it afterwards sees the new ETag.
    pub fn put(&self, key: &str, data: Vec<u8>) -> Result<()> {
        let cfg = self.key_config(key)?;
        let path = cfg.object_path()?;
        self.rt
            .block_on(self.client.put(&path, object_store::PutPayload::from(data)))
            .map_err(|e| crate::error::open_error(&cfg.url(), "upload", e))?;
        Ok(())
    }

    /// Opens an existing object read-only.
    pub fn open_object(&self, key: &str) -> Result<Arc<S3Object>> {
        let cfg = self.key_config(key)?;
        S3Object::open_with(&cfg, self.client.clone(), self.rt.clone()).map(Arc::new)
    }

    /// Opens (or with `options.create`, creates) a chunked prefix.
    pub fn open_chunked(&self, prefix: &str, options: OpenOptions) -> Result<Arc<ChunkedObject>> {
        let cfg = self.key_config(prefix)?;
        let cs = self.chunk_size.unwrap_or(DEFAULT_CHUNK_SIZE);
        ChunkedObject::open_with(&cfg, self.client.clone(), self.rt.clone(), cs, options)
            .map(Arc::new)
    }
}

impl Store for S3Store {
    fn open(&self, object: &str, options: OpenOptions) -> Result<Arc<dyn Object>> {
        if self.chunk_size.is_some() {
            return Ok(self.open_chunked(object, options)?);
        }
        if options.write || options.create {
            return Err(Error::BadArgument(format!(
                "'{object}': whole S3 objects are mapped read-only; use S3Store::chunked to write"
            )));
        }
        Ok(self.open_object(object)?)
    }
}
