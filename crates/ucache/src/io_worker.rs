//! The background threads that complete asynchronous primitives (`prefetch`, `writeback`).
//!
//! The caller claims the buffers (so their state words already say `Loading` or write-back in
//! flight, and other threads wait on those words alone) and hands the batch over. Loads run as
//! one store stream ([`crate::store::Object::read_stream`]) that takes in every load job of the
//! same mapping queued meanwhile: a program that prefetches its next batch while it consumes
//! the current one keeps the device's queue full, and each buffer is published as its own read
//! completes. Write-backs run as one store batch. Started on first use (programs that never
//! prefetch have no thread), or when a transparent mapping is mapped.

use std::collections::VecDeque;
use std::sync::{Arc, OnceLock};

use crossbeam_channel::{Receiver, Sender};

/// What a job runs on: a mapping, seen only through the three calls the IO threads make. A
/// trait, so that this module (which the cache's shared core owns, below the mappings) does
/// not name the mapping that submits to it.
pub(crate) trait IoTarget: Send + Sync {
    /// Reads and publishes the claims `next` yields, up to `depth` in flight, as one stream.
    ///
    /// # Safety
    /// Each index `next` yields is a load claim of this mapping handed over as its index,
    /// adopted here once.
    unsafe fn load_stream(&self, depth: usize, next: &mut dyn FnMut() -> Option<u64>);
    /// Reads and publishes the handed-over claims `indices` in one batch.
    ///
    /// # Safety
    /// As [`IoTarget::load_stream`], for each of `indices`.
    unsafe fn load_handed(&self, indices: &[u64]);
    /// Writes the buffers whose write-back has begun; failures leave them dirty.
    fn write_claimed(&self, indices: &[u64]);
}

pub(crate) enum Job {
    /// Buffers claimed `Evicted → Loading`, with budget reserved, to be read and published.
    Load {
        mapping: Arc<dyn IoTarget>,
        indices: Vec<u64>,
    },
    /// Buffers whose write-back has begun (pinned, dirty cleared), to be written.
    Writeback {
        mapping: Arc<dyn IoTarget>,
        indices: Vec<u64>,
    },
    /// Reads into memory the job owns, which touch no buffer (a scan's window read into its
    /// ring, `mapping/scan_ring.rs`): run as given.
    Task(Box<dyn FnOnce() + Send>),
}

pub(crate) struct IoWorker {
    threads: usize,
    tx: OnceLock<Sender<Job>>,
    /// Held while the threads are being started, so only one caller starts them.
    spawn: parking_lot::Mutex<()>,
}

/// Most prefetch reads a stream keeps in flight, on the IO threads or inline readahead
/// (the ring's size caps it further).
pub(crate) const STREAM_DEPTH: usize = 256;

impl IoWorker {
    /// `threads` workers sharing one queue, started on the first job.
    pub(crate) fn new(threads: usize) -> Self {
        IoWorker {
            threads: threads.max(1),
            tx: OnceLock::new(),
            spawn: parking_lot::Mutex::new(()),
        }
    }

    /// Starts the threads if they are not running yet. A transparent mapping calls this when
    /// it is mapped: its readahead submits jobs from inside the SIGBUS handler, where creating
    /// a thread is not safe.
    pub(crate) fn start(&self) -> std::io::Result<()> {
        if self.tx.get().is_some() {
            return Ok(());
        }
        let _spawning = self.spawn.lock();
        if self.tx.get().is_some() {
            return Ok(());
        }
        let (tx, rx) = crossbeam_channel::unbounded::<Job>();
        for k in 0..self.threads {
            let rx = rx.clone();
            // On failure the threads already started exit when `tx` drops.
            std::thread::Builder::new()
                .name(format!("ucache-io-{k}"))
                .spawn(move || serve(rx))?;
        }
        let _ = self.tx.set(tx);
        Ok(())
    }

    pub(crate) fn submit(&self, job: Job) {
        if self.tx.get().is_none() && self.start().is_err() {
            // No thread: do the work here rather than lose the claimed buffers.
            return run_alone(job);
        }
        let tx = self.tx.get().expect("started above");
        if let Err(e) = tx.send(job) {
            // The receivers live as long as the threads, which never exit while a sender
            // exists; run the job here rather than lose claimed buffers.
            run_alone(e.into_inner());
        }
    }
}

/// The worker's loop. Failures are counted in the stats and leave the buffers evicted (loads)
/// or dirty (write-backs); the next access or msync meets them again and reports them to its
/// caller.
fn serve(rx: Receiver<Job>) {
    let mut stashed = None;
    while let Some(job) = stashed.take().or_else(|| rx.recv().ok()) {
        match job {
            Job::Load { mapping, indices } => {
                let mut pending: VecDeque<u64> = indices.into();
                // SAFETY: a load job's indices are claims handed over by the mapping's
                // prefetch (`LoadClaim::into_raw`), each in one job, adopted once.
                unsafe {
                    mapping.load_stream(STREAM_DEPTH, &mut || loop {
                        if let Some(i) = pending.pop_front() {
                            return Some(i);
                        }
                        if stashed.is_some() {
                            return None;
                        }
                        match rx.try_recv() {
                            Ok(Job::Load {
                                mapping: m,
                                indices,
                            }) if Arc::ptr_eq(&m, &mapping) => pending.extend(indices),
                            // Another mapping's loads, or a write-back: after this stream drains.
                            Ok(other) => stashed = Some(other),
                            Err(_) => return None,
                        }
                    })
                };
            }
            Job::Writeback { mapping, indices } => {
                mapping.write_claimed(&indices);
            }
            Job::Task(f) => f(),
        }
    }
}

/// Runs one job on the calling thread.
fn run_alone(job: Job) {
    match job {
        Job::Load { mapping, indices } => {
            // SAFETY: as in `serve`.
            unsafe { mapping.load_handed(&indices) };
        }
        Job::Writeback { mapping, indices } => {
            mapping.write_claimed(&indices);
        }
        Job::Task(f) => f(),
    }
}
