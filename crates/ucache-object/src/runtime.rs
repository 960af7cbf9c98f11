//! The tokio runtime behind a store's requests.
//!
//! object_store is async; the cache calls stores from its own threads and expects a blocking
//! answer. Each [`crate::S3Store`] owns one small multi-thread runtime: cache threads hand it a
//! batch and block until the batch is done, while its workers keep every request of the batch
//! in flight. Hits never reach a store, so they never touch the runtime.

use std::future::Future;

use ucache::{Error, Result};

pub(crate) struct Runtime {
    /// Always `Some` until dropped.
    rt: Option<tokio::runtime::Runtime>,
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
        Ok(Runtime { rt: Some(rt) })
    }

    fn rt(&self) -> &tokio::runtime::Runtime {
        self.rt.as_ref().expect("runtime used after drop")
    }

    /// Runs `f` to completion on the runtime, blocking the calling thread.
    ///
    /// A thread inside some tokio runtime (async code that calls a mapping, or the object,
    /// directly) may not block in another runtime's `block_on`: tokio panics. That call is
    /// made from a helper thread instead, and the caller blocks as on any other IO; async
    /// programs should still call blocking IO through `spawn_blocking`.
    pub(crate) fn block_on<F>(&self, f: F) -> F::Output
    where
        F: Future + Send,
        F::Output: Send,
    {
        if tokio::runtime::Handle::try_current().is_err() {
            return self.rt().block_on(f);
        }
        std::thread::scope(|s| {
            s.spawn(|| self.rt().block_on(f))
                .join()
                .unwrap_or_else(|p| std::panic::resume_unwind(p))
        })
    }

    pub(crate) fn handle(&self) -> &tokio::runtime::Handle {
        self.rt().handle()
    }
}

impl Drop for Runtime {
    /// Without waiting for the workers: tokio refuses a blocking shutdown from inside a
    /// runtime, where the last store may well be dropped.
    fn drop(&mut self) {
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}
