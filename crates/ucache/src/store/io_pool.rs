//! The IO threads of a [`super::FileStore`]: started once, on the first batch or stream that
//! has runs to overlap, and kept for the store's life.
//!
//! A synchronous store keeps several reads in flight only by reading on several threads.
//! Starting those threads for every call (as scoped threads) costs a `clone`, a stack and an
//! exit per thread per batch: tens of microseconds, which a prefetch of a few buffers or a
//! stream that refills in small steps paid over and over. The pool's threads wait on one
//! channel instead, and a call lends them work through a [`Scope`] that does not end before
//! every job it lent has finished, so jobs may borrow the caller's requests (as scoped threads
//! could) although the threads outlive the call.
//!
//! A thread the system refuses (a process limit, a sandbox) is no error: the pool has fewer
//! threads, and with none at all [`Scope::spawn`] hands the job back for the caller to run
//! inline. The threads stop, and are joined, when the last holder of the pool (the store and
//! the objects it opened) drops it.

use std::any::Any;
use std::marker::PhantomData;
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread::JoinHandle;

use crossbeam_channel::{Receiver, Sender};
use crossbeam_utils::sync::WaitGroup;
use parking_lot::Mutex;

/// A job as the threads see it: its borrows were erased by [`Scope::spawn`], whose scope
/// outlives the job.
type Job = Box<dyn FnOnce() + Send + 'static>;

/// The started threads, and the process that started them.
struct Workers {
    /// The process the threads belong to: a forked child has none of them (fork copies only
    /// the calling thread), so it starts its own rather than queue jobs nobody takes.
    pid: u32,
    jobs: Sender<Job>,
    threads: Vec<JoinHandle<()>>,
}

/// Up to `limit` threads that run jobs lent by [`IoPool::scope`].
pub(crate) struct IoPool {
    limit: usize,
    workers: Mutex<Option<Workers>>,
    /// Threads started over the pool's life (a test sees reuse in it).
    started: AtomicUsize,
    /// Jobs run on the pool's threads.
    ran: std::sync::Arc<AtomicUsize>,
    /// (Tests.) Refuse every thread, as a process limit would.
    #[cfg(test)]
    refuse: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for IoPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IoPool")
            .field("limit", &self.limit)
            .field("started", &self.started())
            .field("jobs_run", &self.jobs_run())
            .finish()
    }
}

impl IoPool {
    /// A pool of at most `limit` threads, none started yet.
    pub(crate) fn new(limit: usize) -> IoPool {
        IoPool {
            limit,
            workers: Mutex::new(None),
            started: AtomicUsize::new(0),
            ran: std::sync::Arc::new(AtomicUsize::new(0)),
            #[cfg(test)]
            refuse: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Threads started so far (over the pool's life, a forked child's included).
    pub(crate) fn started(&self) -> usize {
        self.started.load(Ordering::Relaxed)
    }

    /// Jobs the pool's threads have run.
    pub(crate) fn jobs_run(&self) -> usize {
        self.ran.load(Ordering::Relaxed)
    }

    /// (Tests.) Makes every later thread start fail, as `EAGAIN` from `clone` would.
    #[cfg(test)]
    pub(crate) fn refuse_threads(&self) {
        self.refuse.store(true, Ordering::Relaxed);
    }

    /// (Tests.) Lets thread starts succeed again.
    #[cfg(test)]
    fn allow_threads(&self) {
        self.refuse.store(false, Ordering::Relaxed);
    }

    /// The job queue of this process's threads, starting them on first use; `None` when the
    /// system refused every one.
    fn queue(&self) -> Option<Sender<Job>> {
        let pid = std::process::id();
        let mut w = self.workers.lock();
        if let Some(have) = w.as_ref() {
            if have.pid == pid {
                return (!have.threads.is_empty()).then(|| have.jobs.clone());
            }
            // A forked child: the threads stayed in the parent. Forget their handles and the
            // parent's sender whole (nothing to join here, and dropping the last sender would
            // take the channel's lock, which a parent thread may have held at the fork), and
            // start this process's own.
            if let Some(old) = w.take() {
                std::mem::forget(old);
            }
        }
        let (tx, rx) = crossbeam_channel::unbounded::<Job>();
        let mut threads = Vec::with_capacity(self.limit);
        for k in 0..self.limit {
            match self.spawn(k, rx.clone()) {
                Ok(t) => threads.push(t),
                Err(_) => break,
            }
        }
        self.started.fetch_add(threads.len(), Ordering::Relaxed);
        if threads.is_empty() {
            // Refused (a passing `EAGAIN`, a process limit): this call reads inline, and the
            // next one tries again rather than the store reading inline for good.
            return None;
        }
        *w = Some(Workers {
            pid,
            jobs: tx.clone(),
            threads,
        });
        Some(tx)
    }

    fn spawn(&self, k: usize, rx: Receiver<Job>) -> std::io::Result<JoinHandle<()>> {
        #[cfg(test)]
        if self.refuse.load(Ordering::Relaxed) {
            return Err(std::io::Error::from_raw_os_error(libc::EAGAIN));
        }
        // Each thread holds a share of `ran` (a test sees the threads end through it).
        let ran = self.ran.clone();
        std::thread::Builder::new()
            .name(format!("ucache-file-io-{k}"))
            .spawn(move || {
                // Ends when the pool drops its sender. Every job catches its own panic
                // (`Scope::spawn`), so nothing ends a thread early.
                let _ran = ran;
                for job in rx {
                    job();
                }
            })
    }

    /// Runs `f` with a [`Scope`] that lends jobs to the pool's threads; returns once `f` has
    /// and every job it lent has finished, even if `f` panics. A job's panic is resumed on
    /// the calling thread, once every job has finished.
    pub(crate) fn scope<'env, R>(&'env self, f: impl FnOnce(&Scope<'env>) -> R) -> R {
        let scope = Scope {
            pool: self,
            queue: Mutex::new(None),
            wait: Mutex::new(Some(WaitGroup::new())),
            lent: Mutex::new(Vec::new()),
            panicked: std::sync::Arc::new(Mutex::new(None)),
            env: PhantomData,
        };
        let r = f(&scope);
        let panicked = scope.finish();
        if let Some(p) = panicked {
            panic::resume_unwind(p);
        }
        r
    }
}

impl Drop for IoPool {
    fn drop(&mut self) {
        let Some(w) = self.workers.get_mut().take() else {
            return;
        };
        if w.pid != std::process::id() {
            // A forked child's copy of the parent's pool: as in `queue`, forget it whole.
            std::mem::forget(w);
            return;
        }
        // Closing the queue ends every thread once it has finished its job; no job can be
        // queued now (a scope borrows the pool).
        drop(w.jobs);
        for t in w.threads {
            let _ = t.join();
        }
    }
}

/// A lent job, until a pool thread or the caller takes it (with its share of the scope's wait
/// group, which the taker drops once the job has run).
type Lent = std::sync::Arc<Mutex<Option<(Job, WaitGroup)>>>;

/// Lends jobs that borrow from `'env` to the pool's threads; [`IoPool::scope`] waits for them.
///
/// A job no thread has started yet can be taken back and run by the caller
/// ([`Scope::help`]), so a call whose jobs queue behind other callers' never waits for work
/// that is not its own.
pub(crate) struct Scope<'env> {
    pool: &'env IoPool,
    /// The queue, fetched on the first spawn (`Some(None)`: no threads).
    queue: Mutex<Option<Option<Sender<Job>>>>,
    /// A share of it goes with each job and is dropped once the job has run.
    wait: Mutex<Option<WaitGroup>>,
    /// Jobs lent, in order; taken ones are `None`.
    lent: Mutex<Vec<Lent>>,
    panicked: std::sync::Arc<Mutex<Option<Box<dyn Any + Send>>>>,
    /// Jobs may borrow anything that outlives the scope, mutably: invariant in `'env`.
    env: PhantomData<&'env mut &'env ()>,
}

impl<'env> Scope<'env> {
    /// Hands `job` to a pool thread, or back to the caller (`Err`) if the pool has no thread.
    /// A panic in the job is kept and resumed by [`IoPool::scope`].
    pub(crate) fn spawn<F: FnOnce() + Send + 'env>(&self, job: F) -> Result<(), F> {
        let queue = self
            .queue
            .lock()
            .get_or_insert_with(|| self.pool.queue())
            .clone();
        let Some(queue) = queue else {
            return Err(job);
        };
        let Some(share) = self.wait.lock().as_ref().map(WaitGroup::clone) else {
            return Err(job);
        };
        let panicked = self.panicked.clone();
        let caught = move || {
            if let Err(p) = panic::catch_unwind(AssertUnwindSafe(job)) {
                panicked.lock().get_or_insert(p);
            }
        };
        let boxed: Box<dyn FnOnce() + Send + 'env> = Box::new(caught);
        // SAFETY: the job borrows only from `'env`. It lives in a `Lent` slot until a pool
        // thread or the caller takes it out, with the share of the wait group that the taker
        // drops only after running it. The scope does not end (`finish`, or `Drop` when `f`
        // unwinds) before it has taken back every job no thread took and waited for the wait
        // group, so no job runs, or is dropped, after `'env`. What the pool thread's wrapper
        // keeps after that is the slot, emptied: it borrows nothing.
        let job: Job =
            unsafe { std::mem::transmute::<Box<dyn FnOnce() + Send + 'env>, Job>(boxed) };
        let slot: Lent = std::sync::Arc::new(Mutex::new(Some((job, share))));
        self.lent.lock().push(slot.clone());
        let ran = self.pool.ran.clone();
        let wrapper: Job = Box::new(move || {
            let taken = slot.lock().take();
            if let Some((job, share)) = taken {
                job();
                ran.fetch_add(1, Ordering::Relaxed);
                drop(share);
            }
        });
        // The threads hold the receiver until the pool drops, which cannot happen while we
        // borrow it; were the send to fail, the job stays in `lent` for the caller to run.
        let _ = queue.send(wrapper);
        Ok(())
    }

    /// Takes back the oldest lent job no thread has started and runs it on the calling
    /// thread; `false` when there is none.
    pub(crate) fn help(&self) -> bool {
        let Some(taken) = self.take_unstarted() else {
            return false;
        };
        let (job, share) = taken;
        job();
        drop(share);
        true
    }

    fn take_unstarted(&self) -> Option<(Job, WaitGroup)> {
        let mut lent = self.lent.lock();
        while !lent.is_empty() {
            let taken = lent[0].lock().take();
            lent.remove(0);
            if taken.is_some() {
                return taken;
            }
        }
        None
    }

    /// Runs every job no thread has started, waits for the others; returns the first panic
    /// among them.
    fn finish(&self) -> Option<Box<dyn Any + Send>> {
        while self.help() {}
        if let Some(w) = self.wait.lock().take() {
            w.wait();
        }
        self.panicked.lock().take()
    }
}

impl Drop for Scope<'_> {
    fn drop(&mut self) {
        // On the normal path `finish` has run already. When `f` unwinds, this is where the
        // scope ends: jobs no thread started are dropped unrun (running them could panic
        // again, mid-unwind), and the ones running are waited for, so no job outlives what
        // it borrows.
        while let Some((job, share)) = self.take_unstarted() {
            drop(job);
            drop(share);
        }
        if let Some(w) = self.wait.get_mut().take() {
            w.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;
    use std::sync::atomic::AtomicU64;

    /// Waits until `done` holds, failing as hung after 300,000 polls a millisecond apart (at
    /// least the tests' five-minute hang limit). No clock is read: a loaded machine only makes
    /// the watchdog more patient.
    fn until(done: impl Fn() -> bool) {
        for _ in 0..300_000 {
            if done() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert!(done(), "hung");
    }

    /// 50 scopes of 6 jobs each run on the same few threads, started once.
    #[test]
    fn threads_start_once_and_are_reused() {
        let pool = IoPool::new(3);
        let ids = Mutex::new(HashSet::new());
        let sum = AtomicU64::new(0);
        for round in 0..50u64 {
            let count = AtomicU64::new(0);
            pool.scope(|s| {
                for k in 0..6u64 {
                    let (ids, sum, count) = (&ids, &sum, &count);
                    let job = move || {
                        ids.lock().insert(std::thread::current().id());
                        sum.fetch_add(round * 10 + k, Ordering::Relaxed);
                        count.fetch_add(1, Ordering::Relaxed);
                    };
                    if let Err(job) = s.spawn(job) {
                        job();
                    }
                }
                // Leave every job to the threads (the scope's end would run unstarted ones
                // here).
                until(|| count.load(Ordering::Relaxed) == 6);
            });
        }
        // Every job ran, each once, before its scope returned.
        let want: u64 = (0..50u64)
            .map(|r| (0..6).map(|k| r * 10 + k).sum::<u64>())
            .sum();
        assert_eq!(sum.load(Ordering::Relaxed), want);
        assert!(pool.started() <= 3, "started {}", pool.started());
        if pool.started() > 0 {
            // All 300 ran on the pool's threads, started once for the 50 scopes.
            assert_eq!(pool.jobs_run(), 300);
            let ids = ids.lock();
            assert!(ids.len() <= pool.started(), "{ids:?}");
            assert!(!ids.contains(&std::thread::current().id()));
        }
    }

    /// A job that no thread has started is taken back by the caller rather than waited for.
    #[test]
    fn unstarted_jobs_are_taken_back() {
        let pool = IoPool::new(1);
        let (hold_tx, hold_rx) = crossbeam_channel::bounded::<()>(0);
        let ran_inline = AtomicU64::new(0);
        let started = AtomicU64::new(0);
        pool.scope(|s| {
            // Occupies the only thread until the second job has been taken back.
            let (started, hold_rx) = (&started, &hold_rx);
            let blocker = move || {
                started.fetch_add(1, Ordering::Relaxed);
                let _ = hold_rx.recv();
            };
            if s.spawn(blocker).is_err() {
                return;
            }
            until(|| started.load(Ordering::Relaxed) == 1);
            let me = std::thread::current().id();
            let ran_inline = &ran_inline;
            assert!(s
                .spawn(move || {
                    if std::thread::current().id() == me {
                        ran_inline.fetch_add(1, Ordering::Relaxed);
                    }
                })
                .is_ok());
            assert!(s.help(), "the second job was queued behind the first");
            assert!(!s.help());
            drop(hold_tx);
        });
        if pool.started() > 0 {
            assert_eq!(ran_inline.load(Ordering::Relaxed), 1);
            assert_eq!(pool.jobs_run(), 1);
        }
    }

    #[test]
    fn refused_threads_hand_the_job_back() {
        let pool = IoPool::new(4);
        pool.refuse_threads();
        let ran = AtomicU64::new(0);
        pool.scope(|s| {
            for _ in 0..5 {
                let ran = &ran;
                if let Err(job) = s.spawn(move || {
                    ran.fetch_add(1, Ordering::Relaxed);
                }) {
                    job();
                }
            }
        });
        assert_eq!(ran.load(Ordering::Relaxed), 5);
        assert_eq!(pool.started(), 0);
        assert_eq!(pool.jobs_run(), 0);
        // A refusal is not for good: once threads can start, the next scope starts them.
        pool.allow_threads();
        pool.scope(|s| {
            let ran = &ran;
            assert!(s
                .spawn(move || {
                    ran.fetch_add(1, Ordering::Relaxed);
                })
                .is_ok());
        });
        // (Which thread ran the job is up to the race between the pool and `finish`.)
        assert_eq!(ran.load(Ordering::Relaxed), 6);
        assert_eq!(pool.started(), 4);
    }

    /// A job's panic reaches the caller only after every job of the scope has finished, and
    /// the thread that ran it goes on serving later scopes.
    #[test]
    fn a_panicking_job_is_resumed_after_the_others_finish() {
        let pool = IoPool::new(1);
        let done = AtomicU64::new(0);
        let r = panic::catch_unwind(AssertUnwindSafe(|| {
            pool.scope(|s| {
                let _ = s.spawn(|| panic!("job fails"));
                for _ in 0..4 {
                    let done = &done;
                    let _ = s.spawn(move || {
                        done.fetch_add(1, Ordering::Relaxed);
                    });
                }
            })
        }));
        assert!(r.is_err());
        if pool.started() == 0 {
            return;
        }
        assert_eq!(done.load(Ordering::Relaxed), 4);
        let again = AtomicU64::new(0);
        pool.scope(|s| {
            let again = &again;
            assert!(s
                .spawn(move || {
                    again.fetch_add(1, Ordering::Relaxed);
                })
                .is_ok());
            // Run by the thread whose earlier job panicked.
            until(|| again.load(Ordering::Relaxed) == 1);
        });
        assert_eq!(again.load(Ordering::Relaxed), 1);
        assert_eq!(pool.started(), 1);
    }

    /// Dropping the pool stops and joins its threads: each holds a share of `ran` (as does a
    /// job still queued), so only the test's own is left once they have all ended.
    #[test]
    fn drop_joins_the_threads() {
        let pool = IoPool::new(2);
        pool.scope(|s| {
            let _ = s.spawn(|| {});
        });
        let ran = pool.ran.clone();
        // The pool's, the test's, each running thread's (and a queued wrapper's, if any).
        assert!(std::sync::Arc::strong_count(&ran) >= 2 + pool.started());
        drop(pool);
        assert_eq!(std::sync::Arc::strong_count(&ran), 1);
    }
}
