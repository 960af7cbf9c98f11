//! [`ChunkedObject`]: a read-write object stored as fixed-size chunk objects under a prefix.
//!
//! S3 cannot overwrite part of an object, so a writable mapping is laid out as
//! `prefix/00000000`, `prefix/00000001`, … (chunk index in hex), each exactly `chunk_size`
//! bytes, plus `prefix/manifest` holding the length and the chunk size. A chunk never written
//! reads as zeros, so a large sparse mapping costs nothing until it is written.
//!
//! Write-back PUTs whole chunks. When the buffers written do not cover a chunk (buffers smaller
//! than chunks), the chunk is read, patched and PUT again; chunks of one batch are written
//! concurrently, and writers of the same chunk are serialized so two buffers of one chunk
//! never lose each other's bytes. `sync` (the cache's `msync`) returns once every PUT and the
//! manifest have been acknowledged by the server. A failed PUT leaves the buffer dirty in the
//! cache; the next `msync` writes it again.
//!
//! # Several nodes on one prefix
//!
//! Each node's cache is its own: nothing tells node A that node B wrote a chunk, so A may keep
//! serving its cached bytes. PUTs are atomic per chunk and the last writer of a chunk wins
//! (including the bytes it read-modify-wrote from an older version). Programs that share a
//! prefix between writers must coordinate (one writer per chunk range, or a lock or lease of
//! their own) and remap after another node's `msync` to see its data.
//!
//! ```no_run
//! use std::sync::Arc;
//! use ucache::{Cache, CacheOptions, MapOptions};
//! use ucache_object::{S3Config, S3Store};
//!
//! let store = S3Store::chunked(S3Config::from_env("s3://data")?, 1 << 20)?;
//! let cache = Cache::new(CacheOptions::new(64 << 20))?;
//! let m = cache.map(
//!     Arc::new(store),
//!     "logs/segment-7",
//!     MapOptions::new().writable(true).create(true).len(16 << 20),
//! )?;
//! m.pin_exclusive(3)?[0] = 42;
//! m.msync(0, m.len())?; // returns after the server acknowledged the PUTs
//! # Ok::<(), ucache::Error>(())
//! ```

use std::collections::BTreeMap;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use object_store::path::Path;
use object_store::{GetOptions, GetRange, ObjectStore, ObjectStoreExt, PutPayload};
use parking_lot::Mutex;
use tokio::sync::Semaphore;
use ucache::store::{IoBuf, Object, OpenOptions};
use ucache::{Error, Result};

use crate::coalesce::{coalesce, Coalesce};
use crate::config::S3Config;
use crate::error::{dup, no_such_bucket, open_error, to_io};
use crate::manifest::valid_chunk_size;
pub use crate::manifest::{manifest_text, parse_manifest, MAX_CHUNK_SIZE, MAX_LEN};
use crate::runtime::Runtime;

/// Chunk size of [`crate::S3Store::chunked`] when none is given: large enough that a
/// sequential write-back is few PUTs, small enough that a read-modify-write of one 4 KiB
/// buffer moves 1 MiB, not more.
pub const DEFAULT_CHUNK_SIZE: u64 = 1 << 20;

const STRIPES: usize = 64;

/// A prefix of chunk objects, read and written through the cache.
pub struct ChunkedObject {
    name: String,
    client: Arc<dyn ObjectStore>,
    prefix: String,
    /// `prefix` as the client's path, spelled exactly as given (see `S3Config::object_path`).
    root: Path,
    rt: Arc<Runtime>,
    chunk_size: u64,
    len: Mutex<u64>,
    /// A length not yet in the manifest. Writers that extend the object set it under `len`;
    /// an upload clears it before it reads the length, so a later extension stays pending.
    manifest_dirty: AtomicBool,
    /// Held across reading the length and uploading the manifest, so uploads land in the
    /// order their lengths were read, and a `sync` that finds nothing pending has waited for
    /// the upload that took it.
    manifest: Mutex<()>,
    writable: bool,
    in_flight: usize,
    coalescing: Coalesce,
    /// Serializes writers of the same chunk (striped by chunk index).
    stripes: Vec<Mutex<()>>,
}

/// Part of one request that falls in one chunk.
#[derive(Clone, Copy, Debug)]
struct Piece {
    req: usize,
    at: usize,
    chunk: u64,
    start: u64,
    len: usize,
}

impl ChunkedObject {
    pub(crate) fn open_with(
        cfg: &S3Config,
        client: Arc<dyn ObjectStore>,
        rt: Arc<Runtime>,
        chunk_size: u64,
        options: OpenOptions,
    ) -> Result<ChunkedObject> {
        let name = cfg.url();
        let prefix = cfg.key().trim_end_matches('/').to_string();
        if prefix.is_empty() {
            return Err(Error::BadArgument(format!(
                "{name}: a chunked object needs a key prefix"
            )));
        }
        let root = cfg.with_key(&prefix).object_path()?;
        if !valid_chunk_size(chunk_size) {
            return Err(Error::BadArgument(format!(
                "chunk size {chunk_size} must be a positive multiple of 4096 of at most \
                 {MAX_CHUNK_SIZE}"
            )));
        }
        let manifest_at = |root: &Path| {
            let manifest = root.clone().join("manifest");
            rt.block_on(async {
                match client.get(&manifest).await {
                    Ok(r) => r.bytes().await.map(Some),
                    // A missing bucket is an error, not a prefix to create.
                    Err(e @ object_store::Error::NotFound { .. }) if !no_such_bucket(&e) => {
                        Ok(None)
                    }
                    Err(e) => Err(e),
                }
            })
            .map_err(|e| open_error(&name, "manifest", e))
        };
        let mut root = root;
        let mut got = manifest_at(&root)?;
        if got.is_none() {
            // Until 2026-11-25 the keys were built with `Path::from`, which percent-encodes
            // `~`, `[`, `%` and the like: a prefix written then lives under that spelling, and
            // stays there, rather than look missing (or be created again, empty).
            let legacy = Path::from(prefix.as_str());
            if legacy != root {
                if let Some(b) = manifest_at(&legacy)? {
                    root = legacy;
                    got = Some(b);
                }
            }
        }
        let (len, chunk_size, fresh) = match got {
            Some(b) => {
                let (l, cs) = parse_manifest(&b).ok_or_else(|| {
                    Error::BadArgument(format!("{name}: manifest is not a ucache chunk manifest"))
                })?;
                (l, cs, false)
            }
            None if options.create => (0, chunk_size, true),
            None => return Err(Error::NotFound { object: name }),
        };
        let o = ChunkedObject {
            name,
            client,
            prefix,
            root,
            rt,
            chunk_size,
            len: Mutex::new(len),
            manifest_dirty: AtomicBool::new(fresh),
            manifest: Mutex::new(()),
            writable: options.write || options.create,
            in_flight: cfg.in_flight(),
            coalescing: cfg.coalescing(),
            stripes: (0..STRIPES).map(|_| Mutex::new(())).collect(),
        };
        if fresh {
            o.sync().map_err(|e| Error::io("create", &o.name, 0, e))?;
        }
        Ok(o)
    }

    /// Bytes per chunk object (the manifest's, for an existing prefix).
    pub fn chunk_size(&self) -> u64 {
        self.chunk_size
    }

    /// The key of chunk `index`.
    pub fn chunk_key(&self, index: u64) -> String {
        format!("{}/{index:08x}", self.prefix)
    }

    fn chunk_path(&self, index: u64) -> Path {
        // Hex digits need no encoding, so the child is spelled as `chunk_key` says.
        self.root.clone().join(format!("{index:08x}"))
    }

    /// Uploads the current length; the caller holds `manifest`.
    fn put_manifest(&self, _order: &parking_lot::MutexGuard<'_, ()>) -> io::Result<()> {
        let len = *self.len.lock();
        let text = manifest_text(len, self.chunk_size);
        let path = self.root.clone().join("manifest");
        self.rt
            .block_on(self.client.put(&path, PutPayload::from(text.into_bytes())))
            .map_err(|e| to_io(&self.name, "manifest", e))?;
        Ok(())
    }

    /// Splits requests at chunk boundaries (clamped to `limit` bytes of object).
    fn pieces(&self, spans: &[(u64, usize)]) -> Vec<Piece> {
        let cs = self.chunk_size;
        let mut v = Vec::new();
        for (req, &(off, len)) in spans.iter().enumerate() {
            let mut pos = off;
            let end = off + len as u64;
            while pos < end {
                let chunk = pos / cs;
                let start = pos % cs;
                let n = (cs - start).min(end - pos);
                v.push(Piece {
                    req,
                    at: (pos - off) as usize,
                    chunk,
                    start,
                    len: n as usize,
                });
                pos += n;
            }
        }
        v
    }

    fn check_writable(&self) -> io::Result<()> {
        if self.writable {
            Ok(())
        } else {
            Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!("cannot write '{}': it was opened read-only", self.name),
            ))
        }
    }

    /// Writes the requests: one PUT per touched chunk, all in flight at once, after fetching
    /// the chunks they do not cover completely.
    fn write_spans(&self, spans: &[(u64, &[u8])]) -> Vec<io::Result<()>> {
        if let Err(e) = self.check_writable() {
            return spans.iter().map(|_| Err(dup(&e))).collect();
        }
        let lens: Vec<(u64, usize)> = spans.iter().map(|&(o, b)| (o, b.len())).collect();
        let pieces = self.pieces(&lens);
        let mut by_chunk: BTreeMap<u64, Vec<Piece>> = BTreeMap::new();
        for p in pieces {
            by_chunk.entry(p.chunk).or_default().push(p);
        }
        // Stripe locks in ascending order: no two batches can wait on each other.
        let mut stripes: Vec<usize> = by_chunk
            .keys()
            .map(|&c| (c % STRIPES as u64) as usize)
            .collect();
        stripes.sort_unstable();
        stripes.dedup();
        let _held: Vec<_> = stripes.iter().map(|&s| self.stripes[s].lock()).collect();

        let cs = self.chunk_size as usize;
        let sem = Arc::new(Semaphore::new(self.in_flight));
        let results: Vec<(u64, io::Result<()>)> = self.rt.block_on(async {
            let handles: Vec<_> = by_chunk
                .iter()
                .map(|(&chunk, ps)| {
                    let covered = covers_chunk(ps, cs);
                    let patches: Vec<(usize, Bytes)> = ps
                        .iter()
                        .map(|p| {
                            let src = &spans[p.req].1[p.at..p.at + p.len];
                            (p.start as usize, Bytes::copy_from_slice(src))
                        })
                        .collect();
                    let client = self.client.clone();
                    let path = self.chunk_path(chunk);
                    let name = self.name.clone();
                    let key = self.chunk_key(chunk);
                    let sem = sem.clone();
                    let h = self.rt.handle().spawn(async move {
                        let _slot = sem.acquire_owned().await;
                        let mut data = if covered {
                            vec![0u8; cs]
                        } else {
                            match client.get(&path).await {
                                Ok(r) => {
                                    let b = r.bytes().await.map_err(|e| to_io(&name, &key, e))?;
                                    if b.len() != cs {
                                        return Err(not_a_chunk(&name, &key, b.len(), cs));
                                    }
                                    b.to_vec()
                                }
                                Err(object_store::Error::NotFound { .. }) => vec![0u8; cs],
                                Err(e) => return Err(to_io(&name, &key, e)),
                            }
                        };
                        for (at, b) in patches {
                            data[at..at + b.len()].copy_from_slice(&b);
                        }
                        client
                            .put(&path, PutPayload::from(data))
                            .await
                            .map_err(|e| to_io(&name, &key, e))?;
                        Ok(())
                    });
                    (chunk, h)
                })
                .collect();
            let mut out = Vec::with_capacity(handles.len());
            for (c, h) in handles {
                out.push((c, h.await.unwrap_or_else(|e| Err(io::Error::other(e)))));
            }
            out
        });
        // A request succeeds when every chunk it touches was written.
        let failed: BTreeMap<u64, io::Error> = results
            .into_iter()
            .filter_map(|(c, r)| r.err().map(|e| (c, e)))
            .collect();
        let mut out: Vec<io::Result<()>> = spans.iter().map(|_| Ok(())).collect();
        for (c, ps) in &by_chunk {
            if let Some(e) = failed.get(c) {
                for p in ps {
                    out[p.req] = Err(dup(e));
                }
            }
        }
        let mut len = self.len.lock();
        for (r, &(off, b)) in out.iter().zip(spans) {
            let end = off + b.len() as u64;
            if r.is_ok() && end > *len {
                *len = end;
                self.manifest_dirty.store(true, Ordering::Release);
            }
        }
        out
    }
}

/// A chunk object whose answer has not the bytes the library always writes.
fn not_a_chunk(name: &str, key: &str, got: usize, want: usize) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("{name}: chunk {key} answered {got} bytes where {want} were expected"),
    )
}

/// Whether the pieces of one chunk together cover all of it.
fn covers_chunk(ps: &[Piece], cs: usize) -> bool {
    let mut iv: Vec<(usize, usize)> = ps
        .iter()
        .map(|p| (p.start as usize, p.start as usize + p.len))
        .collect();
    iv.sort_unstable();
    let mut reach = 0;
    for (s, e) in iv {
        if s > reach {
            return false;
        }
        reach = reach.max(e);
    }
    reach >= cs
}

impl Object for ChunkedObject {
    fn name(&self) -> &str {
        &self.name
    }

    fn len(&self) -> io::Result<u64> {
        Ok(*self.len.lock())
    }

    fn set_len(&self, new: u64) -> io::Result<()> {
        self.check_writable()?;
        let order = self.manifest.lock();
        let old = *self.len.lock();
        if new < old {
            // Zero the dropped tail of the last kept chunk so that growing again reads zeros,
            // as a file would; chunks wholly past the end are deleted.
            let tail = new % self.chunk_size;
            if tail != 0 {
                let zeros = vec![0u8; (self.chunk_size - tail) as usize];
                self.write_spans(&[(new, &zeros)]).remove(0)?;
            }
            let first_gone = new.div_ceil(self.chunk_size);
            let last = old.div_ceil(self.chunk_size);
            for c in first_gone..last {
                match self.rt.block_on(self.client.delete(&self.chunk_path(c))) {
                    Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                    Err(e) => return Err(to_io(&self.name, &self.chunk_key(c), e)),
                }
            }
        }
        *self.len.lock() = new;
        self.manifest_dirty.store(false, Ordering::Release);
        if let Err(e) = self.put_manifest(&order) {
            // Not durable, so not done: the old length comes back unless a write has moved
            // it on since, which stays pending for the next sync.
            let mut len = self.len.lock();
            if *len == new {
                *len = old;
            } else {
                self.manifest_dirty.store(true, Ordering::Release);
            }
            return Err(e);
        }
        Ok(())
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        // SAFETY: `buf` is an exclusive borrow for the duration of the batch call.
        let mut req = [unsafe { IoBuf::new(buf.as_mut_ptr(), buf.len(), offset) }];
        let mut out = Vec::with_capacity(1);
        self.read_batch(&mut req, &mut out);
        out.pop().unwrap_or(Ok(0))
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.write_spans(&[(offset, buf)]).remove(0)
    }

    fn sync(&self) -> io::Result<()> {
        // Chunk PUTs are acknowledged before write_at returns; only the length can be pending.
        let order = self.manifest.lock();
        if self.manifest_dirty.swap(false, Ordering::AcqRel) {
            if let Err(e) = self.put_manifest(&order) {
                self.manifest_dirty.store(true, Ordering::Release);
                return Err(e);
            }
        }
        Ok(())
    }

    fn read_batch(&self, reqs: &mut [IoBuf], out: &mut Vec<io::Result<usize>>) {
        let len = *self.len.lock();
        let spans: Vec<(u64, usize)> = reqs
            .iter()
            .map(|r| {
                let avail = len.saturating_sub(r.offset());
                (r.offset(), (r.len() as u64).min(avail) as usize)
            })
            .collect();
        let pieces = self.pieces(&spans);
        // One GET per run of adjacent pieces within a chunk.
        let mut by_chunk: BTreeMap<u64, Vec<usize>> = BTreeMap::new();
        for (k, p) in pieces.iter().enumerate() {
            by_chunk.entry(p.chunk).or_default().push(k);
        }
        let mut gets: Vec<(u64, u64, u64, Vec<usize>)> = Vec::new();
        for (&chunk, ks) in &by_chunk {
            let local: Vec<(u64, usize)> = ks
                .iter()
                .map(|&k| (pieces[k].start, pieces[k].len))
                .collect();
            for run in coalesce(&local, self.coalescing) {
                let members = run.members.iter().map(|&m| ks[m]).collect();
                gets.push((chunk, run.start, run.end, members));
            }
        }
        let sem = Arc::new(Semaphore::new(self.in_flight));
        let fetched: Vec<io::Result<Option<Bytes>>> = self.rt.block_on(async {
            let handles: Vec<_> = gets
                .iter()
                .map(|&(chunk, start, end, _)| {
                    let client = self.client.clone();
                    let path = self.chunk_path(chunk);
                    let name = self.name.clone();
                    let key = self.chunk_key(chunk);
                    let sem = sem.clone();
                    self.rt.handle().spawn(async move {
                        let _slot = sem.acquire_owned().await;
                        let opts = GetOptions {
                            range: Some(GetRange::Bounded(start..end)),
                            ..Default::default()
                        };
                        match client.get_opts(&path, opts).await {
                            Ok(r) => {
                                let b = r.bytes().await.map_err(|e| to_io(&name, &key, e))?;
                                // Chunks are always written whole, so a short one is damaged
                                // or foreign: its missing bytes must not read as zeros.
                                let want = (end - start) as usize;
                                if b.len() != want {
                                    return Err(not_a_chunk(&name, &key, b.len(), want));
                                }
                                Ok(Some(b))
                            }
                            // Never written: zeros.
                            Err(object_store::Error::NotFound { .. }) => Ok(None),
                            Err(e) => Err(to_io(&name, &key, e)),
                        }
                    })
                })
                .collect();
            let mut v = Vec::with_capacity(handles.len());
            for h in handles {
                v.push(h.await.unwrap_or_else(|e| Err(io::Error::other(e))));
            }
            v
        });
        out.clear();
        out.extend(spans.iter().map(|&(_, n)| Ok(n)));
        for ((_, start, _, members), got) in gets.iter().zip(fetched) {
            match got {
                Ok(bytes) => {
                    for &k in members {
                        let p = pieces[k];
                        let dst = &mut reqs[p.req].as_mut_slice()[p.at..p.at + p.len];
                        let from = (p.start - start) as usize;
                        match &bytes {
                            Some(b) => dst.copy_from_slice(&b[from..from + p.len]),
                            None => dst.fill(0),
                        }
                    }
                }
                Err(e) => {
                    for &k in members {
                        out[pieces[k].req] = Err(dup(&e));
                    }
                }
            }
        }
    }

    fn write_batch(&self, reqs: &[IoBuf], out: &mut Vec<io::Result<()>>) {
        let spans: Vec<(u64, &[u8])> = reqs.iter().map(|r| (r.offset(), r.as_slice())).collect();
        *out = self.write_spans(&spans);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifest_round_trip() {
        let t = b"ucache-chunked 1\nlength 12288\nchunk_size 4096\n";
        assert_eq!(parse_manifest(t), Some((12288, 4096)));
        assert_eq!(parse_manifest(b"something else\n"), None);
        assert_eq!(parse_manifest(b"ucache-chunked 1\nlength 5\n"), None);
        assert_eq!(
            parse_manifest(manifest_text(MAX_LEN, MAX_CHUNK_SIZE).as_bytes()),
            Some((MAX_LEN, MAX_CHUNK_SIZE))
        );
    }

    /// The manifest comes from the server: sizes this library never writes are refused
    /// (found by fuzz/fuzz_targets/manifest.rs's invariants).
    #[test]
    fn hostile_manifests_are_refused() {
        for (len, cs) in [
            (4096, 1),
            (4096, 4095),
            (4096, 6000),
            (4096, u64::MAX),
            (4096, MAX_CHUNK_SIZE + 4096),
            (u64::MAX, 4096),
            (MAX_LEN + 1, 4096),
        ] {
            assert_eq!(
                parse_manifest(manifest_text(len, cs).as_bytes()),
                None,
                "length {len} chunk_size {cs}"
            );
        }
    }

    /// Opening a prefix whose manifest on the server is hostile fails with a clear error
    /// instead of splitting every buffer into 1-byte GETs or allocating a 2^64-byte chunk.
    #[test]
    fn opening_a_hostile_manifest_fails_cleanly() {
        let client: Arc<dyn ObjectStore> = Arc::new(object_store::memory::InMemory::new());
        let rt = Arc::new(Runtime::new(1).unwrap());
        let cfg = S3Config::new("s3://b/p").unwrap();
        for (len, cs) in [(4096, 1), (4096, u64::MAX), (u64::MAX, 4096)] {
            let text = manifest_text(len, cs);
            rt.block_on(client.put(&Path::from("p/manifest"), PutPayload::from(text)))
                .unwrap();
            let got = ChunkedObject::open_with(
                &cfg,
                client.clone(),
                rt.clone(),
                4096,
                OpenOptions {
                    write: true,
                    create: false,
                },
            );
            match got {
                Err(Error::BadArgument(m)) => assert!(m.contains("manifest"), "{m}"),
                Err(e) => panic!("length {len} chunk_size {cs}: {e}"),
                Ok(_) => panic!("length {len} chunk_size {cs}: opened"),
            }
        }
        let text = manifest_text(8192, 8192);
        rt.block_on(client.put(&Path::from("p/manifest"), PutPayload::from(text)))
            .unwrap();
        let honest =
            ChunkedObject::open_with(&cfg, client, rt, 4096, OpenOptions::read_only()).unwrap();
        assert_eq!((honest.len().unwrap(), honest.chunk_size()), (8192, 8192));
    }

    #[test]
    fn coverage() {
        let p = |start, len| Piece {
            req: 0,
            at: 0,
            chunk: 0,
            start,
            len,
        };
        assert!(covers_chunk(&[p(4096, 4096), p(0, 4096)], 8192));
        assert!(!covers_chunk(&[p(0, 4096)], 8192));
        assert!(!covers_chunk(&[p(0, 4096), p(6000, 2192)], 8192));
    }
}
