//! The background thread that completes asynchronous primitives (`prefetch`, `writeback`).
//!
//! The caller claims the buffers (so their state words already say `Loading` or write-back in
//! flight, and other threads wait on those words alone) and hands the batch over; the worker
//! runs it as one store batch, so a store that keeps requests in flight (io_uring) gets the
//! whole batch at once. Started on first use: programs that never prefetch have no thread.

use std::sync::{Arc, OnceLock};

use crossbeam_channel::Sender;

use crate::mapping::MappingCore;

pub(crate) enum Job {
    /// Buffers claimed `Evicted → Loading`, with budget reserved, to be read and published.
    Load {
        mapping: Arc<MappingCore>,
        indices: Vec<u64>,
    },
    /// Buffers whose write-back has begun (pinned, dirty cleared), to be written.
    Writeback {
        mapping: Arc<MappingCore>,
        indices: Vec<u64>,
    },
}

#[derive(Default)]
pub(crate) struct IoWorker {
    tx: OnceLock<Sender<Job>>,
}

impl IoWorker {
    pub(crate) fn submit(&self, job: Job) {
        let tx = self.tx.get_or_init(|| {
            let (tx, rx) = crossbeam_channel::unbounded::<Job>();
            std::thread::Builder::new()
                .name("ucache-io".into())
                .spawn(move || {
                    for job in rx {
                        match job {
                            // Failures are counted in the stats and leave the buffers
                            // evicted (loads) or dirty (write-backs); the next access or
                            // msync meets them again and reports them to its caller.
                            Job::Load { mapping, indices } => {
                                let _ = mapping.load_claimed(&indices, true);
                            }
                            Job::Writeback { mapping, indices } => {
                                mapping.write_claimed(&indices);
                            }
                        }
                    }
                })
                .expect("spawn ucache-io thread");
            tx
        });
        if let Err(e) = tx.send(job) {
            // The receiver lives as long as the thread, which never exits while a sender
            // exists; run the job here rather than lose claimed buffers.
            match e.into_inner() {
                Job::Load { mapping, indices } => {
                    let _ = mapping.load_claimed(&indices, true);
                }
                Job::Writeback { mapping, indices } => {
                    mapping.write_claimed(&indices);
                }
            }
        }
    }
}
