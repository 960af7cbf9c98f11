//! The tokio runtime behind a store's requests.
//!
//! object_store is async; the cache calls stores from its own threads and expects a blocking
//! answer. Each [`crate::S3Store`] owns one small multi-thread runtime: cache threads hand it a
//! batch and block until the batch is done, while its workers keep every request of the batch
//! in flight. Hits never reach a store, so they never touch the runtime.

use std::future::Future;

use ucache::{Error, Result};

pub(crate) struct Runtime {
    rt: tokio::runtime::Runtime,
}

impl Runtime {
    pub(crate) fn new(threads: usize) -> Result<Self> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .thread_name("ucache-s3")
            .enable_all()
            .build()
            .map_err(|source| Error::Os {
                call: "tokio runtime",
                source,
            })?;
        Ok(Runtime { rt })
    }

    /// Runs `f` to completion on the runtime, blocking the calling thread.
    ///
    /// Must not be called from inside an async task (tokio refuses to block a worker); the
    /// cache never does, and a program that maps objects from async code calls the mapping
    /// through `spawn_blocking`.
    pub(crate) fn block_on<F: Future>(&self, f: F) -> F::Output {
        self.rt.block_on(f)
    }

    pub(crate) fn handle(&self) -> &tokio::runtime::Handle {
        self.rt.handle()
    }
}
