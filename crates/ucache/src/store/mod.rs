//! Where buffers come from and go to: the paper's uVFS (Table 3).
//!
//! A [`Store`] is a namespace (a directory, a block device, a bucket, a map in memory) that
//! opens [`Object`]s by name. An object is what one mapping caches. The cache only ever calls
//! the object with whole buffers (the object's last may be shorter) at the mapping's offset
//! plus a multiple of the buffer size, always a multiple of 4 KiB, so a store never has to
//! split or merge requests; batches let a store keep many of them in flight at once.
//!
//! Applications implement these two traits to put their own storage under a mapping.
//!
//! ```
//! use std::sync::Arc;
//! use ucache::store::{MemoryStore, OpenOptions, Store};
//!
//! let store = MemoryStore::new();
//! store.insert("table", vec![7u8; 8192]);
//! let object = store.open("table", OpenOptions::read_only()).unwrap();
//! let mut buf = vec![0u8; 4096];
//! assert_eq!(object.read_at(&mut buf, 4096).unwrap(), 4096);
//! assert!(buf.iter().all(|&b| b == 7));
//! ```

use std::io;
use std::marker::PhantomData;
use std::sync::Arc;

use crate::error::Result;

mod contained;
mod fault;
mod file;
mod io_pool;
mod memory;
#[cfg(feature = "tokio")]
mod owned;
#[cfg(test)]
mod testutil;
mod uring;

pub(crate) use contained::Contained;
pub use fault::{FaultConfig, FaultObject, FaultStore};
pub use file::{FileObject, FileStore};
pub use memory::MemoryStore;
#[cfg(feature = "tokio")]
pub use owned::ReadOwned;
pub use uring::{UringObject, UringOptions, UringStore};

/// How to open an object.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OpenOptions {
    /// Open for writing as well as reading.
    pub write: bool,
    /// Create the object if it does not exist (implies `write`).
    pub create: bool,
}

impl OpenOptions {
    pub fn read_only() -> Self {
        OpenOptions {
            write: false,
            create: false,
        }
    }
    pub fn read_write() -> Self {
        OpenOptions {
            write: true,
            create: false,
        }
    }
    pub fn create() -> Self {
        OpenOptions {
            write: true,
            create: true,
        }
    }
}

/// A namespace of objects.
pub trait Store: Send + Sync + 'static {
    /// Opens `object`. A missing object is [`crate::Error::NotFound`].
    fn open(&self, object: &str, options: OpenOptions) -> Result<Arc<dyn Object>>;
}

/// One batched request: `len` bytes at `ptr` to or from `offset` of the object.
///
/// Constructed only through [`IoBuf::new`], whose caller promises that the memory is valid for
/// the loan. Stores can therefore hand `ptr` to the kernel (pread, io_uring) without further
/// checks. The lifetime ties a request to the one batch or stream call that lends it: a store
/// cannot keep it past that call (the cache reuses or unmaps the memory once the call has
/// returned), nor hand it to another call.
///
/// Reads lend requests by value or `&mut` (the store fills them); writes lend them by shared
/// reference, so a store can read the bytes but not change them, since readers holding shared
/// pins may be looking at the same bytes during a write-back.
///
/// Both rules are the compiler's to enforce. A store that keeps a request does not compile:
///
/// ```compile_fail
/// # use std::io;
/// # use std::sync::Mutex;
/// # use ucache::store::{IoBuf, Object};
/// struct Keeper(Mutex<Vec<IoBuf<'static>>>);
/// impl Object for Keeper {
/// #   fn name(&self) -> &str { "keeper" }
/// #   fn len(&self) -> io::Result<u64> { Ok(0) }
/// #   fn set_len(&self, _: u64) -> io::Result<()> { Ok(()) }
/// #   fn read_at(&self, _: &mut [u8], _: u64) -> io::Result<usize> { Ok(0) }
/// #   fn write_at(&self, _: &[u8], _: u64) -> io::Result<()> { Ok(()) }
/// #   fn sync(&self) -> io::Result<()> { Ok(()) }
///     fn read_stream<'a>(
///         &self,
///         _: usize,
///         next: &mut dyn FnMut() -> Option<IoBuf<'a>>,
///         _: &mut dyn FnMut(IoBuf<'a>, io::Result<usize>),
///     ) {
///         if let Some(r) = next() {
///             self.0.lock().unwrap().push(r); // the loan would outlive the call
///         }
///     }
/// }
/// ```
///
/// Nor does one that writes into a request it is writing back:
///
/// ```compile_fail
/// # use std::io;
/// # use ucache::store::{IoBuf, Object};
/// struct Scribbler;
/// impl Object for Scribbler {
/// #   fn name(&self) -> &str { "scribbler" }
/// #   fn len(&self) -> io::Result<u64> { Ok(0) }
/// #   fn set_len(&self, _: u64) -> io::Result<()> { Ok(()) }
/// #   fn read_at(&self, _: &mut [u8], _: u64) -> io::Result<usize> { Ok(0) }
/// #   fn write_at(&self, _: &[u8], _: u64) -> io::Result<()> { Ok(()) }
/// #   fn sync(&self) -> io::Result<()> { Ok(()) }
///     fn write_batch(&self, reqs: &[IoBuf], out: &mut Vec<io::Result<()>>) {
///         reqs[0].as_mut_slice()[0] ^= 1; // readers may hold the same bytes
///         out.push(Ok(()));
///     }
/// }
/// ```
#[derive(Debug)]
pub struct IoBuf<'a> {
    ptr: *mut u8,
    len: usize,
    offset: u64,
    loan: PhantomData<&'a mut [u8]>,
}

// SAFETY: an IoBuf is a loan of memory for the duration of one batch call (see `IoBuf::new`),
// so moving it to the thread that runs the batch within that call is sound.
unsafe impl Send for IoBuf<'_> {}

impl<'a> IoBuf<'a> {
    /// # Safety
    /// `ptr..ptr+len` must be valid for reads and writes for `'a`, and no other code may access
    /// it until the batch call this request is passed to has returned. A request passed only
    /// by shared reference (to [`Object::write_batch`]) needs only be valid for reads, and
    /// others may read it meanwhile but not write it.
    pub unsafe fn new(ptr: *mut u8, len: usize, offset: u64) -> Self {
        IoBuf {
            ptr,
            len,
            offset,
            loan: PhantomData,
        }
    }
    pub fn ptr(&self) -> *mut u8 {
        self.ptr
    }
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    pub fn offset(&self) -> u64 {
        self.offset
    }
    /// The memory as a slice for the duration of the batch call.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: a request reachable by `&mut` was lent for reading into, exclusively
        // (the constructor's contract).
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: valid for reads, and nobody writes it during the call.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

/// One opened object.
///
/// Reads and writes use whole buffers at the mapping's offset plus a multiple of its buffer
/// size (always multiples of 4 KiB; a write of the object's last buffer may be shorter), and
/// memory aligned to at least 4 KiB, so `O_DIRECT` stores need no bounce buffers.
///
/// A method that panics is reported to the cache's caller as an IO error ("store panicked"),
/// like any failed request; it must not leave IO running on memory it was lent.
/// Requests an [`Object`] has sent, as it counts them ([`Object::requests`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StoreRequests {
    /// Read requests sent (an object store's GETs; retries inside one not counted).
    pub reads: u64,
    /// Bytes those reads asked for, including any read through and dropped (the gaps between
    /// misses merged into one GET).
    pub bytes_read: u64,
}

// `len` asks the store (it can fail); an `is_empty` would only restate it.
#[allow(clippy::len_without_is_empty)]
pub trait Object: Send + Sync + 'static {
    /// The name it was opened under, for error messages.
    fn name(&self) -> &str;

    /// Current length in bytes.
    fn len(&self) -> io::Result<u64>;

    /// Grows or shrinks the object (read-write mappings larger than their object grow it).
    fn set_len(&self, len: u64) -> io::Result<()>;

    /// Reads into `buf` from `offset`, retrying partial reads, and returns the bytes read: fewer
    /// than `buf.len()` only at the end of the object.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize>;

    /// Whether reads may land in memory at any address, not only 4 KiB-aligned (a buffered file,
    /// memory): then a scan read past the cache ([`crate::MapOptions::scan_bypass`]) reads into
    /// the caller's memory as it is, not through a staging copy. The default, `false`, is what
    /// `O_DIRECT` needs; offsets and lengths stay whole buffers either way.
    fn accepts_unaligned(&self) -> bool {
        false
    }

    /// What this object has asked of its server or device so far, where it counts that
    /// itself; `None` (the default) where it does not. The cache's own counters see buffers;
    /// only the store sees how it turned them into requests (an object store's merged GETs,
    /// and the gap bytes it read through and dropped), which is what a network bills.
    fn requests(&self) -> Option<StoreRequests> {
        None
    }

    /// Whether the store reads ahead of sequential reads itself (a buffered file: the kernel's
    /// readahead). A scan read past the cache ([`crate::MapOptions::scan_bypass`]) then reads
    /// each call's bytes straight into the caller's memory; on a store that does not (the
    /// default: `O_DIRECT`, io_uring, object stores), it reads the next windows into a small
    /// ring of its own in the background, so that the device never idles between calls.
    fn reads_ahead(&self) -> bool {
        false
    }

    /// A descriptor of a file whose byte `o` is this object's byte `o`, read through the
    /// kernel's page cache: a [file view](crate::MapOptions::file_view) maps that file itself
    /// and never calls the store to read. `None` (the default) where the object's bytes are
    /// not a file's as they stand (memory, object stores, a store that transforms or checks
    /// what it reads). The descriptor stays the object's and must stay open as long as it.
    fn page_cache_fd(&self) -> Option<std::os::fd::RawFd> {
        None
    }

    /// Writes all of `buf` at `offset`.
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()>;

    /// Makes completed writes durable.
    fn sync(&self) -> io::Result<()>;

    /// Reads a batch; `out[i]` receives the result of `reqs[i]` as [`Object::read_at`] would.
    /// Stores that can keep many requests in flight override this; the default runs them one
    /// after another.
    fn read_batch(&self, reqs: &mut [IoBuf], out: &mut Vec<io::Result<usize>>) {
        out.clear();
        for r in reqs.iter_mut() {
            let off = r.offset();
            out.push(self.read_at(r.as_mut_slice(), off));
        }
    }

    /// Reads a stream of requests pulled from `next`, at most `depth` in flight, and hands each
    /// one back to `done` with its result as soon as it finishes, in any order. Unlike
    /// [`Object::read_batch`], a slow request holds nothing else back: a store that keeps
    /// requests in flight (io_uring) refills its queue read by read, so a producer that keeps
    /// `next` supplied keeps the device busy. `next` is asked whenever there is room; it may
    /// answer `None` for now and have more after a completion (a queue being filled by other
    /// threads). The call returns once `next` answers `None` with nothing in flight.
    ///
    /// The default pulls up to `depth` requests at a time and reads them as one
    /// [`Object::read_batch`]. `done` must not start another batch or stream on this thread.
    ///
    /// Every request pulled from `next` must go back through `done` before the call returns;
    /// one that does not is failed by the cache, which then reclaims its memory.
    fn read_stream<'a>(
        &self,
        depth: usize,
        next: &mut dyn FnMut() -> Option<IoBuf<'a>>,
        done: &mut dyn FnMut(IoBuf<'a>, io::Result<usize>),
    ) {
        let depth = depth.max(1);
        let mut reqs = Vec::with_capacity(depth);
        let mut out = Vec::with_capacity(depth);
        loop {
            while reqs.len() < depth {
                match next() {
                    Some(r) => reqs.push(r),
                    None => break,
                }
            }
            if reqs.is_empty() {
                return;
            }
            self.read_batch(&mut reqs, &mut out);
            let mut results = out.drain(..);
            for r in reqs.drain(..) {
                let got = results
                    .next()
                    .unwrap_or_else(|| Err(io::Error::other("store returned too few results")));
                done(r, got);
            }
        }
    }

    /// (Feature `tokio`.) Reads `len` bytes at `offset` without blocking the calling thread,
    /// into memory the future owns: the async pins' miss ([`crate::Mapping::pin_shared_async`]).
    /// The bytes are as [`Object::read_at`] would read them (fewer only at the end of the
    /// object). The future may be dropped before it finishes (a cancelled task); it must then
    /// stop, or finish harmlessly, on its own memory.
    ///
    /// The default runs [`Object::read_at`] on tokio's blocking pool (`spawn_blocking`), so it
    /// must be polled inside a tokio runtime. Stores with an async client (an object store's
    /// HTTP requests) override it to await their client directly, so a miss then occupies no
    /// thread at all while it waits.
    #[cfg(feature = "tokio")]
    fn read_owned(self: Arc<Self>, offset: u64, len: usize) -> ReadOwned {
        owned::on_blocking_pool(self, offset, len)
    }

    /// Writes a batch; `out[i]` receives the result of `reqs[i]`. The requests are lent by
    /// shared reference: others may be reading the same bytes meanwhile.
    fn write_batch(&self, reqs: &[IoBuf], out: &mut Vec<io::Result<()>>) {
        out.clear();
        for r in reqs.iter() {
            out.push(self.write_at(r.as_slice(), r.offset()));
        }
    }
}

/// Reads until `buf` is full or the object ends, retrying interrupted and partial reads.
pub(crate) fn read_full(
    mut read: impl FnMut(&mut [u8], u64) -> io::Result<usize>,
    buf: &mut [u8],
    offset: u64,
) -> io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match read(&mut buf[done..], offset + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

/// Writes all of `buf`, retrying interrupted and partial writes.
pub(crate) fn write_full(
    mut write: impl FnMut(&[u8], u64) -> io::Result<usize>,
    buf: &[u8],
    offset: u64,
) -> io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        match write(&buf[done..], offset + done as u64) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
