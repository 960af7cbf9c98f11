//! The child process that runs one system for one run and prints its result as a JSON line.
//!
//! A process per run keeps systems from seeing each other's page cache, heap and mappings,
//! lets the kernel baselines sit alone in their memory cgroup, and lets getrusage(SELF) be
//! exactly the CPU that system spent.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::SeedableRng;

use super::cgroup;
use super::cpu::{self, MachineCpu};
use super::latency::Histogram;
use super::report::{RoleStats, RunResult};
use super::role::Role;
use super::system::{self, Params, StoreKind, SystemKind, SystemRow};
use super::workload::Workload;

/// The hidden `bench-worker` subcommand's arguments; the parent fills them in.
#[derive(clap::Args, Clone, Debug)]
pub struct WorkerArgs {
    #[arg(long, value_parser = SystemKind::parse)]
    pub system: SystemKind,
    #[arg(long, value_enum)]
    pub workload: Workload,
    #[arg(long)]
    pub file: PathBuf,
    #[arg(long)]
    pub data_bytes: u64,
    #[arg(long)]
    pub buffer_size: usize,
    #[arg(long)]
    pub memory_bytes: u64,
    #[arg(long)]
    pub threads: usize,
    #[arg(long)]
    pub seconds: f64,
    #[arg(long)]
    pub warmup: f64,
    #[arg(long, value_parser = StoreKind::parse)]
    pub store: StoreKind,
    #[arg(long)]
    pub endpoint: Option<String>,
    #[arg(long, default_value_t = system::PREFETCH_BATCH)]
    pub prefetch_depth: usize,
    #[arg(long)]
    pub eviction_batch: Option<usize>,
    #[arg(long)]
    pub no_background_eviction: bool,
    #[arg(long)]
    pub no_pool_huge_pages: bool,
    /// A cgroup directory to join before touching the data.
    #[arg(long)]
    pub cgroup: Option<PathBuf>,
    /// Record every op's buffer index into this trace file (`ucache sim --format record`).
    #[arg(long)]
    pub record: Option<PathBuf>,
    /// ucache systems: the mapping's policy spec (`lru`, or `lfu+mru` for the two tenants).
    #[arg(long)]
    pub policy: Option<String>,
    /// `tenants`: the weights of tenant A and tenant B.
    #[arg(long, value_delimiter = ',', default_value = "1,1")]
    pub tenant_weights: Vec<u32>,
}

/// Ops recorded at most, over all threads: 256 MiB of indices in memory.
const RECORD_LIMIT: usize = 1 << 25;

const WARMUP: u8 = 0;
const MEASURE: u8 = 1;
const STOP: u8 = 2;

/// Per-thread op counter on its own cache line, so publishing it every op costs nothing.
#[repr(align(128))]
#[derive(Default)]
struct PaddedCounter(AtomicU64);

/// What the threads of one worker share.
pub struct Shared {
    phase: AtomicU8,
    counters: Vec<PaddedCounter>,
    cursor: AtomicU64,
    failed: AtomicBool,
    first_mismatch: Mutex<Option<String>>,
}

/// Picks one op in eight on average, with random gaps of 0 to 14 ops between picks: no period
/// for a periodic stall to line up with. A generator of its own (xorshift64), so timing does
/// not change the workload's random stream.
struct Sampler {
    until: u64,
    state: u64,
}

impl Sampler {
    fn new(seed: u64) -> Self {
        Sampler {
            until: 0,
            state: seed | 1,
        }
    }

    #[inline]
    fn pick(&mut self) -> bool {
        if self.until > 0 {
            self.until -= 1;
            return false;
        }
        let mut x = self.state;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.state = x;
        self.until = x % 15;
        true
    }
}

/// One thread's view: its random stream, its counters, its histogram.
pub struct ThreadCtx<'a> {
    index: usize,
    role: Role,
    shared: &'a Shared,
    params: &'a Params,
    rng: SmallRng,
    ops: u64,
    sampler: Sampler,
    mismatches: u64,
    hist: Histogram,
    /// With `--record`: this thread's buffer indices, in order, up to `record_limit`.
    recorded: Option<Vec<u64>>,
    record_limit: usize,
}

impl<'a> ThreadCtx<'a> {
    fn new(index: usize, shared: &'a Shared, params: &'a Params, record: bool) -> Self {
        let seed = (std::process::id() as u64) << 32
            ^ (index as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
            ^ Instant::now().elapsed().as_nanos() as u64
            ^ std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(0);
        ThreadCtx {
            index,
            role: Role::of(params.workload, index, params.threads),
            shared,
            params,
            rng: SmallRng::seed_from_u64(seed),
            ops: 0,
            sampler: Sampler::new(seed),
            mismatches: 0,
            hist: Histogram::new(),
            recorded: record.then(Vec::new),
            record_limit: RECORD_LIMIT / params.threads.max(1),
        }
    }

    #[inline]
    fn record(&mut self, indices: &[u64]) {
        if let Some(r) = &mut self.recorded {
            let room = self.record_limit.saturating_sub(r.len());
            r.extend_from_slice(&indices[..indices.len().min(room)]);
        }
    }

    pub fn params(&self) -> &Params {
        self.params
    }

    /// What this thread does in a mixed workload.
    pub fn role(&self) -> Role {
        self.role
    }

    /// Whether the next op is an update (YCSB A and B).
    #[inline]
    pub fn next_is_update(&mut self) -> bool {
        self.params.workload.next_is_update(&mut self.rng)
    }

    /// Runs an update on buffer `index`, held exclusively in `buf`: checks a word and
    /// rewrites it with its value.
    #[inline]
    pub fn update(&mut self, buf: &mut [u8], index: u64) {
        let base = index * self.params.buffer_size as u64;
        let bad = Workload::update(&mut self.rng, buf, base);
        if bad != 0 {
            self.mismatch(index, buf);
            self.mismatches += bad;
        }
    }

    #[inline]
    pub fn running(&self) -> bool {
        self.shared.phase.load(Ordering::Relaxed) != STOP
    }

    #[inline]
    pub fn next_index(&mut self) -> u64 {
        let i = self.params.workload.next_index(
            self.role,
            &mut self.rng,
            &self.shared.cursor,
            self.params.buffers(),
        );
        self.record(&[i]);
        i
    }

    pub fn next_indices(&mut self, out: &mut [u64]) {
        let n = self.params.buffers();
        self.params
            .workload
            .next_indices(&mut self.rng, &self.shared.cursor, n, out);
        self.record(out);
    }

    /// A start time for one op in eight, on average, while measuring: timing every op would
    /// add two clock reads to ops that take tens of nanoseconds on a hit. The gaps are random
    /// (0 to 14 ops skipped), not every eighth op: a stall that repeats with a period (one
    /// eviction batch per 64 misses, a readahead window) would otherwise always or never be
    /// timed, and the 99th percentile would hide it or count it eight times over.
    #[inline]
    pub fn sample(&mut self) -> Option<Instant> {
        (self.sampler.pick() && self.shared.phase.load(Ordering::Relaxed) == MEASURE)
            .then(Instant::now)
    }

    /// Counts `n` finished ops and records the latency of a sampled one.
    #[inline]
    pub fn done(&mut self, n: u64, started: Option<Instant>) {
        if let Some(t) = started {
            self.hist.record(t.elapsed().as_nanos() as u64);
        }
        self.ops += n;
        self.shared.counters[self.index]
            .0
            .store(self.ops, Ordering::Relaxed);
    }

    /// Runs the workload's reads on buffer `index`, held in `buf`, and checks them.
    #[inline]
    pub fn touch(&mut self, buf: &[u8], index: u64) {
        let base = index * self.params.buffer_size as u64;
        let bad = self
            .params
            .workload
            .touch(self.role, &mut self.rng, buf, base);
        if bad != 0 {
            self.mismatch(index, buf);
            self.mismatches += bad;
        }
    }

    /// For readers that cannot lend a slice (optimistic reads): a random 8-byte-aligned offset
    /// inside a buffer, to read with [`ThreadCtx::check_word`].
    #[inline]
    pub fn pick_word(&mut self) -> usize {
        use rand::Rng;
        self.rng.gen_range(0..self.params.buffer_size / 8) * 8
    }

    /// Checks the word read at byte `at` of buffer `index`.
    #[inline]
    pub fn check_word(&mut self, index: u64, at: usize, value: u64) {
        let off = index * self.params.buffer_size as u64 + at as u64;
        if value != crate::bench::datafile::expected_word(off) {
            self.mismatches += 1;
            let mut first = self.shared.first_mismatch.lock().unwrap();
            first.get_or_insert_with(|| format!("offset {off}: word holds {value}"));
        }
    }

    #[cold]
    fn mismatch(&mut self, index: u64, buf: &[u8]) {
        let mut first = self.shared.first_mismatch.lock().unwrap();
        if first.is_none() {
            let got = u64::from_le_bytes(buf[0..8].try_into().unwrap());
            *first = Some(format!(
                "buffer {index} (offset {}): first word holds {got}",
                index * self.params.buffer_size as u64
            ));
        }
    }
}

struct Snapshot {
    at: Instant,
    ops: u64,
    per_thread: Vec<u64>,
    own: Duration,
    machine: MachineCpu,
    counters: Vec<(&'static str, u64)>,
}

impl Shared {
    fn snapshot(&self, sys: &dyn system::System) -> Snapshot {
        let counters = sys.counters();
        let per_thread: Vec<u64> = self
            .counters
            .iter()
            .map(|c| c.0.load(Ordering::Relaxed))
            .collect();
        Snapshot {
            at: Instant::now(),
            ops: per_thread.iter().sum(),
            per_thread,
            own: cpu::self_cpu(),
            machine: MachineCpu::read(),
            counters,
        }
    }

    /// Sleeps for `secs`, waking early if a thread failed.
    fn sleep(&self, secs: f64) {
        let end = Instant::now() + Duration::from_secs_f64(secs.max(0.0));
        while !self.failed.load(Ordering::Relaxed) {
            let now = Instant::now();
            if now >= end {
                break;
            }
            std::thread::sleep((end - now).min(Duration::from_millis(50)));
        }
    }
}

/// Longest extra warm-up spent waiting for a cache to fill.
pub const MAX_FILL: Duration = Duration::from_secs(120);

/// What a cache counted as full may still lack: one default eviction batch, the room ucache's
/// own test leaves (`Ucache::is_full`) and the page cache's (`Residency`).
pub const FULL_SLACK: u64 = 256 << 10;

/// Extends the warm-up until the system's cache is full, so that all systems are measured in
/// the same steady state: out of memory every miss also evicts, and in memory nothing misses.
/// That is the system's own test (ucache's budget, the page cache's residency of the file),
/// except for a page-cache system in a cgroup smaller than the data: its group is full once
/// it meets its limit, since the limit also covers the process's own memory and the file's
/// residency can therefore never reach the budget.
fn warm_until_full(shared: &Shared, sys: &dyn system::System, args: &WorkerArgs) {
    let end = Instant::now() + MAX_FILL;
    while !cache_full(sys, args) && !shared.failed.load(Ordering::Relaxed) {
        if Instant::now() >= end {
            eprintln!(
                "warning: {} did not fill its cache within {} s: measured before steady state",
                args.system.name(),
                MAX_FILL.as_secs()
            );
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Whether the system's cache is full: out of memory, its cgroup met its limit (or shows no
/// usage to wait on); in memory, the system itself says its data is loaded.
fn cache_full(sys: &dyn system::System, args: &WorkerArgs) -> bool {
    match &args.cgroup {
        Some(dir) if args.data_bytes > args.memory_bytes => {
            cgroup::limit_hits(dir).is_some_and(|n| n > 0)
                || cgroup::usage(dir).is_none_or(|u| u + FULL_SLACK >= args.memory_bytes)
        }
        _ => sys.warm(),
    }
}

/// Writes the threads' index streams as one trace, interleaved round-robin: the order in which
/// concurrent threads' accesses reached the cache is not known, and alternating them is the
/// closest simple stand-in.
fn write_record(path: &std::path::Path, streams: &[Vec<u64>]) -> std::io::Result<()> {
    let mut w = crate::sim::record::RecordWriter::create(path)?;
    let longest = streams.iter().map(Vec::len).max().unwrap_or(0);
    for k in 0..longest {
        for s in streams {
            if let Some(&i) = s.get(k) {
                w.push(i)?;
            }
        }
    }
    w.finish().map(drop)
}

/// Each role's throughput and latency, when the workload gives threads more than one role.
fn role_stats<T, R>(
    params: &Params,
    before: &Snapshot,
    after: &Snapshot,
    outcomes: &[(T, Histogram, u64, R)],
) -> BTreeMap<String, RoleStats> {
    let wall = after.at - before.at;
    let roles: Vec<Role> = (0..params.threads)
        .map(|t| Role::of(params.workload, t, params.threads))
        .collect();
    let mut out = BTreeMap::new();
    if roles.iter().all(|&r| r == Role::All) {
        return out;
    }
    for &role in &roles {
        if out.contains_key(role.name()) {
            continue;
        }
        let all = &roles;
        let mine = move || (0..all.len()).filter(move |&t| all[t] == role);
        let ops: u64 = mine()
            .map(|t| after.per_thread[t].saturating_sub(before.per_thread[t]))
            .sum();
        let mut hist = Histogram::new();
        mine().for_each(|t| hist.merge(&outcomes[t].1));
        let lat = hist.summary();
        out.insert(
            role.name().to_string(),
            RoleStats {
                threads: mine().count(),
                ops_per_sec: ops as f64 / wall.as_secs_f64(),
                p50_us: lat.p50_us,
                p99_us: lat.p99_us,
            },
        );
    }
    out
}

/// Runs the worker; the returned error goes to stderr and makes the exit status non-zero.
pub fn run(args: &WorkerArgs) -> Result<RunResult, String> {
    if let Some(dir) = &args.cgroup {
        cgroup::join(dir).map_err(|e| format!("joining cgroup: {e}"))?;
    }
    let in_cgroup = cgroup::current_memory_cgroup();
    let params = Params {
        workload: args.workload,
        path: args.file.clone(),
        data_bytes: args.data_bytes,
        buffer_size: args.buffer_size,
        memory_bytes: args.memory_bytes,
        threads: args.threads.max(1),
        store: args.store.clone(),
        endpoint: args.endpoint.clone(),
        prefetch_depth: args.prefetch_depth.max(1),
        eviction_batch: args.eviction_batch,
        background_eviction: !args.no_background_eviction,
        pool_huge_pages: !args.no_pool_huge_pages,
        policy: args.policy.clone(),
        tenant_weights: [
            args.tenant_weights.first().copied().unwrap_or(1),
            args.tenant_weights.get(1).copied().unwrap_or(1),
        ],
    };
    let sys = system::open(args.system, &params)?;
    let shared = Shared {
        phase: AtomicU8::new(WARMUP),
        counters: (0..params.threads)
            .map(|_| PaddedCounter::default())
            .collect(),
        cursor: AtomicU64::new(0),
        failed: AtomicBool::new(false),
        first_mismatch: Mutex::new(None),
    };

    let sys_ref: &dyn system::System = sys.as_ref();
    let (before, after, outcomes) = std::thread::scope(|s| {
        let mut handles = Vec::with_capacity(params.threads);
        for i in 0..params.threads {
            let (shared, params) = (&shared, &params);
            let spawned = std::thread::Builder::new()
                .name(format!("bench-{i}"))
                .spawn_scoped(s, move || {
                    let mut ctx = ThreadCtx::new(i, shared, params, args.record.is_some());
                    let r = sys_ref.run_thread(&mut ctx);
                    if r.is_err() {
                        shared.failed.store(true, Ordering::Relaxed);
                    }
                    (r, ctx.hist, ctx.mismatches, ctx.recorded)
                });
            match spawned {
                Ok(h) => handles.push(h),
                Err(e) => {
                    // The threads already running loop until told to stop, and the scope
                    // waits for them: stop them, or the worker hangs.
                    shared.phase.store(STOP, Ordering::Relaxed);
                    handles.into_iter().for_each(|h| drop(h.join()));
                    return Err(format!(
                        "starting bench thread {} of {}: {e}",
                        i + 1,
                        params.threads
                    ));
                }
            }
        }
        shared.sleep(args.warmup);
        warm_until_full(&shared, sys_ref, args);
        let before = shared.snapshot(sys_ref);
        shared.phase.store(MEASURE, Ordering::Relaxed);
        shared.sleep(args.seconds);
        let after = shared.snapshot(sys_ref);
        shared.phase.store(STOP, Ordering::Relaxed);
        let outcomes: Vec<_> = handles
            .into_iter()
            .map(|h| h.join().expect("bench thread panicked"))
            .collect();
        Ok((before, after, outcomes))
    })?;

    let mut hist = Histogram::new();
    let mut mismatches = 0;
    for (r, h, m, _) in outcomes.iter() {
        r.as_ref()
            .map_err(|e| format!("{}: {e}", args.system.name()))?;
        hist.merge(h);
        mismatches += m;
    }
    let roles = role_stats(&params, &before, &after, &outcomes);
    if let Some(path) = &args.record {
        let streams: Vec<Vec<u64>> = outcomes.into_iter().filter_map(|o| o.3).collect();
        write_record(path, &streams).map_err(|e| format!("{}: {e}", path.display()))?;
    }

    let wall = after.at - before.at;
    let ops = after.ops - before.ops;

    let own = after.own.saturating_sub(before.own);
    let (others_cpu_pct, steal_pct) = cpu::others_cpu_pct(before.machine, after.machine, own, wall);
    let secs = wall.as_secs_f64();
    let ops_per_sec = ops as f64 / secs;
    let counters: BTreeMap<String, u64> = after
        .counters
        .iter()
        .map(|&(k, v)| {
            let b = before.counters.iter().find(|c| c.0 == k).map_or(0, |c| c.1);
            (k.to_string(), v.saturating_sub(b))
        })
        .collect();
    let first_mismatch = shared.first_mismatch.lock().unwrap().clone();
    Ok(RunResult {
        system: SystemRow::new(args.system, args.policy.clone()),
        workload: args.workload,
        threads: params.threads,
        buffer_size: params.buffer_size,
        data_bytes: params.data_bytes,
        memory_bytes: params.memory_bytes,
        store: args
            .system
            .is_ucache()
            .then(|| args.store.name().to_string()),
        prefetch_depth: Some(params.prefetch_depth),
        seconds: secs,
        ops,
        ops_per_sec,
        bytes_per_sec: ops_per_sec * params.buffer_size as f64,
        cpu_us_per_op: if ops == 0 {
            0.0
        } else {
            own.as_secs_f64() * 1e6 / ops as f64
        },
        cpu_cores: own.as_secs_f64() / secs,
        others_cpu_pct,
        steal_pct,
        latency_unit: sys.latency_unit().to_string(),
        latency: hist.summary(),
        mismatches,
        first_mismatch,
        counters,
        roles,
        cgroup: in_cgroup,
        cgroup_peak_bytes: None,
        cgroup_limit_hits: None,
    })
}

#[cfg(test)]
mod record_tests {
    use super::*;

    #[test]
    fn recorded_streams_interleave_round_robin() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.rec");
        write_record(&path, &[vec![1, 2, 3], vec![10], vec![20, 21]]).unwrap();
        let mut ids = Vec::new();
        let f = std::fs::File::open(&path).unwrap();
        crate::sim::record::read(&mut std::io::BufReader::new(f), &mut |i| {
            ids.push(i);
            Ok(())
        })
        .unwrap();
        assert_eq!(ids, vec![1, 10, 20, 2, 21, 3]);
    }
}

#[cfg(test)]
mod sampler_tests {
    use super::Sampler;

    /// One op in eight is timed, and ops at every position of a period of 8 (or 64) are timed
    /// about equally often. The every-eighth-op sampler it replaces timed only one position.
    #[test]
    fn samples_one_in_eight_at_every_phase_of_a_period() {
        let mut s = Sampler::new(0x1234_5678);
        let n = 800_000u64;
        let mut by_phase = [0u64; 64];
        let mut picked = 0;
        for i in 0..n {
            if s.pick() {
                picked += 1;
                by_phase[(i % 64) as usize] += 1;
            }
        }
        let rate = picked as f64 / n as f64;
        assert!((0.12..0.13).contains(&rate), "{rate}");
        let expect = picked as f64 / 64.0;
        for (phase, &k) in by_phase.iter().enumerate() {
            assert!(
                (k as f64 - expect).abs() < expect * 0.1,
                "phase {phase}: {k} picks, expected about {expect}"
            );
        }
    }
}

#[cfg(test)]
mod warm_tests {
    use super::*;

    /// Never full by its own test.
    struct Cold;
    impl system::System for Cold {
        fn run_thread(&self, _: &mut ThreadCtx) -> Result<(), String> {
            Ok(())
        }
        fn warm(&self) -> bool {
            false
        }
    }

    fn args(cgroup: PathBuf, data: u64, memory: u64) -> WorkerArgs {
        WorkerArgs {
            system: SystemKind::Mmap,
            workload: Workload::Lookup,
            file: PathBuf::from("/nonexistent"),
            data_bytes: data,
            buffer_size: 4096,
            memory_bytes: memory,
            threads: 1,
            seconds: 1.0,
            warmup: 0.0,
            store: StoreKind::File,
            endpoint: None,
            prefetch_depth: 32,
            eviction_batch: None,
            no_background_eviction: false,
            no_pool_huge_pages: false,
            cgroup: Some(cgroup),
            record: None,
            policy: None,
            tenant_weights: vec![1, 1],
        }
    }

    /// Whether warm-up counts the cache full for a cgroup showing `usage` and `failcnt`. The
    /// decision is asserted directly, not through how long `warm_until_full` waited: a timed
    /// wait flaked when a loaded host delayed the first check past its 250 ms bound.
    fn full(data: u64, memory: u64, usage: u64, failcnt: u64) -> bool {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("memory.usage_in_bytes"), usage.to_string()).unwrap();
        std::fs::write(dir.path().join("memory.failcnt"), failcnt.to_string()).unwrap();
        cache_full(&Cold, &args(dir.path().to_path_buf(), data, memory))
    }

    /// In memory, a page-cache system is full when the file is, as ucache is when its data is
    /// loaded: a cgroup holding 95% of the data's size (process memory included) used to end
    /// the warm-up with 5% of the file still cold (found by review, 2026-11-25).
    #[test]
    fn in_memory_the_whole_file_must_be_cached() {
        let data = 1u64 << 30;
        assert!(!full(data, 2 << 30, data, 0));
    }

    /// Out of memory, the cgroup is full once it meets its limit.
    #[test]
    fn out_of_memory_the_cgroup_must_meet_its_limit() {
        let (data, memory) = (4u64 << 30, 512u64 << 20);
        assert!(!full(data, memory, memory / 100 * 95, 0));
        assert!(full(data, memory, memory / 100 * 95, 3));
        assert!(full(data, memory, memory - 4096, 0));
    }
}
