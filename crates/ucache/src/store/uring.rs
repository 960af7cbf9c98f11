//! Local files read and written in batches through io_uring.
//!
//! The point of this store is [`Object::read_batch`], [`Object::read_stream`] and
//! [`Object::write_batch`]: an eviction or prefetch batch of dozens of buffers becomes one
//! `io_uring_enter` that puts all of them in flight at once, so an NVMe drive sees a deep queue
//! from a single thread, and a stream refills that queue as each read completes. Single
//! [`Object::read_at`]/[`Object::write_at`] calls use plain `pread`/`pwrite` on the same
//! descriptor: one request has nothing to overlap with, and `pread` skips the ring's
//! bookkeeping.
//!
//! Each thread owns its rings (created on first use, one per distinct ring configuration), so
//! submissions need no lock and any number of objects share a thread's ring; every entry
//! carries its file descriptor. A batch call never returns while an entry it submitted can still
//! touch the caller's memory.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::io;
use std::os::unix::io::{AsRawFd, RawFd};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use io_uring::{opcode, types, EnterFlags, IoUring};

use super::file::FileObject;
use super::{IoBuf, Object, OpenOptions, Store};
use crate::error::{Error, Result};

/// How long an SQPOLL kernel thread keeps polling an idle ring before it sleeps.
const SQPOLL_IDLE_MS: u32 = 1000;
/// Most entries the kernel accepts for one ring (`IORING_MAX_ENTRIES`).
const MAX_ENTRIES: u32 = 32768;
/// Linux transfers at most this many bytes per read or write (`MAX_RW_COUNT`); larger requests
/// are split by the short-transfer logic.
const MAX_RW: usize = 0x7fff_f000;

/// Ring and file settings of a [`UringStore`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UringOptions {
    /// Submission queue size: the most requests one thread keeps in flight. Larger batches are
    /// streamed through the ring, refilled as completions arrive.
    pub entries: u32,
    /// A kernel thread polls the submission queue, so submitting costs no syscall. Each thread
    /// that uses the store gets its own polling kernel thread, which burns CPU while busy.
    pub sqpoll: bool,
    /// Completions are polled instead of interrupt-driven. Needs `direct` and a device with poll
    /// queues (e.g. NVMe with `poll_queues` set); other files fail each request with
    /// `Unsupported`.
    pub iopoll: bool,
    /// Open files `O_DIRECT`, bypassing the kernel page cache (see [`super::FileStore::direct`]).
    pub direct: bool,
}

impl Default for UringOptions {
    fn default() -> Self {
        UringOptions {
            entries: 128,
            sqpoll: false,
            iopoll: false,
            direct: true,
        }
    }
}

impl UringOptions {
    fn ring_key(&self) -> RingKey {
        RingKey {
            entries: self.entries,
            sqpoll: self.sqpoll,
            iopoll: self.iopoll,
        }
    }
}

/// Opens files by path for batched IO through io_uring.
#[derive(Clone, Copy, Debug)]
pub struct UringStore {
    options: UringOptions,
}

impl UringStore {
    /// Checks the options and sets up the calling thread's ring, so that a kernel without
    /// io_uring (or one that forbids it, as some sandboxes do) is reported here as
    /// [`Error::Os`] rather than on the first batch.
    pub fn new(options: UringOptions) -> Result<Self> {
        if options.entries == 0 || options.entries > MAX_ENTRIES {
            return Err(Error::BadArgument(format!(
                "io_uring entries must be between 1 and {MAX_ENTRIES}, not {}",
                options.entries
            )));
        }
        if options.iopoll && !options.direct {
            return Err(Error::BadArgument(
                "io_uring iopoll needs direct (O_DIRECT) files: buffered IO cannot be polled"
                    .to_string(),
            ));
        }
        let store = UringStore { options };
        store.ensure_ring()?;
        Ok(store)
    }

    pub fn options(&self) -> UringOptions {
        self.options
    }

    /// Like [`Store::open`], but returns the concrete type.
    pub fn open_file(
        &self,
        path: impl AsRef<Path>,
        options: OpenOptions,
    ) -> Result<Arc<UringObject>> {
        // Opening is often the first thing a new thread does with the store; report a ring
        // that cannot be set up now, with a typed error.
        self.ensure_ring()?;
        let file = FileObject::open(path.as_ref(), options, self.options.direct, None)?;
        Ok(Arc::new(UringObject {
            file,
            options: self.options,
        }))
    }

    fn ensure_ring(&self) -> Result<()> {
        with_ring(self.options.ring_key(), |_| ((), false)).map_err(|source| Error::Os {
            call: match (self.options.sqpoll, self.options.iopoll) {
                (false, false) => "io_uring_setup",
                (true, false) => "io_uring_setup (SQPOLL)",
                (false, true) => "io_uring_setup (IOPOLL)",
                (true, true) => "io_uring_setup (SQPOLL, IOPOLL)",
            },
            source,
        })
    }
}

impl Store for UringStore {
    fn open(&self, object: &str, options: OpenOptions) -> Result<Arc<dyn Object>> {
        Ok(self.open_file(object, options)?)
    }
}

/// One open file whose batches go through the calling thread's ring.
#[derive(Debug)]
pub struct UringObject {
    file: FileObject,
    options: UringOptions,
}

impl UringObject {
    /// The underlying file; single reads and writes go straight to it.
    pub fn file_object(&self) -> &FileObject {
        &self.file
    }

    fn batch(&self, op: Op, reqs: &[IoBuf]) -> Vec<io::Result<usize>> {
        let mut results: Vec<Option<io::Result<usize>>> = (0..reqs.len()).map(|_| None).collect();
        let mut pending = reqs.iter().enumerate();
        self.stream(
            op,
            reqs.len(),
            &mut || {
                pending.next().map(|(k, r)| {
                    // SAFETY: the caller lent us `reqs` for this call; the copy is handed back
                    // (and dropped) before it returns.
                    (k, unsafe { IoBuf::new(r.ptr(), r.len(), r.offset()) })
                })
            },
            &mut |k, _, got| results[k] = Some(got),
        );
        results
            .into_iter()
            .map(|r| r.unwrap_or_else(|| Err(io::Error::other("io_uring stream stopped early"))))
            .collect()
    }

    /// Runs a stream of tagged requests through this thread's ring (see [`Stream::run`]).
    fn stream<'a>(
        &self,
        op: Op,
        depth: usize,
        next: &mut dyn FnMut() -> Option<(usize, IoBuf<'a>)>,
        done: &mut dyn FnMut(usize, IoBuf<'a>, io::Result<usize>),
    ) {
        let ctx = Stream {
            file: &self.file,
            fd: self.file.as_raw_fd(),
            op,
            iopoll: self.options.iopoll,
        };
        if with_ring(self.options.ring_key(), |ring| {
            ((), ctx.run(ring, depth, next, done))
        })
        .is_err()
        {
            // No ring (none could be built, or the thread is exiting and its rings are gone,
            // as when a mapping in a thread-local is dropped): nothing was taken from `next`,
            // so the requests go to the file one by one, as single reads and writes do.
            while let Some((k, mut req)) = next() {
                let off = req.offset();
                let got = match op {
                    Op::Read => self.file.read_at(req.as_mut_slice(), off),
                    Op::Write => self.file.write_at(req.as_slice(), off).map(|()| req.len()),
                };
                done(k, req, got);
            }
        }
    }
}

impl AsRawFd for UringObject {
    fn as_raw_fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }
}

impl Object for UringObject {
    fn name(&self) -> &str {
        self.file.name()
    }
    fn len(&self) -> io::Result<u64> {
        self.file.len()
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.file.set_len(len)
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.file.read_at(buf, offset)
    }
    fn accepts_unaligned(&self) -> bool {
        self.file.accepts_unaligned()
    }
    fn reads_ahead(&self) -> bool {
        self.file.reads_ahead()
    }
    fn page_cache_fd(&self) -> Option<RawFd> {
        self.file.page_cache_fd()
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.file.write_at(buf, offset)
    }
    fn sync(&self) -> io::Result<()> {
        self.file.sync()
    }

    fn read_batch(&self, reqs: &mut [IoBuf], out: &mut Vec<io::Result<usize>>) {
        out.clear();
        out.extend(self.batch(Op::Read, reqs));
    }

    fn read_stream<'a>(
        &self,
        depth: usize,
        next: &mut dyn FnMut() -> Option<IoBuf<'a>>,
        done: &mut dyn FnMut(IoBuf<'a>, io::Result<usize>),
    ) {
        self.stream(
            Op::Read,
            depth,
            &mut || next().map(|r| (0, r)),
            &mut |_, r, got| done(r, got),
        );
    }

    fn write_batch(&self, reqs: &[IoBuf], out: &mut Vec<io::Result<()>>) {
        out.clear();
        if !self.file.is_writable() {
            // Same error as `write_at`, without a trip through the kernel.
            out.extend(reqs.iter().map(|_| self.file.check_writable("write")));
            return;
        }
        out.extend(
            self.batch(Op::Write, reqs)
                .into_iter()
                .map(|r| r.map(|_| ())),
        );
    }
}

/// What distinguishes one thread's rings from each other.
#[derive(Clone, Copy, PartialEq, Eq)]
struct RingKey {
    entries: u32,
    sqpoll: bool,
    iopoll: bool,
}

thread_local! {
    static RINGS: RefCell<Vec<(RingKey, IoUring)>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f` on this thread's ring for `key`, creating the ring on first use. `f` returns its
/// result and whether the ring is broken; a broken ring is dropped, which also discards any
/// entries still queued in it, and the next call builds a fresh one.
fn with_ring<R>(key: RingKey, f: impl FnOnce(&mut IoUring) -> (R, bool)) -> io::Result<R> {
    RINGS
        .try_with(|rings| {
            // A callback of a stream on this thread (a prefetch's claim evicting a dirty
            // buffer) may need a ring while ours is busy: it gets a ring of its own.
            let Ok(mut rings) = rings.try_borrow_mut() else {
                let mut ring = build_ring(key)?;
                return Ok(f(&mut ring).0);
            };
            let at = match rings.iter().position(|(k, _)| *k == key) {
                Some(at) => at,
                None => {
                    rings.push((key, build_ring(key)?));
                    rings.len() - 1
                }
            };
            let (result, broken) = f(&mut rings[at].1);
            if broken {
                rings.swap_remove(at);
            }
            Ok(result)
        })
        .unwrap_or_else(|_| Err(io::Error::other("thread is exiting; its io_uring is gone")))
}

fn build_ring(key: RingKey) -> io::Result<IoUring> {
    let mut builder = IoUring::builder();
    if key.sqpoll {
        builder.setup_sqpoll(SQPOLL_IDLE_MS);
    }
    if key.iopoll {
        builder.setup_iopoll();
    }
    builder.build(key.entries)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Read,
    Write,
}

/// One batch or stream call's file and operation.
struct Stream<'a> {
    file: &'a FileObject,
    fd: RawFd,
    op: Op,
    iopoll: bool,
}

/// A request taken from the caller: its tag, its memory, and the bytes transferred so far.
struct Slot<'a> {
    tag: usize,
    req: IoBuf<'a>,
    done: usize,
}

impl Stream<'_> {
    /// Streams requests from `next` through `ring`, at most `depth` (and the ring's size) in
    /// flight, and hands each back to `done` once it is finished. A short transfer is resubmitted
    /// for its remainder. `next` is asked whenever there is room, so it may return `None` for
    /// now and a request after the next completion; the stream ends when it returns `None` with
    /// nothing in flight. Returns whether the ring broke; every request taken from `next` has
    /// been handed back either way (failed, if the ring broke under it).
    fn run<'a>(
        &self,
        ring: &mut IoUring,
        depth: usize,
        next: &mut dyn FnMut() -> Option<(usize, IoBuf<'a>)>,
        done: &mut dyn FnMut(usize, IoBuf<'a>, io::Result<usize>),
    ) -> bool {
        let cap = (ring.params().sq_entries() as usize).min(depth.max(1));
        let mut slots: Vec<Option<Slot>> = Vec::with_capacity(cap);
        let mut free: Vec<usize> = Vec::new();
        // Slots whose (rest of a) request waits to be pushed to the ring.
        let mut queue: VecDeque<usize> = VecDeque::new();
        let mut live = 0usize;
        let mut flight = InFlight { ring, count: 0 };
        let mut cqes = Vec::with_capacity(cap);
        let mut broken = None;

        loop {
            // `next` may have nothing now and more after a completion: ask it whenever there
            // is room, and stop once it has nothing and nothing is left in flight.
            let mut idle = false;
            while live < cap {
                match next() {
                    None => {
                        idle = true;
                        break;
                    }
                    Some((tag, req)) if req.is_empty() => done(tag, req, Ok(0)),
                    // io_uring takes offset -1 (u64::MAX) as "the file's current position"; as
                    // for pread, an offset past the signed range is invalid, not position 0.
                    Some((tag, req)) if req.offset() > i64::MAX as u64 => {
                        done(tag, req, Err(io::Error::from_raw_os_error(libc::EINVAL)))
                    }
                    Some((tag, req)) => {
                        let slot = Some(Slot { tag, req, done: 0 });
                        let k = match free.pop() {
                            Some(k) => {
                                slots[k] = slot;
                                k
                            }
                            None => {
                                slots.push(slot);
                                slots.len() - 1
                            }
                        };
                        live += 1;
                        queue.push_back(k);
                    }
                }
            }
            while let Some(&k) = queue.front() {
                let Some(slot) = &slots[k] else {
                    queue.pop_front();
                    continue;
                };
                let entry = self.entry(k, slot);
                // SAFETY: the entry points into the slot's request, which the `IoBuf` contract
                // keeps valid and untouched by anyone else until it is handed back to `done`,
                // and that happens only once its last entry is reaped; `flight` makes sure we
                // do not return while the kernel may still use an entry: every pushed entry is
                // either reaped, or abandoned unsubmitted in a ring that is then dropped.
                if unsafe { flight.ring.submission().push(&entry) }.is_err() {
                    break;
                }
                queue.pop_front();
                flight.count += 1;
            }
            if flight.count == 0 {
                if live == 0 && idle {
                    break;
                }
                continue;
            }
            match flight.ring.submit_and_wait(1) {
                Ok(_) => {}
                Err(e) if is_transient(&e) => std::thread::yield_now(),
                Err(e) => {
                    broken = Some(e);
                    break;
                }
            }
            flight.reap(&mut cqes);
            for &(k, res) in &cqes {
                let k = k as usize;
                let Some(slot) = slots[k].as_mut() else {
                    continue;
                };
                match self.complete(res, slot) {
                    None => queue.push_back(k),
                    Some(result) => {
                        let slot = slots[k].take().expect("slot is live");
                        free.push(k);
                        live -= 1;
                        done(slot.tag, slot.req, result);
                    }
                }
            }
        }

        if let Some(e) = &broken {
            // Every entry the kernel took must finish before its memory is handed back; those
            // it did not take die with the ring, which the caller drops because we report it
            // broken.
            flight.quiesce(&mut cqes);
            flight.count = 0;
            for slot in slots.into_iter().flatten() {
                done(
                    slot.tag,
                    slot.req,
                    Err(copy_error(e, "io_uring_enter failed")),
                );
            }
        }
        broken.is_some()
    }

    /// The submission entry for the rest of the request in slot `k`.
    fn entry(&self, k: usize, slot: &Slot) -> io_uring::squeue::Entry {
        let req = &slot.req;
        // `done < req.len()`, so the pointer stays inside the request's memory.
        let ptr = req.ptr().wrapping_add(slot.done);
        let len = (req.len() - slot.done).min(MAX_RW) as u32;
        let offset = req.offset() + slot.done as u64;
        let fd = types::Fd(self.fd);
        let entry = match self.op {
            Op::Read => opcode::Read::new(fd, ptr, len).offset(offset).build(),
            Op::Write => opcode::Write::new(fd, ptr, len).offset(offset).build(),
        };
        entry.user_data(k as u64)
    }

    /// Applies completion `res` to `slot`: its final result, or `None` to submit the remainder.
    fn complete(&self, res: i32, slot: &mut Slot) -> Option<io::Result<usize>> {
        let want = slot.req.len();
        if res < 0 {
            let errno = -res;
            if errno == libc::EAGAIN || errno == libc::EINTR {
                return None;
            }
            if errno == libc::EOPNOTSUPP && self.iopoll {
                return Some(Err(io::Error::new(
                    io::ErrorKind::Unsupported,
                    format!(
                        "io_uring iopoll is not supported for '{}': it needs O_DIRECT on a \
                         device with poll queues",
                        self.file.name()
                    ),
                )));
            }
            return Some(Err(io::Error::from_raw_os_error(errno)));
        }
        if res == 0 {
            return Some(match self.op {
                Op::Read => Ok(slot.done),
                Op::Write => Err(io::ErrorKind::WriteZero.into()),
            });
        }
        slot.done = (slot.done + res as usize).min(want);
        if slot.done == want {
            return Some(Ok(want));
        }
        // Short transfer. For direct reads check for end of file before resubmitting an
        // unaligned remainder (see `FileObject::past_end`); otherwise the resubmission itself
        // returns 0 at end of file.
        if self.op == Op::Read && self.file.is_direct() {
            match self.file.past_end(slot.req.offset() + slot.done as u64) {
                Ok(true) => return Some(Ok(slot.done)),
                Ok(false) => {}
                Err(e) => return Some(Err(e)),
            }
        }
        None
    }
}

/// The entries of one batch that have been pushed to a ring and not yet reaped.
///
/// Its `Drop` waits for them, so that even a panic cannot hand memory back to the caller while
/// the kernel may still read or write it.
struct InFlight<'r> {
    ring: &'r mut IoUring,
    count: usize,
}

impl InFlight<'_> {
    fn reap(&mut self, into: &mut Vec<(u64, i32)>) {
        into.clear();
        into.extend(self.ring.completion().map(|c| (c.user_data(), c.result())));
        self.count -= into.len();
    }

    /// For a ring whose `io_uring_enter` failed: waits, without submitting anything more, until
    /// every entry the kernel has taken has completed. Entries still in the submission queue
    /// were never taken, and never will be once the ring is dropped. (With SQPOLL the kernel
    /// thread could still take one in between; it only fails this way once that thread has
    /// died.) Sooner than return while the kernel may write into the caller's memory, this
    /// waits for as long as it takes.
    fn quiesce(&mut self, scratch: &mut Vec<(u64, i32)>) {
        loop {
            self.reap(scratch);
            if self.count <= self.ring.submission().len() {
                return;
            }
            // SAFETY: no argument pointer, and `to_submit` 0 so no queued entry is handed over.
            let waited = unsafe {
                self.ring.submitter().enter::<libc::sigset_t>(
                    0,
                    1,
                    EnterFlags::GETEVENTS.bits(),
                    None,
                )
            };
            if waited.is_err() {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        // Zero on every normal path; non-zero only when unwinding out of `Stream::run`.
        let mut scratch = Vec::new();
        while self.count > 0 {
            match self.ring.submit_and_wait(1) {
                Ok(_) => {}
                Err(e) if is_transient(&e) => {}
                // The ring cannot be dropped from here, so entries left queued in it would be
                // submitted by the next batch, pointing at memory we no longer own.
                Err(_) => std::process::abort(),
            }
            self.reap(&mut scratch);
        }
    }
}

/// `io_uring_enter` errors after which waiting for completions and retrying is the remedy.
fn is_transient(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EINTR | libc::EAGAIN | libc::EBUSY)
    )
}

fn copy_error(e: &io::Error, context: &str) -> io::Error {
    match e.raw_os_error() {
        Some(code) => io::Error::new(
            e.kind(),
            format!("{context}: {}", io::Error::from_raw_os_error(code)),
        ),
        None => io::Error::new(e.kind(), format!("{context}: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::testutil::{pattern, scratch, AlignedBuf, Scratch};

    /// The store, or `None` (with a note) where io_uring is unavailable, e.g. in a sandbox.
    fn store(options: UringOptions) -> Option<UringStore> {
        match UringStore::new(options) {
            Ok(s) => Some(s),
            Err(Error::Os { source, .. }) => {
                eprintln!("skipping io_uring checks: {source}");
                None
            }
            Err(e) => panic!("{e}"),
        }
    }

    /// One request per 4 KiB block of `buf`, covering `blocks` at `first_block`.
    fn requests(buf: &mut AlignedBuf, first_block: u64) -> Vec<IoBuf<'_>> {
        let n = buf.len() / 4096;
        (0..n)
            .map(|i| {
                // SAFETY: each request is a distinct 4 KiB slice of `buf`, which outlives the
                // batch calls and is not touched while they run.
                unsafe {
                    IoBuf::new(
                        buf.as_mut_ptr().add(i * 4096),
                        4096,
                        (first_block + i as u64) * 4096,
                    )
                }
            })
            .collect()
    }

    /// Runs `f` with an O_DIRECT store (where the scratch file system allows it) and a
    /// buffered one, each with a scratch directory of its own; nothing without io_uring.
    fn each_mode(mut f: impl FnMut(UringStore, &Scratch, bool)) {
        for direct in [true, false] {
            let Some(store) = store(UringOptions {
                direct,
                ..UringOptions::default()
            }) else {
                return;
            };
            let dir = scratch();
            if direct && !dir.direct_ok() {
                continue;
            }
            f(store, &dir, direct);
        }
    }

    fn write_pattern_file(path: &Path, len: usize) -> Vec<u8> {
        let data: Vec<u8> = (0..len).map(pattern).collect();
        std::fs::write(path, &data).unwrap();
        data
    }

    fn check_batch_read(options: UringOptions, blocks: usize) {
        let Some(store) = store(options) else { return };
        let dir = scratch();
        if options.direct && !dir.direct_ok() {
            return;
        }
        let path = dir.path().join("batch");
        let data = write_pattern_file(&path, blocks * 4096);
        let o = store.open_file(&path, OpenOptions::read_only()).unwrap();
        let mut buf = AlignedBuf::new(blocks * 4096);
        let mut reqs = requests(&mut buf, 0);
        // Reverse order, so completions and offsets do not line up by accident.
        reqs.reverse();
        let mut out = Vec::new();
        o.read_batch(&mut reqs, &mut out);
        assert_eq!(out.len(), blocks);
        for r in &out {
            assert_eq!(*r.as_ref().unwrap(), 4096);
        }
        assert!(buf[..] == data[..], "batch read returned wrong bytes");
    }

    /// A stream of 300 requests with at most `depth` in flight: every request comes back once,
    /// with its bytes, and `next` is never asked with the stream full.
    fn check_stream_read(options: UringOptions, depth: usize) {
        let Some(store) = store(options) else { return };
        let dir = scratch();
        if !dir.direct_ok() {
            return;
        }
        let blocks = 300;
        let path = dir.path().join("stream");
        let data = write_pattern_file(&path, blocks * 4096);
        let o = store.open_file(&path, OpenOptions::read_only()).unwrap();
        let mut buf = AlignedBuf::new(blocks * 4096);
        let mut reqs = requests(&mut buf, 0);
        // Pull them in a scattered order; pause every 50 (`None` with reads in flight).
        let order: Vec<usize> = (0..blocks).map(|k| k * 7 % blocks).collect();
        let mut pulled = 0;
        let outstanding = std::cell::Cell::new(0usize);
        let mut most = 0usize;
        let mut paused = false;
        let mut back = vec![0u32; blocks];
        let (out, most) = {
            let out = std::cell::Cell::new(0usize);
            o.read_stream(
                depth,
                &mut || {
                    if pulled == blocks {
                        return None;
                    }
                    if pulled % 50 == 49 && !paused && outstanding.get() > 0 {
                        paused = true;
                        return None;
                    }
                    paused = false;
                    // SAFETY: an empty placeholder; the request itself moves into the stream.
                    let empty = unsafe { IoBuf::new(std::ptr::null_mut(), 0, 0) };
                    let r = std::mem::replace(&mut reqs[order[pulled]], empty);
                    pulled += 1;
                    outstanding.set(outstanding.get() + 1);
                    most = most.max(outstanding.get());
                    Some(r)
                },
                &mut |r, got| {
                    assert_eq!(got.unwrap(), 4096);
                    back[(r.offset() / 4096) as usize] += 1;
                    outstanding.set(outstanding.get() - 1);
                    out.set(out.get() + 1);
                },
            );
            (out.get(), most)
        };
        assert_eq!(out, blocks);
        assert!(
            back.iter().all(|&n| n == 1),
            "a request came back twice or never"
        );
        assert!(most <= depth, "{most} in flight with depth {depth}");
        assert!(buf[..] == data[..], "stream read returned wrong bytes");
    }

    #[test]
    fn stream_keeps_depth_and_returns_every_request() {
        check_stream_read(UringOptions::default(), 16);
        check_stream_read(
            UringOptions {
                entries: 8,
                ..UringOptions::default()
            },
            64,
        );
    }

    #[test]
    fn batch_of_64_direct() {
        check_batch_read(UringOptions::default(), 64);
    }

    #[test]
    fn batch_larger_than_ring_is_streamed() {
        check_batch_read(
            UringOptions {
                entries: 8,
                ..UringOptions::default()
            },
            200,
        );
    }

    #[test]
    fn batch_buffered() {
        check_batch_read(
            UringOptions {
                direct: false,
                ..UringOptions::default()
            },
            64,
        );
    }

    #[test]
    fn batch_with_sqpoll() {
        check_batch_read(
            UringOptions {
                sqpoll: true,
                ..UringOptions::default()
            },
            64,
        );
    }

    #[test]
    fn batch_write_then_read_back() {
        let Some(store) = store(UringOptions::default()) else {
            return;
        };
        let dir = scratch();
        if !dir.direct_ok() {
            return;
        }
        let path = dir.path().join("w");
        let o = store.open_file(&path, OpenOptions::create()).unwrap();
        let mut buf = AlignedBuf::new(96 * 4096);
        for (i, b) in buf.iter_mut().enumerate() {
            *b = pattern(i);
        }
        let reqs = requests(&mut buf, 0);
        let mut out = Vec::new();
        o.write_batch(&reqs, &mut out);
        assert_eq!(out.len(), 96);
        assert!(out.iter().all(|r| r.is_ok()));
        o.sync().unwrap();
        assert_eq!(o.len().unwrap(), 96 * 4096);
        assert!(std::fs::read(&path).unwrap() == buf[..]);
    }

    /// Offset u64::MAX is -1 to the kernel, which io_uring reads as "the current position"
    /// (0 on a fresh file): a batch there wrote over the file's start and read its first bytes,
    /// reporting success, where pread and pwrite refuse it.
    #[test]
    fn batches_at_offset_u64_max_are_invalid_not_at_the_file_start() {
        each_mode(|store, dir, direct| {
            let path = dir.path().join("max");
            let data = write_pattern_file(&path, 4 * 4096);
            let o = store.open_file(&path, OpenOptions::read_write()).unwrap();
            let mut buf = AlignedBuf::new(4096);
            buf.fill(0xEE);
            // SAFETY: buf outlives both calls and nothing else touches it meanwhile.
            let req = || unsafe { IoBuf::new(buf.as_ptr() as *mut u8, 4096, u64::MAX) };
            let mut wrote = Vec::new();
            o.write_batch(&[req()], &mut wrote);
            assert_eq!(
                wrote[0].as_ref().map_err(|e| e.kind()),
                Err(io::ErrorKind::InvalidInput),
                "direct={direct}"
            );
            assert!(std::fs::read(&path).unwrap() == data, "direct={direct}");
            let mut read = Vec::new();
            o.read_batch(&mut [req()], &mut read);
            assert_eq!(
                read[0].as_ref().map_err(|e| e.kind()),
                Err(io::ErrorKind::InvalidInput),
                "direct={direct}"
            );
            assert!(buf.iter().all(|&b| b == 0xEE), "direct={direct}");
        });
    }

    #[test]
    fn batch_tail_and_past_end() {
        each_mode(|store, dir, direct| {
            let path = dir.path().join("tail");
            let data = write_pattern_file(&path, 10_000);
            let o = store.open_file(&path, OpenOptions::read_only()).unwrap();
            // Blocks 0..4: two full, one partial (1808 bytes), one past the end.
            let mut buf = AlignedBuf::new(4 * 4096);
            let mut reqs = requests(&mut buf, 0);
            let mut out = Vec::new();
            o.read_batch(&mut reqs, &mut out);
            let got: Vec<usize> = out.iter().map(|r| *r.as_ref().unwrap()).collect();
            assert_eq!(got, [4096, 4096, 10_000 - 8192, 0], "direct={direct}");
            assert!(buf[..10_000] == data[..]);
        });
    }

    #[test]
    fn single_calls_and_missing_file() {
        let Some(store) = store(UringOptions::default()) else {
            return;
        };
        let dir = scratch();
        let missing = dir.path().join("nope");
        assert!(matches!(
            store.open(missing.to_str().unwrap(), OpenOptions::read_only()),
            Err(Error::NotFound { .. })
        ));
        if !dir.direct_ok() {
            return;
        }
        let path = dir.path().join("single");
        let o = store
            .open(path.to_str().unwrap(), OpenOptions::create())
            .unwrap();
        let mut buf = AlignedBuf::new(4096);
        buf.fill(9);
        o.write_at(&buf, 8192).unwrap();
        buf.fill(0);
        assert_eq!(o.read_at(&mut buf, 8192).unwrap(), 4096);
        assert!(buf.iter().all(|&b| b == 9));
    }

    #[test]
    fn read_only_batch_write_fails() {
        let Some(store) = store(UringOptions {
            direct: false,
            ..UringOptions::default()
        }) else {
            return;
        };
        let dir = scratch();
        let path = dir.path().join("ro");
        std::fs::write(&path, [5u8; 8192]).unwrap();
        let o = store.open_file(&path, OpenOptions::read_only()).unwrap();
        let mut buf = AlignedBuf::new(8192);
        let reqs = requests(&mut buf, 0);
        let mut out = Vec::new();
        o.write_batch(&reqs, &mut out);
        assert_eq!(out.len(), 2);
        for r in out {
            assert_eq!(r.unwrap_err().kind(), io::ErrorKind::PermissionDenied);
        }
        assert!(o.write_at(&buf[..4096], 0).is_err());
        assert_eq!(std::fs::read(&path).unwrap(), vec![5u8; 8192]);
    }

    #[test]
    fn bad_options_are_refused() {
        for options in [
            UringOptions {
                entries: 0,
                ..UringOptions::default()
            },
            UringOptions {
                entries: MAX_ENTRIES + 1,
                ..UringOptions::default()
            },
            UringOptions {
                iopoll: true,
                direct: false,
                ..UringOptions::default()
            },
        ] {
            assert!(
                matches!(UringStore::new(options), Err(Error::BadArgument(_))),
                "{options:?}"
            );
        }
    }

    #[test]
    fn iopoll_works_or_says_why() {
        let Some(store) = store(UringOptions {
            iopoll: true,
            ..UringOptions::default()
        }) else {
            return;
        };
        let dir = scratch();
        if !dir.direct_ok() {
            return;
        }
        let path = dir.path().join("poll");
        let data = write_pattern_file(&path, 16 * 4096);
        let o = store.open_file(&path, OpenOptions::read_only()).unwrap();
        let mut buf = AlignedBuf::new(16 * 4096);
        let mut reqs = requests(&mut buf, 0);
        let mut out = Vec::new();
        o.read_batch(&mut reqs, &mut out);
        match &out[0] {
            Ok(_) => {
                assert!(out.iter().all(|r| matches!(r, Ok(4096))));
                assert!(buf[..] == data[..]);
            }
            Err(e) => assert_eq!(e.kind(), io::ErrorKind::Unsupported, "{e}"),
        }
    }

    #[test]
    fn broken_ring_fails_the_batch_and_is_replaced() {
        let options = UringOptions {
            entries: 4,
            direct: false,
            ..UringOptions::default()
        };
        let Some(store) = store(options) else { return };
        let dir = scratch();
        let path = dir.path().join("broken");
        let data = write_pattern_file(&path, 8 * 4096);
        let o = store.open_file(&path, OpenOptions::read_only()).unwrap();

        // Point this thread's ring descriptor at /dev/null: io_uring_enter then fails with
        // EOPNOTSUPP, an error no retry cures.
        let devnull = std::fs::File::open("/dev/null").unwrap();
        with_ring(options.ring_key(), |ring| {
            // SAFETY: replaces a descriptor the ring owns; its mappings stay valid.
            assert!(unsafe { libc::dup2(devnull.as_raw_fd(), ring.as_raw_fd()) } >= 0);
            ((), false)
        })
        .unwrap();

        let mut buf = AlignedBuf::new(8 * 4096);
        let mut reqs = requests(&mut buf, 0);
        let mut out = Vec::new();
        o.read_batch(&mut reqs, &mut out);
        assert_eq!(out.len(), 8);
        assert!(out.iter().all(|r| r.is_err()));

        // The broken ring was dropped; the next batch gets a fresh one.
        o.read_batch(&mut reqs, &mut out);
        assert!(out.iter().all(|r| matches!(r, Ok(4096))));
        assert!(buf[..] == data[..]);
    }

    #[test]
    fn rings_are_per_thread() {
        let Some(store) = store(UringOptions::default()) else {
            return;
        };
        let dir = scratch();
        if !dir.direct_ok() {
            return;
        }
        let path = dir.path().join("threads");
        let data = write_pattern_file(&path, 64 * 4096);
        let o = store.open_file(&path, OpenOptions::read_only()).unwrap();
        std::thread::scope(|s| {
            for t in 0..4u64 {
                let (o, data) = (&o, &data);
                s.spawn(move || {
                    for _ in 0..20 {
                        let mut buf = AlignedBuf::new(16 * 4096);
                        let mut reqs = requests(&mut buf, t * 16);
                        let mut out = Vec::new();
                        o.read_batch(&mut reqs, &mut out);
                        assert!(out.iter().all(|r| matches!(r, Ok(4096))));
                        let at = t as usize * 16 * 4096;
                        assert!(buf[..] == data[at..at + 16 * 4096]);
                    }
                });
            }
        });
    }
}
