//! Replays every policy × size over one trace, in parallel, timing each replay by the CPU
//! time of its own thread.
//!
//! Replays are independent, so they run on a pool of scoped threads pulling jobs from a shared
//! counter. Wall-clock time would charge a replay for the others sharing its core (and for
//! other processes on a shared machine); the thread's own CPU time
//! (`CLOCK_THREAD_CPUTIME_ID`) measures what one core needs for it, so requests per second
//! stay comparable however many replays ran at once.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use indicatif::ProgressBar;
use ucache::policy::{policy_from_spec, Simulator};

use super::trace::Trace;

/// One replay to run.
#[derive(Clone, Debug)]
pub struct Job {
    pub policy: String,
    pub cache_size: u64,
}

/// What one replay measured.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub policy: String,
    pub cache_size: u64,
    pub requests: u64,
    pub misses: u64,
    /// CPU time of the replay loop alone (not building the simulator).
    pub cpu: Duration,
}

impl Outcome {
    pub fn miss_ratio(&self) -> f64 {
        if self.requests == 0 {
            0.0
        } else {
            self.misses as f64 / self.requests as f64
        }
    }

    pub fn requests_per_sec(&self) -> f64 {
        self.requests as f64 / self.cpu.as_secs_f64().max(1e-9)
    }
}

/// CPU time the calling thread has used.
pub fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime only writes the timespec we pass.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return Duration::ZERO;
    }
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Requests between progress updates: rare enough to cost nothing in the replay loop.
const CHUNK: usize = 1 << 20;
/// How far ahead of the replay its state words are prefetched: enough requests to cover a
/// memory latency, few enough that the lines are still cached when used.
const AHEAD: usize = 8;

/// Replays `trace` once.
pub fn replay(trace: &Trace, job: &Job, progress: &ProgressBar) -> Result<Outcome, String> {
    let policy = policy_from_spec(&job.policy).map_err(|e| e.to_string())?;
    replay_policy(trace, policy, job, progress)
}

/// Replays `trace` once through `policy`, already built (a policy that has no spec: one
/// written in Python, say), reported under `job.policy`.
pub fn replay_policy(
    trace: &Trace,
    policy: Box<dyn ucache::policy::Policy>,
    job: &Job,
    progress: &ProgressBar,
) -> Result<Outcome, String> {
    let mut sim = Simulator::new(policy, trace.unique, job.cache_size);
    let t0 = thread_cpu();
    let reqs = &trace.requests;
    for (c, chunk) in reqs.chunks(CHUNK).enumerate() {
        let base = c * CHUNK;
        for (k, &id) in chunk.iter().enumerate() {
            if let Some(&next) = reqs.get(base + k + AHEAD) {
                sim.prefetch(next as u64);
            }
            sim.access(id as u64);
        }
        progress.inc(chunk.len() as u64);
    }
    let cpu = thread_cpu() - t0;
    let s = sim.stats();
    if sim.policy_broken() {
        return Err(format!(
            "policy '{}' panicked during the replay",
            job.policy
        ));
    }
    Ok(Outcome {
        policy: job.policy.clone(),
        cache_size: job.cache_size,
        requests: s.requests,
        misses: s.misses,
        cpu,
    })
}

/// Runs every job on `threads` threads; results in job order.
pub fn run_all(
    trace: &Trace,
    jobs: &[Job],
    threads: usize,
    progress: &ProgressBar,
) -> Result<Vec<Outcome>, String> {
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<Result<Outcome, String>>>> = Mutex::new(vec![None; jobs.len()]);
    std::thread::scope(|s| {
        for _ in 0..threads.clamp(1, jobs.len().max(1)) {
            s.spawn(|| loop {
                let k = next.fetch_add(1, Ordering::Relaxed);
                let Some(job) = jobs.get(k) else { break };
                let r = replay(trace, job, progress);
                results.lock().expect("no panics while held")[k] = Some(r);
            });
        }
    });
    results
        .into_inner()
        .expect("no panics while held")
        .into_iter()
        .map(|r| r.expect("every job ran"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::trace::Remapper;

    #[test]
    fn runs_every_job_and_counts_misses() {
        let mut m = Remapper::new();
        for k in 0..1000u64 {
            m.push(k % 10).unwrap();
        }
        let t = m.finish();
        let jobs: Vec<Job> = ["lru", "fifo", "s3fifo"]
            .iter()
            .flat_map(|p| {
                [5, 10].map(|c| Job {
                    policy: p.to_string(),
                    cache_size: c,
                })
            })
            .collect();
        let r = run_all(&t, &jobs, 3, &ProgressBar::hidden()).unwrap();
        assert_eq!(r.len(), 6);
        for o in &r {
            assert_eq!(o.requests, 1000);
            if o.cache_size == 10 {
                assert_eq!(o.misses, 10, "{o:?}");
            }
        }
        // A loop of 10 over 5 buffers: LRU and FIFO miss every time.
        assert_eq!(r[0].misses, 1000);
        assert!(run_all(
            &t,
            &[Job {
                policy: "nope".into(),
                cache_size: 1
            }],
            1,
            &ProgressBar::hidden()
        )
        .is_err());
    }
}
