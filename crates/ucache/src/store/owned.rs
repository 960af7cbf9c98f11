//! The async read of the `tokio` feature: [`Object::read_owned`] and what makes it safe to
//! drop.
//!
//! An async miss may be cancelled at any await (its task dropped, a `select!` taking another
//! branch), and its buffer's memory is then given back at once. So an async read never borrows
//! the cache's memory: it returns bytes it owns, and the cache copies them into the buffer
//! after the await, while it still holds the buffer's claim. A cancelled read simply drops its
//! own bytes (or, for a blocking store, a `spawn_blocking` task finishes into a vector nobody
//! reads).

use std::future::Future;
use std::io;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use super::Object;

/// The bytes of an async read: as many as [`Object::read_at`] would have read (fewer than
/// asked only at the end of the object).
pub type ReadOwned = Pin<Box<dyn Future<Output = io::Result<Vec<u8>>> + Send + 'static>>;

/// The default [`Object::read_owned`]: the synchronous read on tokio's blocking pool, so a
/// store without an async client still never blocks an executor thread.
pub(super) fn on_blocking_pool<O: Object + ?Sized>(
    o: Arc<O>,
    offset: u64,
    len: usize,
) -> ReadOwned {
    let task = tokio::task::spawn_blocking(move || {
        let mut v = vec![0u8; len];
        let n = o.read_at(&mut v, offset)?;
        v.truncate(n);
        Ok(v)
    });
    Box::pin(async move {
        task.await.unwrap_or_else(|e| {
            Err(io::Error::other(if e.is_panic() {
                "store panicked in a blocking read".to_string()
            } else {
                format!("blocking read cancelled: {e}")
            }))
        })
    })
}

/// A store's async read with its panics, at the call or at any poll, turned into IO errors,
/// as [`super::Contained`] does for the synchronous calls.
pub(super) fn contained(o: &Arc<dyn Object>, offset: u64, len: usize) -> ReadOwned {
    match catch_unwind(AssertUnwindSafe(|| o.clone().read_owned(offset, len))) {
        Ok(f) => Box::pin(CatchUnwind(f)),
        Err(p) => {
            let e = super::contained::panicked(&*p);
            Box::pin(async move { Err(e) })
        }
    }
}

struct CatchUnwind(ReadOwned);

impl Future for CatchUnwind {
    type Output = io::Result<Vec<u8>>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let f = &mut self.0;
        catch_unwind(AssertUnwindSafe(|| f.as_mut().poll(cx)))
            .unwrap_or_else(|p| Poll::Ready(Err(super::contained::panicked(&*p))))
    }
}
