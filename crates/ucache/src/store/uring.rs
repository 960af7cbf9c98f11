//! Local files read and written in batches through io_uring.
//!
//! The point of this store is [`Object::read_batch`] and [`Object::write_batch`]: an eviction
//! or prefetch batch of dozens of buffers becomes one `io_uring_enter` that puts all of them in
//! flight at once, so an NVMe drive sees a deep queue from a single thread. Single
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
        let file = FileObject::open(path.as_ref(), options, self.options.direct)?;
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
        if reqs.is_empty() {
            return Vec::new();
        }
        let ctx = Batch {
            file: &self.file,
            fd: self.file.as_raw_fd(),
            op,
            reqs,
            iopoll: self.options.iopoll,
        };
        match with_ring(self.options.ring_key(), |ring| ctx.run(ring)) {
            Ok(results) => results,
            Err(e) => reqs
                .iter()
                .map(|_| {
                    Err(io::Error::new(
                        e.kind(),
                        format!("io_uring unavailable on this thread: {e}"),
                    ))
                })
                .collect(),
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

    fn write_batch(&self, reqs: &mut [IoBuf], out: &mut Vec<io::Result<()>>) {
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
            // `f` never re-enters `with_ring`, so this borrow cannot conflict.
            let mut rings = rings.borrow_mut();
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

/// One batch call's requests and where they go.
struct Batch<'a> {
    file: &'a FileObject,
    fd: RawFd,
    op: Op,
    reqs: &'a [IoBuf],
    iopoll: bool,
}

/// Progress of one request: bytes transferred so far, and its result once finished.
struct Slot {
    done: usize,
    result: Option<io::Result<usize>>,
}

impl Batch<'_> {
    /// Streams every request through `ring` and returns their results, and whether the ring
    /// broke. Requests are refilled as completions arrive, so batches larger than the ring need
    /// no separate chunking.
    fn run(&self, ring: &mut IoUring) -> (Vec<io::Result<usize>>, bool) {
        let mut slots: Vec<Slot> = self
            .reqs
            .iter()
            .map(|r| Slot {
                done: 0,
                result: r.is_empty().then_some(Ok(0)),
            })
            .collect();
        let mut queue: VecDeque<usize> = (0..self.reqs.len())
            .filter(|&i| slots[i].result.is_none())
            .collect();
        let cap = ring.params().sq_entries() as usize;
        let mut flight = InFlight { ring, count: 0 };
        let mut cqes = Vec::with_capacity(cap);
        let mut broken = None;

        loop {
            while flight.count < cap {
                let Some(i) = queue.pop_front() else { break };
                let entry = self.entry(i, slots[i].done);
                // SAFETY: the entry points into `reqs[i]`, which the `IoBuf` contract keeps valid
                // and untouched by anyone else until this batch call returns, and `flight` makes
                // sure it does not return while the kernel may still use an entry: every pushed
                // entry is either reaped, or abandoned unsubmitted in a ring that is then dropped.
                if unsafe { flight.ring.submission().push(&entry) }.is_err() {
                    queue.push_front(i);
                    break;
                }
                flight.count += 1;
            }
            if flight.count == 0 {
                break;
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
            for &(user_data, res) in &cqes {
                self.complete(user_data as usize, res, &mut slots, &mut queue);
            }
        }

        if let Some(e) = &broken {
            // Every entry the kernel took must finish before we return; those it did not take
            // die with the ring, which the caller drops because we report it broken.
            flight.quiesce(&mut cqes);
            flight.count = 0;
            for slot in slots.iter_mut().filter(|s| s.result.is_none()) {
                slot.result = Some(Err(copy_error(e, "io_uring_enter failed")));
            }
        }
        let results = slots
            .into_iter()
            .map(|s| s.result.unwrap_or(Ok(s.done)))
            .collect();
        (results, broken.is_some())
    }

    /// The submission entry for the rest of request `i`, of which `done` bytes are finished.
    fn entry(&self, i: usize, done: usize) -> io_uring::squeue::Entry {
        let req = &self.reqs[i];
        // `done < req.len()`, so the pointer stays inside the request's memory.
        let ptr = req.ptr().wrapping_add(done);
        let len = (req.len() - done).min(MAX_RW) as u32;
        let offset = req.offset() + done as u64;
        let fd = types::Fd(self.fd);
        let entry = match self.op {
            Op::Read => opcode::Read::new(fd, ptr, len).offset(offset).build(),
            Op::Write => opcode::Write::new(fd, ptr, len).offset(offset).build(),
        };
        entry.user_data(i as u64)
    }

    /// Applies completion `res` to request `i`: finishes it, or queues the remainder again.
    fn complete(&self, i: usize, res: i32, slots: &mut [Slot], queue: &mut VecDeque<usize>) {
        let want = self.reqs[i].len();
        let slot = &mut slots[i];
        if res < 0 {
            let errno = -res;
            if errno == libc::EAGAIN || errno == libc::EINTR {
                queue.push_back(i);
            } else if errno == libc::EOPNOTSUPP && self.iopoll {
                slot.result = Some(Err(io::Error::new(
                    io::ErrorKind::Unsupported,
                    format!(
                        "io_uring iopoll is not supported for '{}': it needs O_DIRECT on a \
                         device with poll queues",
                        self.file.name()
                    ),
                )));
            } else {
                slot.result = Some(Err(io::Error::from_raw_os_error(errno)));
            }
            return;
        }
        if res == 0 {
            slot.result = Some(match self.op {
                Op::Read => Ok(slot.done),
                Op::Write => Err(io::ErrorKind::WriteZero.into()),
            });
            return;
        }
        slot.done = (slot.done + res as usize).min(want);
        if slot.done == want {
            slot.result = Some(Ok(want));
            return;
        }
        // Short transfer. For direct reads check for end of file before resubmitting an
        // unaligned remainder (see `FileObject::past_end`); otherwise the resubmission itself
        // returns 0 at end of file.
        if self.op == Op::Read && self.file.is_direct() {
            match self.file.past_end(self.reqs[i].offset() + slot.done as u64) {
                Ok(true) => {
                    slot.result = Some(Ok(slot.done));
                    return;
                }
                Ok(false) => {}
                Err(e) => {
                    slot.result = Some(Err(e));
                    return;
                }
            }
        }
        queue.push_back(i);
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
        // Zero on every normal path; non-zero only when unwinding out of `Batch::run`.
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
    use crate::store::testutil::{pattern, scratch, AlignedBuf};

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
    fn requests(buf: &mut AlignedBuf, first_block: u64) -> Vec<IoBuf> {
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
        let mut reqs = requests(&mut buf, 0);
        let mut out = Vec::new();
        o.write_batch(&mut reqs, &mut out);
        assert_eq!(out.len(), 96);
        assert!(out.iter().all(|r| r.is_ok()));
        o.sync().unwrap();
        assert_eq!(o.len().unwrap(), 96 * 4096);
        assert!(std::fs::read(&path).unwrap() == buf[..]);
    }

    #[test]
    fn batch_tail_and_past_end() {
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
        }
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
        let mut reqs = requests(&mut buf, 0);
        let mut out = Vec::new();
        o.write_batch(&mut reqs, &mut out);
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
