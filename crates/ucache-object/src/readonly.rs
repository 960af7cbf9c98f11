//! [`S3Object`]: one existing S3 object as a read-only [`Object`].
//!
//! Objects in S3 are immutable blobs, so a cached copy stays right exactly as long as the
//! object is not replaced. The ETag seen at open is sent as `If-Match` on every GET (and
//! compared with each response, for servers that ignore the header): once the object is
//! overwritten, reads fail with [`ucache::Error::ObjectChanged`] instead of mixing buffers of
//! two versions in one mapping.
//!
//! Each batch of misses (a prefetch, an `ensure_cached_buffers`, a fault-around) becomes one
//! ranged GET per run of adjacent buffers, all of them in flight at once up to
//! [`S3Config::max_in_flight`]: a GET's latency is milliseconds, so throughput comes from
//! concurrency, not from request size.
//!
//! ```no_run
//! use std::sync::Arc;
//! use ucache::{Cache, CacheOptions, MapOptions};
//! use ucache_object::{S3Config, S3Store};
//!
//! let store = S3Store::new(S3Config::from_env("s3://data/orders.bin")?)?;
//! let cache = Cache::new(CacheOptions::new(256 << 20))?;
//! let m = cache.map(Arc::new(store), "orders.bin", MapOptions::new().buffer_size(64 << 10))?;
//! let first = m.pin_shared(0)?;
//! println!("first byte: {}", first[0]);
//! # Ok::<(), ucache::Error>(())
//! ```

use std::io;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use object_store::path::Path;
use object_store::{GetOptions, GetRange, ObjectStore, ObjectStoreExt};
use tokio::sync::Semaphore;
use ucache::store::{IoBuf, Object, StoreRequests};
use ucache::Result;

use crate::coalesce::{coalesce, Coalesce};
use crate::config::S3Config;
use crate::error::{changed, dup, missing_object, to_io};
use crate::runtime::Runtime;

/// One S3 object, read-only, with its length and ETag fixed at open.
pub struct S3Object {
    name: String,
    client: Arc<dyn ObjectStore>,
    path: Path,
    len: u64,
    etag: Option<String>,
    rt: Arc<Runtime>,
    in_flight: usize,
    coalescing: Coalesce,
    gets: AtomicU64,
    bytes_got: AtomicU64,
    in_flight_now: Arc<AtomicU64>,
    in_flight_peak: Arc<AtomicU64>,
}

/// One GET in flight, counted from its start to its end (or its abort).
struct InFlight(Arc<AtomicU64>);

impl InFlight {
    fn enter(now: &Arc<AtomicU64>, peak: &AtomicU64) -> InFlight {
        let n = now.fetch_add(1, Ordering::Relaxed) + 1;
        peak.fetch_max(n, Ordering::Relaxed);
        InFlight(now.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl S3Object {
    /// Opens `cfg`'s key with a client and runtime of its own (for a single object; an
    /// [`crate::S3Store`] shares both between the objects it opens).
    pub fn open(cfg: &S3Config) -> Result<Arc<S3Object>> {
        let rt = Arc::new(Runtime::new(cfg.threads())?);
        Self::open_with(cfg, cfg.build()?, rt).map(Arc::new)
    }

    pub(crate) fn open_with(
        cfg: &S3Config,
        client: Arc<dyn ObjectStore>,
        rt: Arc<Runtime>,
    ) -> Result<S3Object> {
        let name = cfg.url();
        let path = cfg.object_path()?;
        let meta = rt.block_on(async {
            match client.head(&path).await {
                Ok(m) => Ok(m),
                Err(e) => Err(missing_object(client.as_ref(), &name, &path, e).await),
            }
        })?;
        Ok(S3Object {
            name,
            client,
            path,
            len: meta.size,
            etag: meta.e_tag,
            rt,
            in_flight: cfg.in_flight(),
            coalescing: cfg.coalescing(),
            gets: AtomicU64::new(0),
            bytes_got: AtomicU64::new(0),
            in_flight_now: Arc::default(),
            in_flight_peak: Arc::default(),
        })
    }

    /// GET requests issued so far (retries inside one request not counted): what a batch of
    /// misses cost in requests, which is what S3 bills.
    pub fn gets(&self) -> u64 {
        self.gets.load(Ordering::Relaxed)
    }

    /// The most GETs this object had in flight at once so far (blocking batches and async
    /// reads alike): what a benchmark of concurrent misses reports.
    pub fn peak_gets_in_flight(&self) -> u64 {
        self.in_flight_peak.load(Ordering::Relaxed)
    }

    /// Starts [`S3Object::peak_gets_in_flight`] over from the GETs in flight now.
    pub fn reset_peak_gets_in_flight(&self) {
        let now = self.in_flight_now.load(Ordering::Relaxed);
        self.in_flight_peak.store(now, Ordering::Relaxed);
    }

    /// Counts `gets` requests for `bytes` in all, as they are issued.
    fn count(&self, gets: u64, bytes: u64) {
        self.gets.fetch_add(gets, Ordering::Relaxed);
        self.bytes_got.fetch_add(bytes, Ordering::Relaxed);
    }

    /// The ETag the object had when it was opened.
    pub fn etag(&self) -> Option<&str> {
        self.etag.as_deref()
    }

    /// Runs one ranged GET per range, all in flight at once up to the configured limit, and
    /// returns the bytes of each. A range that is empty or reaches past the end fails the whole
    /// call with `InvalidInput` naming the object. Public so benchmarks can measure the same
    /// requests without a cache in front.
    pub fn get_ranges(&self, ranges: &[Range<u64>]) -> Vec<io::Result<Bytes>> {
        // Checked here, not left to the server: a short answer inside the object means it
        // changed, so a range past the end must never reach the response check.
        if let Some(r) = ranges.iter().find(|r| r.end > self.len || r.start >= r.end) {
            let e = io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "range {}..{} is empty or past the end of {} ({} bytes)",
                    r.start, r.end, self.name, self.len
                ),
            );
            return ranges.iter().map(|_| Err(dup(&e))).collect();
        }
        self.count(
            ranges.len() as u64,
            ranges.iter().map(|r| r.end - r.start).sum(),
        );
        let sem = Arc::new(Semaphore::new(self.in_flight));
        self.rt.block_on(async {
            let handles: Vec<_> = ranges
                .iter()
                .map(|r| {
                    let r = r.clone();
                    let client = self.client.clone();
                    let path = self.path.clone();
                    let name = self.name.clone();
                    let etag = self.etag.clone();
                    let sem = sem.clone();
                    let (now, peak) = (self.in_flight_now.clone(), self.in_flight_peak.clone());
                    self.rt.handle().spawn(async move {
                        let _slot = sem.acquire_owned().await;
                        let _counted = InFlight::enter(&now, &peak);
                        get_range(&*client, &path, &name, etag, r).await
                    })
                })
                .collect();
            let mut out = Vec::with_capacity(handles.len());
            for h in handles {
                out.push(h.await.unwrap_or_else(|e| Err(io::Error::other(e))));
            }
            out
        })
    }
}

/// One GET of `r`, checked against the ETag and the length asked for.
async fn get_range(
    client: &dyn ObjectStore,
    path: &Path,
    name: &str,
    etag: Option<String>,
    r: Range<u64>,
) -> io::Result<Bytes> {
    let want = r.end - r.start;
    let opts = GetOptions {
        if_match: etag.clone(),
        range: Some(GetRange::Bounded(r.clone())),
        ..Default::default()
    };
    let what = format!("range {}..{}", r.start, r.end);
    let res = client
        .get_opts(path, opts)
        .await
        .map_err(|e| to_io(name, &what, e))?;
    if etag.is_some() && res.meta.e_tag.is_some() && res.meta.e_tag != etag {
        return Err(changed(name));
    }
    let bytes = res.bytes().await.map_err(|e| to_io(name, &what, e))?;
    if bytes.len() as u64 != want {
        // Inside the length seen at open, a short answer means the object shrank.
        return Err(changed(name));
    }
    Ok(bytes)
}

impl Object for S3Object {
    fn name(&self) -> &str {
        &self.name
    }

    fn len(&self) -> io::Result<u64> {
        Ok(self.len)
    }

    fn set_len(&self, _len: u64) -> io::Result<()> {
        Err(read_only(&self.name))
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        // SAFETY: `buf` is an exclusive borrow for the duration of the batch call.
        let mut req = [unsafe { IoBuf::new(buf.as_mut_ptr(), buf.len(), offset) }];
        let mut out = Vec::with_capacity(1);
        self.read_batch(&mut req, &mut out);
        out.pop().unwrap_or(Ok(0))
    }

    fn write_at(&self, _buf: &[u8], _offset: u64) -> io::Result<()> {
        Err(read_only(&self.name))
    }

    fn sync(&self) -> io::Result<()> {
        Ok(())
    }

    fn requests(&self) -> Option<StoreRequests> {
        Some(StoreRequests {
            reads: self.gets.load(Ordering::Relaxed),
            bytes_read: self.bytes_got.load(Ordering::Relaxed),
        })
    }

    /// The async miss's read ([`ucache::Mapping::pin_shared_async`]): one ranged GET, with
    /// the same ETag and length checks as a batch, run on this store's runtime and awaited
    /// from the caller's, so the caller's thread is free while it is in flight. Not on the
    /// caller's runtime itself: the client's pooled connections live on the runtime that
    /// opened them, and one opened on a caller's runtime would stall every later read (the
    /// blocking ones included) once that runtime stops being driven. A dropped future aborts
    /// its GET.
    fn read_owned(self: Arc<Self>, offset: u64, len: usize) -> ucache::store::ReadOwned {
        let n = (len as u64).min(self.len.saturating_sub(offset));
        if n == 0 {
            return Box::pin(async { Ok(Vec::new()) });
        }
        self.count(1, n);
        let (client, path, name) = (self.client.clone(), self.path.clone(), self.name.clone());
        let etag = self.etag.clone();
        let (now, peak) = (self.in_flight_now.clone(), self.in_flight_peak.clone());
        let mut task = AbortOnDrop(self.rt.handle().spawn(async move {
            let _counted = InFlight::enter(&now, &peak);
            get_range(&*client, &path, &name, etag, offset..offset + n).await
        }));
        Box::pin(async move {
            match (&mut task.0).await {
                Ok(got) => got.map(Vec::from),
                Err(e) => Err(io::Error::other(e)),
            }
        })
    }

    fn read_batch(&self, reqs: &mut [IoBuf], out: &mut Vec<io::Result<usize>>) {
        // Each request is clamped to the object: the last buffer of a mapping may be partial.
        let spans: Vec<(u64, usize)> = reqs
            .iter()
            .map(|r| {
                let avail = self.len.saturating_sub(r.offset());
                (r.offset(), (r.len() as u64).min(avail) as usize)
            })
            .collect();
        let runs = coalesce(&spans, self.coalescing);
        let ranges: Vec<Range<u64>> = runs.iter().map(|r| r.start..r.end).collect();
        let fetched = self.get_ranges(&ranges);
        out.clear();
        out.extend(spans.iter().map(|&(_, n)| Ok(n)));
        for (run, got) in runs.iter().zip(fetched) {
            match got {
                Ok(bytes) => {
                    for &i in &run.members {
                        let (off, n) = spans[i];
                        let at = (off - run.start) as usize;
                        reqs[i].as_mut_slice()[..n].copy_from_slice(&bytes[at..at + n]);
                    }
                }
                Err(e) => {
                    for &i in &run.members {
                        out[i] = Err(dup(&e));
                    }
                }
            }
        }
    }
}

/// A task of the store's runtime that is aborted if its awaiting future is dropped.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

fn read_only(name: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::PermissionDenied,
        format!("{name} is a read-only S3 object; map a chunked prefix to write"),
    )
}
