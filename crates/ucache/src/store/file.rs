//! Local files and block devices, read and written with `pread`/`pwrite`.
//!
//! The object name is the path. Positioned IO (`read_at`/`write_at`) never touches the shared
//! file offset, so one [`FileObject`] serves any number of threads without a lock.
//!
//! Batches and streams (`ensure_cached`, `prefetch`, `pin_each`, `Mapping::read`, readahead)
//! are not read one buffer at a time: adjacent requests become one `preadv` (of up to 1 MiB
//! with `O_DIRECT`, where the runs of one call are read by up to four of the store's IO
//! threads at once; of up to 32 MiB through the page cache, whose own readahead overlaps the
//! device requests of a sequential run), so the device sees several requests in flight
//! (counted in [`crate::StatsSnapshot::store_reads`] and
//! `store_reads_overlapped`). [`super::UringStore`] keeps deeper queues from one thread
//! without the threads; pick it where io_uring is available and the device is fast (NVMe),
//! and this store for portability (any kernel, seccomp sandboxes, file systems io_uring
//! handles poorly).
//!
//! With [`FileStore::direct`] files are opened `O_DIRECT`: reads and writes bypass the kernel
//! page cache, so a byte is cached once (in ucache) instead of twice. `O_DIRECT` needs the memory
//! address, the offset and the length aligned to the device's logical block size; the cache
//! always passes 4 KiB-aligned memory and whole buffers at buffer-aligned offsets, which
//! satisfies every common device. Note that a whole-buffer `O_DIRECT` write of an object's last,
//! partial buffer grows the file to the buffer boundary; the caller trims it with
//! [`Object::set_len`] if the exact length matters.

use std::fs::File;
use std::io::{self, Seek, SeekFrom};
use std::os::unix::fs::{FileExt, FileTypeExt, OpenOptionsExt};
use std::os::unix::io::{AsRawFd, RawFd};
use std::path::Path;
use std::sync::Arc;

use super::io_pool::{IoPool, Scope};
use super::{read_full, write_full, IoBuf, Object, OpenOptions, Store};
use crate::error::{Error, Result};

/// Opens files by path, buffered or `O_DIRECT`.
///
/// The store owns the IO threads that its objects' batches and streams read on (up to four,
/// started on the first call that has reads to overlap, and kept). Clones
/// share them; they stop once the store and every object it opened are dropped.
#[derive(Clone, Debug)]
pub struct FileStore {
    direct: bool,
    io: Arc<IoPool>,
}

impl Default for FileStore {
    fn default() -> Self {
        FileStore::new()
    }
}

impl FileStore {
    /// Files go through the kernel page cache: works on every file system, but data the cache
    /// holds is usually held a second time by the kernel.
    pub fn new() -> Self {
        FileStore {
            direct: false,
            io: Arc::new(IoPool::new(IO_THREADS)),
        }
    }

    /// Files are opened `O_DIRECT`, so the cache is the only copy in memory. Opening fails with
    /// [`Error::BadArgument`] on file systems that refuse `O_DIRECT`; there is deliberately no
    /// silent fallback, because a benchmark or a memory budget that assumes no page cache would
    /// quietly be wrong.
    pub fn direct() -> Self {
        FileStore {
            direct: true,
            io: Arc::new(IoPool::new(IO_THREADS)),
        }
    }

    pub fn is_direct(&self) -> bool {
        self.direct
    }

    /// Like [`Store::open`], but returns the concrete type, whose file descriptor callers can
    /// reach through [`FileObject::file`] or [`AsRawFd`].
    pub fn open_file(
        &self,
        path: impl AsRef<Path>,
        options: OpenOptions,
    ) -> Result<Arc<FileObject>> {
        FileObject::open(path.as_ref(), options, self.direct, Some(self.io.clone())).map(Arc::new)
    }
}

impl Store for FileStore {
    fn open(&self, object: &str, options: OpenOptions) -> Result<Arc<dyn Object>> {
        Ok(self.open_file(object, options)?)
    }
}

/// The error for a path that `open` did not find: [`Error::DirectoryNotFound`] when the
/// directory that would hold it is missing (creating the file cannot help then), else
/// [`Error::NotFound`] for the file itself.
fn missing(path: &Path, name: &str, e: io::Error) -> Error {
    match path.parent().filter(|d| !d.as_os_str().is_empty()) {
        Some(dir) if std::fs::metadata(dir).is_err_and(|m| m.kind() == io::ErrorKind::NotFound) => {
            Error::DirectoryNotFound {
                directory: dir.display().to_string(),
                object: name.to_string(),
            }
        }
        _ => Error::io("open", name, 0, e),
    }
}

/// One open file or block device.
#[derive(Debug)]
pub struct FileObject {
    name: String,
    file: File,
    direct: bool,
    writable: bool,
    /// The store's IO threads; `None` (the io_uring store's files, which submit their batches
    /// to a ring): batches are read on the calling thread.
    io: Option<Arc<IoPool>>,
}

impl FileObject {
    /// Opens `path`; shared with the io_uring store, which submits against the same descriptor.
    pub(crate) fn open(
        path: &Path,
        options: OpenOptions,
        direct: bool,
        io: Option<Arc<IoPool>>,
    ) -> Result<FileObject> {
        let name = path.display().to_string();
        let writable = options.write || options.create;
        let open = |create: bool| {
            let mut opts = std::fs::OpenOptions::new();
            opts.read(true).write(writable).create(create);
            if direct {
                opts.custom_flags(libc::O_DIRECT);
            }
            opts.open(path)
        };
        let opened = match open(false) {
            // `O_CREAT` without `O_EXCL`, so a dangling symlink creates its target, as `open(2)`
            // does, and a file someone else created meanwhile is simply opened.
            Err(e) if options.create && e.kind() == io::ErrorKind::NotFound => {
                // A new name is durable only once its directory is: msync's fdatasync covers
                // the file's data, not the entry that names it.
                open(true).and_then(|file| sync_parent(path).map(|()| file))
            }
            other => other,
        };
        match opened {
            Ok(file) => Ok(FileObject {
                name,
                file,
                direct,
                writable,
                io,
            }),
            // EINVAL from open with O_DIRECT means the file system has no direct IO (with
            // `create`, the empty file may already have been created by then).
            Err(e) if direct && e.raw_os_error() == Some(libc::EINVAL) => {
                Err(Error::BadArgument(format!(
                    "the file system holding '{name}' does not support O_DIRECT \
                     (open returned EINVAL); open it with a buffered store instead"
                )))
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => Err(missing(path, &name, e)),
            Err(e) => Err(Error::io("open", &name, 0, e)),
        }
    }

    /// The open file, for callers that need its descriptor or metadata.
    pub fn file(&self) -> &File {
        &self.file
    }

    pub fn is_direct(&self) -> bool {
        self.direct
    }

    pub fn is_writable(&self) -> bool {
        self.writable
    }

    /// Whether `pos` is at or past the end of the object.
    ///
    /// An `O_DIRECT` read that came back short must not simply be retried for the rest: the rest
    /// starts at an unaligned offset and address, which some file systems reject with EINVAL
    /// even at end of file. A short direct read happens at end of file (or, rarely, after an
    /// error on a later block), so callers ask this before retrying.
    pub(crate) fn past_end(&self, pos: u64) -> io::Result<bool> {
        Ok(pos >= self.len()?)
    }

    /// Refuses changes to an object opened read-only.
    pub(crate) fn check_writable(&self, op: &str) -> io::Result<()> {
        if self.writable {
            Ok(())
        } else {
            // Checked here rather than left to the kernel, whose EBADF names neither the
            // object nor the cause.
            Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!("cannot {op} '{}': it was opened read-only", self.name),
            ))
        }
    }
}

impl AsRawFd for FileObject {
    fn as_raw_fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }
}

impl Object for FileObject {
    fn name(&self) -> &str {
        &self.name
    }

    fn len(&self) -> io::Result<u64> {
        let meta = self.file.metadata()?;
        if meta.file_type().is_block_device() {
            // stat reports 0 bytes for block devices; the end offset is the device size. Moving
            // the shared file offset is harmless because all IO here is positioned.
            (&self.file).seek(SeekFrom::End(0))
        } else {
            Ok(meta.len())
        }
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.check_writable("resize")?;
        self.file.set_len(len)
    }

    /// Buffered files read into any memory; `O_DIRECT` ones need it aligned.
    fn accepts_unaligned(&self) -> bool {
        !self.direct
    }

    /// Buffered files have the kernel's readahead; `O_DIRECT` ones nothing.
    fn reads_ahead(&self) -> bool {
        !self.direct
    }

    /// The file itself; `O_DIRECT` only changes how this descriptor reads, not what `mmap`
    /// of it maps.
    fn page_cache_fd(&self) -> Option<RawFd> {
        Some(self.file.as_raw_fd())
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        read_full(
            |b, off| {
                // A continuation of a short direct read: stop at end of file instead of issuing
                // an unaligned read (see `past_end`).
                if self.direct && off != offset && self.past_end(off)? {
                    return Ok(0);
                }
                self.file.read_at(b, off)
            },
            buf,
            offset,
        )
    }

    /// Runs of requests that continue each other in the file (a readahead window, a scan's
    /// batch) become one `preadv`: one system call and one device request for the whole run,
    /// as the kernel's own readahead issues, instead of one per buffer. Several runs are read
    /// at once by the store's IO threads and the calling thread, so a device sees more than
    /// one request in flight.
    fn read_batch(&self, reqs: &mut [IoBuf], out: &mut Vec<io::Result<usize>>) {
        out.clear();
        let mut runs: Vec<(&mut [IoBuf], Vec<io::Result<usize>>)> = Vec::new();
        let mut rest = reqs;
        while !rest.is_empty() {
            let n = run_len(rest, self.max_run_bytes());
            let (run, tail) = rest.split_at_mut(n);
            runs.push((run, Vec::with_capacity(n)));
            rest = tail;
        }
        match &self.io {
            Some(io) if runs.len() > 1 => {
                let helpers = IO_THREADS.min(runs.len()) - 1;
                let queue = parking_lot::Mutex::new(runs.iter_mut());
                let work = || {
                    while let Some((run, got)) = {
                        let next = queue.lock().next();
                        next
                    } {
                        self.read_run_guarded(run, got);
                    }
                };
                let work = &work;
                io.scope(|s| {
                    for _ in 0..helpers {
                        // With no IO thread (the system refused them) the calling thread reads
                        // what no other thread took.
                        if s.spawn(work).is_err() {
                            break;
                        }
                    }
                    work();
                });
            }
            _ => {
                for (run, got) in runs.iter_mut() {
                    self.read_run(run, got);
                }
            }
        }
        for (_, got) in runs {
            out.extend(got);
        }
    }

    /// Keeps up to `depth` requests in flight: requests are pulled while there is room, runs
    /// of adjacent ones become one `preadv` each, and the runs are read by the store's IO
    /// threads (none while a single run is all there is, which the calling thread reads
    /// itself). Each request goes back to `done`, on the calling thread, as soon as its run
    /// completes, and is replaced by the next at once.
    fn read_stream<'a>(
        &self,
        depth: usize,
        next: &mut dyn FnMut() -> Option<IoBuf<'a>>,
        done: &mut dyn FnMut(IoBuf<'a>, io::Result<usize>),
    ) {
        match &self.io {
            Some(io) => io.scope(|s| self.stream_on(Some(s), depth, next, done)),
            None => self.stream_on(None, depth, next, done),
        }
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.check_writable("write")?;
        write_full(|b, off| self.file.write_at(b, off), buf, offset)
    }

    fn sync(&self) -> io::Result<()> {
        // fdatasync: the cache never depends on timestamps being durable, only data and size.
        self.file.sync_data()
    }
}

/// Most requests one `preadv` of [`FileObject::read_batch`] covers.
const MAX_RUN: usize = 256;
/// Most bytes one `preadv` covers on an `O_DIRECT` file: small enough that a long sequential
/// batch splits into runs for several threads, each one device request.
const MAX_RUN_BYTES_DIRECT: usize = 1 << 20;
/// The same through the page cache: there the kernel's own readahead overlaps the device
/// requests of one long `preadv`, while threads reading adjacent runs at once would break up
/// the sequential stream it detects (measured: `pin_each` of a cold 1 GiB file at 0.4-0.6× of
/// one `preadv` per 1 MiB batch).
const MAX_RUN_BYTES_BUFFERED: usize = 32 << 20;

/// IO threads a store keeps (a batch's calling thread reads beside them). A few suffice to
/// keep an SSD's queue or the page cache's readahead busy; io_uring ([`super::UringStore`])
/// keeps deeper queues from one thread.
const IO_THREADS: usize = 4;

/// How many requests from the start of `reqs` form one run: each continues the one before in
/// the file, within [`MAX_RUN`] requests and `max_bytes`.
fn run_len(reqs: &[IoBuf], max_bytes: usize) -> usize {
    let mut end = 1;
    let mut bytes = reqs[0].len();
    while end < reqs.len()
        && end < MAX_RUN
        && bytes < max_bytes
        && reqs[end - 1]
            .offset()
            .checked_add(reqs[end - 1].len() as u64)
            == Some(reqs[end].offset())
    {
        bytes += reqs[end].len();
        end += 1;
    }
    end
}

/// `reqs` cut into runs ([`run_len`]).
fn split_runs(reqs: Vec<IoBuf>, max_bytes: usize) -> Vec<Vec<IoBuf>> {
    let mut runs = Vec::new();
    let mut rest = reqs;
    while !rest.is_empty() {
        let n = run_len(&rest, max_bytes);
        let tail = rest.split_off(n);
        runs.push(std::mem::replace(&mut rest, tail));
    }
    runs
}

impl FileObject {
    /// Most bytes one `preadv` of a batch or stream covers.
    fn max_run_bytes(&self) -> usize {
        if self.direct {
            MAX_RUN_BYTES_DIRECT
        } else {
            MAX_RUN_BYTES_BUFFERED
        }
    }

    /// [`Object::read_stream`] with the runs read on `s`'s threads (`None`: on the calling
    /// thread, one after another).
    fn stream_on<'a: 'e, 'e>(
        &'e self,
        s: Option<&Scope<'e>>,
        depth: usize,
        next: &mut dyn FnMut() -> Option<IoBuf<'a>>,
        done: &mut dyn FnMut(IoBuf<'a>, io::Result<usize>),
    ) {
        let depth = depth.max(1);
        type Landed<'a> = (Vec<IoBuf<'a>>, Vec<io::Result<usize>>);
        let (done_tx, done_rx) = crossbeam_channel::unbounded::<Landed<'a>>();
        // Requests handed out and not yet back.
        let mut outstanding = 0usize;
        let mut hand_back = |(run, got): Landed<'a>, outstanding: &mut usize| {
            *outstanding -= run.len();
            for (r, g) in run.into_iter().zip(got) {
                done(r, g);
            }
        };
        let read = move |mut run: Vec<IoBuf<'a>>| -> Landed<'a> {
            let mut got = Vec::with_capacity(run.len());
            self.read_run_guarded(&mut run, &mut got);
            (run, got)
        };
        loop {
            let mut pulled = Vec::new();
            while outstanding + pulled.len() < depth {
                match next() {
                    Some(r) => pulled.push(r),
                    None => break,
                }
            }
            let runs = split_runs(pulled, self.max_run_bytes());
            if outstanding == 0 && runs.len() == 1 {
                // Nothing to overlap with: read it here, no thread involved.
                let run = runs.into_iter().next().expect("one run");
                outstanding += run.len();
                hand_back(read(run), &mut outstanding);
                continue;
            }
            for run in runs {
                outstanding += run.len();
                let tx = done_tx.clone();
                // `done_rx` lives until the call returns, after every job has run.
                let job = move || drop(tx.send(read(run)));
                let refused = match s {
                    Some(s) => s.spawn(job).err(),
                    None => Some(job),
                };
                // No IO thread (the system refused them): the calling thread reads it.
                if let Some(job) = refused {
                    job();
                }
            }
            if outstanding == 0 {
                return;
            }
            // The threads are the store's, shared by every caller: a run of ours that none
            // has started is read here rather than waited for.
            let landed = loop {
                if let Ok(landed) = done_rx.try_recv() {
                    break Some(landed);
                }
                if s.is_some_and(|s| s.help()) {
                    continue;
                }
                // Every run handed out is being read, and sends its result when done.
                break done_rx.recv().ok();
            };
            let Some(landed) = landed else { return };
            hand_back(landed, &mut outstanding);
            while let Ok(landed) = done_rx.try_recv() {
                hand_back(landed, &mut outstanding);
            }
        }
    }

    /// [`FileObject::read_run`] on an IO thread: a panic fails the run's requests instead of
    /// taking the thread, and with it the batch's other runs, down.
    fn read_run_guarded(&self, run: &mut [IoBuf], out: &mut Vec<io::Result<usize>>) {
        let start = out.len();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.read_run(run, out)));
        if r.is_err() {
            out.truncate(start);
            out.extend(run.iter().map(|_| Err(io::Error::other("store panicked"))));
        }
    }

    /// Reads a run of requests that follow each other in the file with one `preadv`; whatever
    /// it leaves unread (the end of the file, an error) is finished request by request, so
    /// results and errors stay per request.
    fn read_run(&self, run: &mut [IoBuf], out: &mut Vec<io::Result<usize>>) {
        let mut got = 0usize;
        if run.len() > 1 {
            let iov: Vec<libc::iovec> = run
                .iter()
                .map(|r| libc::iovec {
                    iov_base: r.ptr() as *mut libc::c_void,
                    iov_len: r.len(),
                })
                .collect();
            // SAFETY: every iovec is an IoBuf the caller handed us exclusively for this batch.
            let n = unsafe {
                libc::preadv(
                    self.as_raw_fd(),
                    iov.as_ptr(),
                    iov.len() as libc::c_int,
                    run[0].offset() as libc::off_t,
                )
            };
            got = n.max(0) as usize;
        }
        for r in run.iter_mut() {
            let len = r.len();
            if got >= len {
                got -= len;
                out.push(Ok(len));
                continue;
            }
            let done = std::mem::take(&mut got);
            let off = r.offset() + done as u64;
            // A vectored read that stopped inside this request at the end of the file leaves
            // an unaligned offset that O_DIRECT would refuse: the request simply ends there.
            if done > 0 && self.direct && matches!(self.past_end(off), Ok(true)) {
                out.push(Ok(done));
                continue;
            }
            let rest = self.read_at(&mut r.as_mut_slice()[done..], off);
            out.push(rest.map(|n| done + n));
        }
    }
}

/// Makes the directory entry of a newly created `path` durable.
fn sync_parent(path: &Path) -> io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::testutil::{pattern, scratch, AlignedBuf};

    /// Finding runs of adjacent requests computed `offset + len`, which overflowed (a panic in
    /// debug builds) for a request at the end of the offset range: that request fails alone.
    #[test]
    fn a_batch_request_at_the_end_of_the_offset_range_fails_alone() {
        let dir = scratch();
        let path = dir.path().join("f");
        let data: Vec<u8> = (0..2 * 4096).map(pattern).collect();
        std::fs::write(&path, &data).unwrap();
        let o = FileStore::new()
            .open_file(&path, OpenOptions::read_only())
            .unwrap();
        let mut buf = AlignedBuf::new(2 * 4096);
        let p = buf.as_mut_ptr();
        // SAFETY: two disjoint 4 KiB halves of buf, untouched while the batch runs.
        let mut reqs = unsafe {
            [
                IoBuf::new(p, 4096, u64::MAX - 100),
                IoBuf::new(p.add(4096), 4096, 0),
            ]
        };
        let mut out = Vec::new();
        o.read_batch(&mut reqs, &mut out);
        assert!(out[0].is_err(), "{out:?}");
        assert_eq!(*out[1].as_ref().unwrap(), 4096);
        assert!(buf[4096..] == data[..4096]);
    }

    /// Reads `offs` (4 KiB each, in runs wherever they are adjacent) from `o` through a batch
    /// and through a stream of depth 4, and checks every byte against `data`.
    fn read_runs_and_check(o: &FileObject, data: &[u8], offs: &[u64]) {
        let mut bufs: Vec<AlignedBuf> = offs.iter().map(|_| AlignedBuf::new(4096)).collect();
        let mut reqs: Vec<IoBuf> = bufs
            .iter_mut()
            .zip(offs)
            // SAFETY: each buffer outlives the batch and is used by nothing else.
            .map(|(b, &off)| unsafe { IoBuf::new(b.as_mut_ptr(), 4096, off) })
            .collect();
        let mut out = Vec::new();
        o.read_batch(&mut reqs, &mut out);
        drop(reqs);
        assert_eq!(out.len(), offs.len());
        for ((b, &off), got) in bufs.iter_mut().zip(offs).zip(out) {
            assert_eq!(got.unwrap(), 4096);
            assert!(
                b[..] == data[off as usize..off as usize + 4096],
                "batch at {off}"
            );
            b.fill(0);
        }
        let mut pending = bufs
            .iter_mut()
            .zip(offs)
            // SAFETY: as above, for the stream.
            .map(|(b, &off)| unsafe { IoBuf::new(b.as_mut_ptr(), 4096, off) });
        let mut landed = 0;
        o.read_stream(4, &mut || pending.next(), &mut |r, got| {
            assert_eq!(got.unwrap(), 4096);
            let off = r.offset() as usize;
            assert!(r.as_slice() == &data[off..off + 4096], "stream at {off}");
            landed += 1;
        });
        assert_eq!(landed, offs.len());
    }

    /// The IO threads are started once per store and reused by every later batch and stream
    /// of every object it opens; dropping the store and its objects stops them.
    #[test]
    fn io_threads_start_once_per_store_and_stop_with_it() {
        let dir = scratch();
        let path = dir.path().join("f");
        let data: Vec<u8> = (0..64 * 4096).map(pattern).collect();
        std::fs::write(&path, &data).unwrap();
        // Runs of 1 to 3 requests with gaps between them: several runs per call.
        let offs: Vec<u64> = (0..64u64)
            .filter(|k| k % 4 != 3)
            .map(|k| k * 4096)
            .collect();
        let store = FileStore::new();
        let a = store.open_file(&path, OpenOptions::read_only()).unwrap();
        let b = store.open_file(&path, OpenOptions::read_only()).unwrap();
        read_runs_and_check(&a, &data, &offs);
        let first = store.io.started();
        assert!(first <= IO_THREADS, "{first}");
        for _ in 0..20 {
            read_runs_and_check(&a, &data, &offs);
            read_runs_and_check(&b, &data, &offs);
        }
        // Clones share the threads too.
        let c = store
            .clone()
            .open_file(&path, OpenOptions::read_only())
            .unwrap();
        read_runs_and_check(&c, &data, &offs);
        assert_eq!(store.io.started(), first, "threads were started again");
        let pool = Arc::downgrade(&store.io);
        drop((store, a, b));
        assert!(
            pool.upgrade().is_some(),
            "an object still holds the threads"
        );
        drop(c);
        // The pool was dropped, which joins its threads (`IoPool`'s own tests check that).
        assert!(pool.upgrade().is_none());
    }

    /// Eight callers share one store's four threads at once, batches and streams mixed: each
    /// gets its own bytes, every one of them, and the store starts no more threads.
    #[test]
    fn concurrent_callers_share_the_io_threads() {
        let dir = scratch();
        let path = dir.path().join("f");
        let data: Vec<u8> = (0..256 * 4096).map(pattern).collect();
        std::fs::write(&path, &data).unwrap();
        for store in [FileStore::new(), FileStore::direct()] {
            if store.is_direct() && !dir.direct_ok() {
                continue;
            }
            let o = store.open_file(&path, OpenOptions::read_only()).unwrap();
            std::thread::scope(|s| {
                for t in 0..8u64 {
                    let (o, data) = (&o, &data);
                    s.spawn(move || {
                        for round in 0..10u64 {
                            // A different pattern of runs per caller and round.
                            let gap = 2 + (t + round) % 5;
                            let offs: Vec<u64> = (0..256u64)
                                .filter(|k| (k + t) % gap != 0)
                                .map(|k| k * 4096)
                                .collect();
                            read_runs_and_check(o, data, &offs);
                        }
                    });
                }
            });
            assert!(store.io.started() <= IO_THREADS, "{}", store.io.started());
        }
    }

    /// A system that refuses every thread still gets every byte read, on the calling thread.
    #[test]
    fn refused_io_threads_read_inline() {
        let dir = scratch();
        let path = dir.path().join("f");
        let data: Vec<u8> = (0..64 * 4096).map(pattern).collect();
        std::fs::write(&path, &data).unwrap();
        let offs: Vec<u64> = (0..64u64)
            .filter(|k| k % 3 != 2)
            .map(|k| k * 4096)
            .collect();
        for store in [FileStore::new(), FileStore::direct()] {
            if store.is_direct() && !dir.direct_ok() {
                continue;
            }
            store.io.refuse_threads();
            let o = store.open_file(&path, OpenOptions::read_only()).unwrap();
            for _ in 0..3 {
                read_runs_and_check(&o, &data, &offs);
            }
            assert_eq!(store.io.started(), 0);
            assert_eq!(store.io.jobs_run(), 0);
        }
    }

    #[test]
    fn round_trip_buffered() {
        let dir = scratch();
        let path = dir.path().join("f");
        let o = FileStore::new()
            .open_file(&path, OpenOptions::create())
            .unwrap();
        let data: Vec<u8> = (0..10_000).map(pattern).collect();
        o.write_at(&data, 0).unwrap();
        o.sync().unwrap();
        assert_eq!(o.len().unwrap(), 10_000);
        let mut back = vec![0u8; 10_000];
        assert_eq!(o.read_at(&mut back, 0).unwrap(), 10_000);
        assert_eq!(back, data);
        o.set_len(4096).unwrap();
        assert_eq!(o.len().unwrap(), 4096);
    }

    #[test]
    fn tail_read_is_short_buffered() {
        let dir = scratch();
        let path = dir.path().join("f");
        let data: Vec<u8> = (0..10_000).map(pattern).collect();
        std::fs::write(&path, &data).unwrap();
        let o = FileStore::new()
            .open_file(&path, OpenOptions::read_only())
            .unwrap();
        let mut buf = vec![0u8; 4096];
        assert_eq!(o.read_at(&mut buf, 8192).unwrap(), 10_000 - 8192);
        assert_eq!(&buf[..10_000 - 8192], &data[8192..]);
        assert_eq!(o.read_at(&mut buf, 12_288).unwrap(), 0);
    }

    /// Adjacent requests share one vectored read; results stay per request, including the
    /// run that crosses the end of the file at an unaligned length.
    #[test]
    fn batches_of_adjacent_buffers_read_as_runs() {
        let dir = scratch();
        let path = dir.path().join("f");
        let len = 10 * 4096 + 100;
        let data: Vec<u8> = (0..len).map(pattern).collect();
        std::fs::write(&path, &data).unwrap();
        for direct in [false, true] {
            if direct && !dir.direct_ok() {
                continue;
            }
            let store = if direct {
                FileStore::direct()
            } else {
                FileStore::new()
            };
            let o = store.open_file(&path, OpenOptions::read_only()).unwrap();
            let offs = [0u64, 4096, 8192, 20_480, 36_864, 40_960];
            let mut bufs: Vec<AlignedBuf> = offs.iter().map(|_| AlignedBuf::new(4096)).collect();
            let mut reqs: Vec<IoBuf> = bufs
                .iter_mut()
                .zip(offs)
                // SAFETY: each buffer outlives the batch and is used by nothing else.
                .map(|(b, off)| unsafe { IoBuf::new(b.as_mut_ptr(), 4096, off) })
                .collect();
            let mut out = Vec::new();
            o.read_batch(&mut reqs, &mut out);
            drop(reqs);
            let got: Vec<usize> = out.into_iter().map(|r| r.unwrap()).collect();
            assert_eq!(got, [4096, 4096, 4096, 4096, 4096, 100], "direct {direct}");
            for (b, off) in bufs.iter().zip(offs) {
                let off = off as usize;
                let n = 4096.min(len - off);
                assert_eq!(&b[..n], &data[off..off + n], "direct {direct} at {off}");
            }
        }
    }

    #[test]
    fn direct_round_trip_and_short_tail() {
        let dir = scratch();
        if !dir.direct_ok() {
            return;
        }
        let path = dir.path().join("f");
        let data: Vec<u8> = (0..10_000).map(pattern).collect();
        std::fs::write(&path, &data).unwrap();
        let o = FileStore::direct()
            .open_file(&path, OpenOptions::read_write())
            .unwrap();
        assert!(o.is_direct());

        // The last, partial buffer is read with a full aligned length and comes back short.
        let mut buf = AlignedBuf::new(8192);
        assert_eq!(o.read_at(&mut buf, 8192).unwrap(), 10_000 - 8192);
        assert_eq!(&buf[..10_000 - 8192], &data[8192..]);
        assert_eq!(o.read_at(&mut buf, 0).unwrap(), 8192);
        assert_eq!(&buf[..], &data[..8192]);
        assert_eq!(o.read_at(&mut buf, 16_384).unwrap(), 0);

        // Aligned writes go straight to the file.
        buf.fill(0xAB);
        o.write_at(&buf[..4096], 4096).unwrap();
        o.sync().unwrap();
        let on_disk = std::fs::read(&path).unwrap();
        assert!(on_disk[4096..8192].iter().all(|&b| b == 0xAB));
        assert_eq!(&on_disk[..4096], &data[..4096]);
    }

    #[test]
    fn missing_file_is_not_found() {
        let dir = scratch();
        let path = dir.path().join("missing");
        let name = path.to_str().unwrap();
        for store in [FileStore::new(), FileStore::direct()] {
            match store.open(name, OpenOptions::read_only()) {
                Err(Error::NotFound { object }) => assert_eq!(object, name),
                other => panic!(
                    "expected NotFound, got {:?}",
                    other.map(|o| o.name().to_string())
                ),
            }
        }
    }

    #[test]
    fn direct_refused_by_file_system_is_reported() {
        // procfs has no direct IO on any kernel, unlike tmpfs since Linux 6.6.
        match FileStore::direct().open("/proc/self/status", OpenOptions::read_only()) {
            Err(Error::BadArgument(why)) => assert!(why.contains("O_DIRECT"), "{why}"),
            other => panic!(
                "expected BadArgument, got {:?}",
                other.map(|o| o.name().to_string())
            ),
        }
        // Buffered, the same file opens.
        assert!(FileStore::new()
            .open("/proc/self/status", OpenOptions::read_only())
            .is_ok());
    }

    #[test]
    fn read_only_refuses_writes() {
        let dir = scratch();
        let path = dir.path().join("ro");
        std::fs::write(&path, [1u8; 4096]).unwrap();
        let o = FileStore::new()
            .open(path.to_str().unwrap(), OpenOptions::read_only())
            .unwrap();
        let e = o.write_at(&[0u8; 16], 0).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::PermissionDenied);
        assert!(o.set_len(0).is_err());
        assert_eq!(std::fs::read(&path).unwrap(), vec![1u8; 4096]);
    }

    #[test]
    fn raw_fd_is_the_file() {
        let dir = scratch();
        let path = dir.path().join("fd");
        let o = FileStore::new()
            .open_file(&path, OpenOptions::create())
            .unwrap();
        assert_eq!(o.as_raw_fd(), o.file().as_raw_fd());
        assert!(o.as_raw_fd() >= 0);
    }
}
