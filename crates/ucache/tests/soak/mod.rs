//! The crash-and-restart soak, shared by `tests/crash_soak.rs` (buffered, `O_DIRECT` and
//! io_uring files) and `ucache-object`'s `tests/crash_soak.rs` (the S3 chunked store), which
//! includes this file by path.
//!
//! Each cycle the parent (the test) re-executes its own test binary as a child process. The
//! child maps the object with a budget of [`BUDGET`] buffers (the mapping is [`BUFFERS`], so
//! evictions write back all the time) over a [`FaultStore`] wrapping the real store, and runs
//! [`WRITERS`] writer threads. Each writer owns the buffers `b` with `b % WRITERS == writer`
//! (interleaved, so writers share S3 chunks) and writes versioned [`record`]s through
//! exclusive pins; every few writes it calls `msync` (of the whole mapping, or of the one
//! buffer it just wrote), and after each `Ok` appends the acknowledged `(buffer, version)`
//! facts to the ledger file and fsyncs it: the ledger is the ground truth of what the cache
//! called durable. A chaos thread injects faults meanwhile: failing writes, failing syncs
//! (which throw away the unsynced writes, as Linux may after a failed fsync), failing reads,
//! and write and read latency. Writers retry failed msyncs; on [`Error::SyncPoisoned`] every
//! writer rewrites all of its buffers before it trusts an msync again (see [`Poison`]).
//!
//! The child is SIGKILLed at a point the parent picks ([`Kill`]): after a random delay, as soon
//! as the child says it entered msync (through its stdout pipe), or by the child itself inside
//! the store: halfway through a write-back batch, after a write-back (an S3 chunk PUT) landed
//! but before the cache heard of it or the sync (the S3 manifest) ran, or inside the store's
//! sync, before or after it reached the real store. The parent then reopens the object in its
//! own process, without faults, and checks every buffer: all zeros only if never
//! acknowledged, otherwise a whole record of that buffer, its owner, a matching checksum and
//! the exact bytes its version must have, at a version at least the ledger's.
//!
//! Scale: `UCACHE_SOAK_CYCLES` (cycles per store, default [`DEFAULT_CYCLES`]) or
//! `UCACHE_SOAK_SECONDS` (cycles per store until that long has passed: a loop bound, never
//! an assertion); `UCACHE_SOAK_SEED` fixes the parent's choices. Each store's totals are
//! printed as one `soak-summary` line (scripts/soak.sh adds them up).

#![allow(dead_code)] // each including test binary uses its own part

use std::collections::HashMap;
use std::fs::{File, OpenOptions as FsOpen};
use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use ucache::store::{FaultConfig, FaultStore, IoBuf, Object, OpenOptions, Store};
use ucache::{Cache, CacheOptions, Error, MapOptions, Mapping};

// By path, so that `ucache-object`'s soak, which includes this file, shares it too.
#[path = "../common/mod.rs"]
mod common;
use common::store::forward_object;
use common::{within, HANG};

/// Buffer size.
pub const BS: usize = 4096;
/// Buffers mapped.
pub const BUFFERS: u64 = 256;
/// Buffers the budget holds: an eighth of the mapping.
pub const BUDGET: u64 = 32;
/// Writer threads in the child.
pub const WRITERS: u64 = 8;
/// Cycles per local store when the environment asks for none.
pub const DEFAULT_CYCLES: u64 = 40;

const CHILD_ENV: &str = "UCACHE_SOAK_CHILD";
const MAGIC: &[u8; 8] = b"UCSOAK01";
/// Header: magic, buffer, writer, version, cycle, checksum.
const HEADER: usize = 48;

/// Where the child is killed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kill {
    /// By the parent, a random delay after the child is ready.
    Delay,
    /// By the parent, as soon as the child reports entering an msync.
    MidMsync,
    /// By the child, inside a write-back batch: half of it has reached the store.
    MidWriteBack,
    /// By the child, after a write-back (for S3: a chunk PUT) landed, before the cache learns
    /// of it and before any sync (for S3: the manifest PUT).
    AfterPut,
    /// By the child, as the store's sync begins (the cache has written back msync's buffers).
    SyncStart,
    /// By the child, after the real store's sync succeeded, before msync returns.
    SyncDone,
}

const KILLS: [Kill; 6] = [
    Kill::Delay,
    Kill::MidMsync,
    Kill::MidWriteBack,
    Kill::AfterPut,
    Kill::SyncStart,
    Kill::SyncDone,
];

impl Kill {
    fn code(self) -> usize {
        KILLS.iter().position(|&k| k == self).unwrap()
    }
}

/// One store's soak: `label` names it in reports, `test` is the `#[test]` function that calls
/// [`Soak::run`] (re-executed as the child), `make` builds the real store (in the child and for
/// the parent's check).
pub struct Soak<'a> {
    pub label: &'a str,
    pub test: &'a str,
    pub make: &'a dyn Fn() -> Arc<dyn Store>,
    /// How much slower than a local file the store is (1 for files): stretches the time
    /// between injected faults and the parent's kill delays, so that a slow store still
    /// acknowledges msyncs between faults and reaches its kill points.
    pub pace: u64,
    /// Cycles when the environment asks for none.
    pub cycles: u64,
}

/// What a soak did, for the summary line.
#[derive(Default, Debug)]
pub struct Totals {
    pub cycles: u64,
    pub kills: u64,
    pub kills_by: HashMap<&'static str, u64>,
    pub faults: u64,
    pub writes: u64,
    pub acked: u64,
    pub msync_ok: u64,
    pub msync_err: u64,
    pub poisoned: u64,
    pub bytes_verified: u64,
    pub buffers_acked: u64,
}

/// A buffer's record for version `version` (the bytes depend only on buffer, writer and
/// version, plus the cycle that wrote it in the header): anything else in the store is garbage.
pub fn record(buffer: u64, version: u64, cycle: u64) -> Vec<u8> {
    let mut r = vec![0u8; BS];
    r[..8].copy_from_slice(MAGIC);
    r[8..16].copy_from_slice(&buffer.to_le_bytes());
    r[16..24].copy_from_slice(&(buffer % WRITERS).to_le_bytes());
    r[24..32].copy_from_slice(&version.to_le_bytes());
    r[32..40].copy_from_slice(&cycle.to_le_bytes());
    let mut x = buffer.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ version.rotate_left(29);
    for w in r[HEADER..].chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        w.copy_from_slice(&x.to_le_bytes());
    }
    let sum = checksum(&r);
    r[40..48].copy_from_slice(&sum.to_le_bytes());
    r
}

/// FNV-1a over the record without its checksum field.
fn checksum(r: &[u8]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for &b in r[..40].iter().chain(&r[HEADER..]) {
        h = (h ^ b as u64).wrapping_mul(0x0100_0000_01b3);
    }
    h
}

fn word(r: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(r[at..at + 8].try_into().unwrap())
}

/// The version buffer `buffer` holds, `Ok(None)` for all zeros (never written), or why it is
/// not a whole record of that buffer.
pub fn check_record(buffer: u64, r: &[u8]) -> Result<Option<u64>, String> {
    if r.iter().all(|&b| b == 0) {
        return Ok(None);
    }
    if &r[..8] != MAGIC {
        return Err(format!("garbage: no record header ({:02x?})", &r[..16]));
    }
    let (b, w, v, c) = (word(r, 8), word(r, 16), word(r, 24), word(r, 32));
    if b != buffer || w != buffer % WRITERS {
        return Err(format!("misplaced: record of buffer {b} writer {w}"));
    }
    if word(r, 40) != checksum(r) {
        return Err(format!("torn: version {v} fails its checksum"));
    }
    if r != record(buffer, v, c).as_slice() {
        return Err(format!("garbage: version {v} has the wrong bytes"));
    }
    Ok(Some(v))
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

impl Soak<'_> {
    /// The test body: in the child, runs the child (and never returns); in the parent, runs the
    /// cycles on `object` (a file path or an S3 prefix; `dir` holds the ledger and the child's
    /// logs) and returns the totals, after printing them.
    pub fn run(&self, dir: &Path, object: &str) -> Totals {
        if std::env::var(CHILD_ENV).as_deref() == Ok(self.label) {
            child(self);
        }
        let seed = env_u64("UCACHE_SOAK_SEED").unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
        let seconds = env_u64("UCACHE_SOAK_SECONDS");
        let cycles = env_u64("UCACHE_SOAK_CYCLES").unwrap_or(self.cycles);
        eprintln!(
            "soak {}: seed {seed} (UCACHE_SOAK_SEED), {}",
            self.label,
            match seconds {
                Some(s) => format!("{s} s"),
                None => format!("{cycles} cycles"),
            }
        );
        let mut rng = SmallRng::seed_from_u64(seed);
        let ledger = dir.join("ledger");
        let mut t = Totals::default();
        let start = Instant::now();
        loop {
            let more = match seconds {
                Some(s) => start.elapsed() < Duration::from_secs(s) || t.cycles == 0,
                None => t.cycles < cycles,
            };
            if !more {
                break;
            }
            // The self-inflicted points need the child to reach them; the delay and the pipe
            // cover the rest. Every cycle has a fallback kill by the parent.
            let kill = KILLS[rng.gen_range(0..KILLS.len())];
            self.cycle(&mut rng, &mut t, dir, object, &ledger, kill);
        }
        assert!(
            t.acked > 0,
            "{}: no msync was ever acknowledged",
            self.label
        );
        let mut by: Vec<_> = t.kills_by.iter().collect();
        by.sort();
        eprintln!(
            "soak-summary store={} cycles={} kills={} faults={} writes={} msync_ok={} \
             msync_err={} poisoned={} acked_facts={} buffers_acked={} bytes_verified={} kills_by={:?}",
            self.label,
            t.cycles,
            t.kills,
            t.faults,
            t.writes,
            t.msync_ok,
            t.msync_err,
            t.poisoned,
            t.acked,
            t.buffers_acked,
            t.bytes_verified,
            by
        );
        t
    }

    fn cycle(
        &self,
        rng: &mut SmallRng,
        t: &mut Totals,
        dir: &Path,
        object: &str,
        ledger: &Path,
        kill: Kill,
    ) {
        let n = t.cycles;
        let log = dir.join(format!("child-{n}.stderr"));
        let mut proc = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", self.test, "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, self.label)
            .env("UCACHE_SOAK_OBJECT", object)
            .env("UCACHE_SOAK_LEDGER", ledger)
            .env("UCACHE_SOAK_CYCLE", n.to_string())
            .env("UCACHE_SOAK_KILL", kill.code().to_string())
            .env("UCACHE_SOAK_CHILD_SEED", rng.gen::<u64>().to_string())
            .stdout(Stdio::piped())
            .stderr(File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let pid = proc.id() as i32;
        // The child's lines, read on a thread so that the parent can time its kill.
        let (tx, rx) = std::sync::mpsc::channel::<String>();
        let out = proc.stdout.take().unwrap();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut last_progress = None;
        let note = |line: &str, last: &mut Option<String>| {
            // libtest may put its own "test NAME ... " in front of the child's first line.
            if let Some(at) = line.find("PROGRESS ") {
                *last = Some(line[at + "PROGRESS ".len()..].to_string());
            }
        };
        // Whether the kill came at the chosen point (else the fallback delay's).
        let mut reached = matches!(kill, Kill::Delay);
        // Ready: the child mapped the object and its writers start.
        loop {
            match rx.recv_timeout(HANG) {
                Ok(l) if l.ends_with("READY") => break,
                Ok(l) => {
                    reached |= l.ends_with("KILLPOINT");
                    note(&l, &mut last_progress)
                }
                // Exited (a self-kill before ready is possible for the in-store points).
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
                Err(_) => {
                    let _ = proc.kill();
                    panic!("{}: child of cycle {n} not ready in {HANG:?}", self.label);
                }
            }
        }
        // The fallback: nobody waits for a point the child never reaches.
        let fallback = Duration::from_millis(rng.gen_range(100..1500) * self.pace);
        let deadline = Instant::now() + fallback;
        let mut msyncs_seen = 0;
        let skip = rng.gen_range(0..20);
        while Instant::now() < deadline {
            match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(l) if l.ends_with("MSYNC") && kill == Kill::MidMsync => {
                    msyncs_seen += 1;
                    if msyncs_seen > skip {
                        reached = true;
                        break;
                    }
                }
                Ok(l) => {
                    reached |= l.ends_with("KILLPOINT");
                    note(&l, &mut last_progress)
                }
                Err(_) => break,
            }
        }
        // SAFETY: kill(2) on our own child, not yet waited for (so the pid is still its).
        unsafe { libc::kill(pid, libc::SIGKILL) };
        let status = proc.wait().unwrap();
        reader.join().unwrap();
        for l in rx.try_iter() {
            reached |= l.ends_with("KILLPOINT");
            note(&l, &mut last_progress);
        }
        if status.signal() != Some(libc::SIGKILL) {
            let mut s = String::new();
            let _ = File::open(&log).and_then(|mut f| f.read_to_string(&mut s));
            panic!(
                "{}: child of cycle {n} ended with {status} instead of SIGKILL; its stderr:\n{s}",
                self.label
            );
        }
        let _ = std::fs::remove_file(&log);
        t.cycles += 1;
        t.kills += 1;
        let how = if reached {
            kill_name(kill)
        } else {
            "fallback_delay"
        };
        *t.kills_by.entry(how).or_default() += 1;
        if let Some(p) = last_progress {
            let v: Vec<u64> = p.split(' ').filter_map(|x| x.parse().ok()).collect();
            if let [writes, acked, faults, ok, err, poisoned] = v[..] {
                t.writes += writes;
                t.acked += acked;
                t.faults += faults;
                t.msync_ok += ok;
                t.msync_err += err;
                t.poisoned += poisoned;
            }
        }
        let (bytes, acked_buffers) = self.verify(object, ledger, &format!("{n} ({how})"));
        t.bytes_verified += bytes;
        t.buffers_acked = acked_buffers;
    }

    /// Reopens the object in this process (no faults) and checks every buffer against the
    /// ledger. Returns the bytes checked and how many buffers the ledger has acknowledged.
    fn verify(&self, object: &str, ledger: &Path, cycle: &str) -> (u64, u64) {
        let acked = read_ledger(ledger);
        let store = (self.make)();
        let object = object.to_string();
        let label = self.label.to_string();
        let cycle = cycle.to_string();
        within(&format!("{label}: check after cycle {cycle}"), move || {
            let cache = Cache::new(CacheOptions::new(BUDGET * BS as u64).batch(4)).unwrap();
            let m = cache
                .map(
                    store,
                    &object,
                    MapOptions::new()
                        .writable(true)
                        .create(true)
                        .len(BUFFERS * BS as u64),
                )
                .unwrap_or_else(|e| panic!("{label}: reopen after cycle {cycle}: {e}"));
            let mut problems = Vec::new();
            for b in 0..BUFFERS {
                let g = m
                    .pin_shared(b)
                    .unwrap_or_else(|e| panic!("{label}: read buffer {b}: {e}"));
                let want = acked.get(&b).copied();
                match (check_record(b, &g), want) {
                    (Err(why), _) => problems.push(format!("buffer {b}: {why}")),
                    (Ok(None), Some(w)) => problems.push(format!(
                        "buffer {b}: zeros, though version {w} was acknowledged"
                    )),
                    (Ok(Some(v)), Some(w)) if v < w => problems.push(format!(
                        "buffer {b}: version {v} (written in cycle {}), though version {w} was \
                         acknowledged",
                        word(&g, 32)
                    )),
                    _ => {}
                }
            }
            drop(m);
            assert!(
                problems.is_empty(),
                "{label}: after the kill of cycle {cycle}, {} of {BUFFERS} buffers break the \
                 ledger:\n{}",
                problems.len(),
                problems.join("\n")
            );
            (BUFFERS * BS as u64, acked.len() as u64)
        })
    }
}

fn kill_name(k: Kill) -> &'static str {
    match k {
        Kill::Delay => "delay",
        Kill::MidMsync => "mid_msync",
        Kill::MidWriteBack => "mid_writeback",
        Kill::AfterPut => "after_put",
        Kill::SyncStart => "sync_start",
        Kill::SyncDone => "sync_done",
    }
}

/// The highest acknowledged version of each buffer. Lines are `buffer version\n`; a last line
/// the kill cut short is ignored (its msync was acknowledged, but the parent cannot know it)
/// and cut off the file, so that the next child's first line does not continue it.
pub fn read_ledger(path: &Path) -> HashMap<u64, u64> {
    let mut acked = HashMap::new();
    let Ok(text) = std::fs::read_to_string(path) else {
        return acked;
    };
    if !text.is_empty() && !text.ends_with('\n') {
        let keep = text.rfind('\n').map_or(0, |i| i + 1);
        let f = FsOpen::new().write(true).open(path).unwrap();
        f.set_len(keep as u64).unwrap();
        f.sync_all().unwrap();
    }
    for line in text.split_inclusive('\n') {
        let Some(line) = line.strip_suffix('\n') else {
            break;
        };
        let mut it = line.split(' ').map(|x| x.parse::<u64>());
        if let (Some(Ok(b)), Some(Ok(v))) = (it.next(), it.next()) {
            let e = acked.entry(b).or_insert(v);
            *e = (*e).max(v);
        }
    }
    acked
}

// ---------------------------------------------------------------------------------------------
// The child.

/// Counters the child reports on its stdout (`PROGRESS writes acked faults msync_ok msync_err
/// poisoned`), the last of which the parent keeps.
#[derive(Default)]
struct Counters {
    writes: AtomicU64,
    acked: AtomicU64,
    faults: AtomicU64,
    msync_ok: AtomicU64,
    msync_err: AtomicU64,
    poisoned: AtomicU64,
}

/// The poison protocol. A failed sync after eviction's write-backs may have lost any writer's
/// data, so the writer that meets [`Error::SyncPoisoned`] bumps the generation *before* it
/// clears the poison; a writer rewrites all of its buffers whenever the generation moved since
/// its last rewrite, and records an msync in the ledger only if the generation did not move
/// while that msync ran (an msync that began before the clear vouches for nothing rewritten).
struct Poison {
    generation: AtomicU64,
}

fn child(soak: &Soak<'_>) -> ! {
    let object = std::env::var("UCACHE_SOAK_OBJECT").unwrap();
    let ledger_path = PathBuf::from(std::env::var("UCACHE_SOAK_LEDGER").unwrap());
    let cycle = env_u64("UCACHE_SOAK_CYCLE").unwrap();
    let kill = KILLS[env_u64("UCACHE_SOAK_KILL").unwrap() as usize];
    let seed = env_u64("UCACHE_SOAK_CHILD_SEED").unwrap();
    let counters = Arc::new(Counters::default());

    let faults = Arc::new(FaultConfig::default());
    let mut rng = SmallRng::seed_from_u64(seed);
    let shared = Arc::new(KillShared {
        point: kill,
        armed: AtomicBool::new(false),
        // Which arrival kills: not always the first, so the child gets going.
        countdown: AtomicU64::new(rng.gen_range(1..(40 / soak.pace).max(2))),
        counters: counters.clone(),
    });
    let killer = Arc::new(KillStore {
        inner: Arc::new(FaultStore::with_config((soak.make)(), faults.clone())),
        shared: shared.clone(),
    });
    let cache = Cache::new(CacheOptions::new(BUDGET * BS as u64).batch(4)).unwrap();
    // Mapping (which may create the object) goes without faults; they start with the writers.
    let m = cache
        .map(
            killer,
            &object,
            MapOptions::new()
                .writable(true)
                .create(true)
                .len(BUFFERS * BS as u64),
        )
        .unwrap_or_else(|e| panic!("child: map {object}: {e}"));
    let m = Arc::new(m);
    let ledger = Arc::new(Mutex::new(
        FsOpen::new()
            .create(true)
            .append(true)
            .open(&ledger_path)
            .unwrap(),
    ));
    // Where each buffer stands: what the store has (checked by the parent), as the start.
    let mut start = vec![0u64; BUFFERS as usize];
    for (b, v) in start.iter_mut().enumerate() {
        let g = m.pin_shared(b as u64).unwrap();
        *v = check_record(b as u64, &g)
            .unwrap_or_else(|e| panic!("child: buffer {b} at start: {e}"))
            .unwrap_or(0);
    }
    let poison = Arc::new(Poison {
        generation: AtomicU64::new(0),
    });
    // Report progress every few milliseconds; the parent keeps the last report.
    {
        let c = counters.clone();
        std::thread::spawn(move || loop {
            println!(
                "PROGRESS {} {} {} {} {} {}",
                c.writes.load(Relaxed),
                c.acked.load(Relaxed),
                c.faults.load(Relaxed),
                c.msync_ok.load(Relaxed),
                c.msync_err.load(Relaxed),
                c.poisoned.load(Relaxed)
            );
            std::thread::sleep(Duration::from_millis(5));
        });
    }
    faults.lose_unsynced_on_failed_sync.store(true, Relaxed);
    {
        let f = faults.clone();
        let mut rng = SmallRng::seed_from_u64(seed ^ 0xC4A05);
        let pace = soak.pace;
        std::thread::spawn(move || chaos(&f, &mut rng, pace));
    }
    for w in 0..WRITERS {
        let m = m.clone();
        let ledger = ledger.clone();
        let poison = poison.clone();
        let counters = counters.clone();
        let mine: Vec<(u64, u64)> = (0..BUFFERS)
            .filter(|b| b % WRITERS == w)
            .map(|b| (b, start[b as usize]))
            .collect();
        let seed = seed.wrapping_add(w + 1);
        std::thread::spawn(move || {
            writer(&m, cycle, mine, &ledger, &poison, &counters, kill, seed)
        });
    }
    shared.armed.store(true, Relaxed);
    println!("READY");
    loop {
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// Flips faults on and off at random for the rest of the child's life.
fn chaos(f: &FaultConfig, rng: &mut SmallRng, pace: u64) -> ! {
    loop {
        std::thread::sleep(Duration::from_micros(rng.gen_range(500..15000) * pace));
        match rng.gen_range(0..10) {
            0 | 1 => {
                // The store refuses writes for a moment: write-backs fail, buffers stay dirty.
                f.fail_writes.store(true, Relaxed);
                std::thread::sleep(Duration::from_micros(rng.gen_range(100..3000)));
                f.fail_writes.store(false, Relaxed);
            }
            2 | 3 => f.fail_next_sync.store(true, Relaxed),
            4 => {
                f.fail_sync.store(true, Relaxed);
                std::thread::sleep(Duration::from_micros(rng.gen_range(100..2000)));
                f.fail_sync.store(false, Relaxed);
            }
            5 => f
                .write_latency_us
                .store([0, 0, 100, 500, 2000][rng.gen_range(0..5)], Relaxed),
            6 => f
                .read_latency_us
                .store([0, 0, 50, 300][rng.gen_range(0..4)], Relaxed),
            7 => f
                .fail_every_nth_read
                .store([0, 0, 0, 17, 61][rng.gen_range(0..5)], Relaxed),
            _ => {}
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn writer(
    m: &Mapping,
    cycle: u64,
    mut mine: Vec<(u64, u64)>,
    ledger: &Mutex<File>,
    poison: &Poison,
    c: &Counters,
    kill: Kill,
    seed: u64,
) {
    let mut rng = SmallRng::seed_from_u64(seed);
    // Versions written since this writer's last acknowledged msync (buffer slot, version).
    let mut since: HashMap<usize, u64> = HashMap::new();
    let mut rewritten_for = 0u64;
    let mut writes_to_sync = rng.gen_range(1..12);
    loop {
        let generation = poison.generation.load(Relaxed);
        if generation != rewritten_for {
            // Whatever eviction wrote back may be gone: write every buffer again.
            let mut all = true;
            for k in 0..mine.len() {
                all &= write_one(m, cycle, &mut mine, k, &mut since, c);
            }
            if !all {
                continue;
            }
            rewritten_for = generation;
        }
        let k = rng.gen_range(0..mine.len());
        if !write_one(m, cycle, &mut mine, k, &mut since, c) {
            continue;
        }
        writes_to_sync -= 1;
        if writes_to_sync > 0 {
            continue;
        }
        writes_to_sync = rng.gen_range(1..12);
        let whole = rng.gen_bool(0.7);
        if kill == Kill::MidMsync {
            println!("MSYNC");
        }
        let r = if whole {
            m.msync(0, m.len())
        } else {
            m.msync(mine[k].0 * BS as u64, BS as u64)
        };
        match r {
            Ok(()) => {
                c.msync_ok.fetch_add(1, Relaxed);
                if poison.generation.load(Relaxed) != rewritten_for {
                    continue;
                }
                let facts: Vec<(u64, u64)> = if whole {
                    since.drain().map(|(k, v)| (mine[k].0, v)).collect()
                } else {
                    since
                        .remove(&k)
                        .map(|v| (mine[k].0, v))
                        .into_iter()
                        .collect()
                };
                if facts.is_empty() {
                    continue;
                }
                let text: String = facts.iter().map(|(b, v)| format!("{b} {v}\n")).collect();
                let f = ledger.lock().unwrap();
                (&*f).write_all(text.as_bytes()).unwrap();
                f.sync_data().unwrap();
                c.acked.fetch_add(facts.len() as u64, Relaxed);
            }
            Err(Error::SyncPoisoned { .. }) => {
                c.poisoned.fetch_add(1, Relaxed);
                poison.generation.fetch_add(1, Relaxed);
                m.clear_sync_failure();
            }
            Err(_) => {
                // Failed: what it wrote is dirty again; the next msync retries it.
                c.msync_err.fetch_add(1, Relaxed);
            }
        }
    }
}

/// Writes the next version of `mine[k]` through an exclusive pin; false if the pin failed.
fn write_one(
    m: &Mapping,
    cycle: u64,
    mine: &mut [(u64, u64)],
    k: usize,
    since: &mut HashMap<usize, u64>,
    c: &Counters,
) -> bool {
    let (b, v) = mine[k];
    match m.pin_exclusive(b) {
        Ok(mut g) => {
            g.copy_from_slice(&record(b, v + 1, cycle));
            mine[k].1 = v + 1;
            since.insert(k, v + 1);
            c.writes.fetch_add(1, Relaxed);
            true
        }
        Err(_) => {
            // A failed load (an injected read fault) or no memory: try again later.
            std::thread::sleep(Duration::from_micros(200));
            false
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The in-store kill points.

/// Wraps the fault store: counts the faults that reach the cache and kills the process with
/// SIGKILL at its [`Kill`] point.
struct KillStore {
    inner: Arc<dyn Store>,
    shared: Arc<KillShared>,
}

struct KillObject {
    inner: Arc<dyn Object>,
    store: Arc<KillShared>,
}

/// What a [`KillObject`] shares with its store.
struct KillShared {
    point: Kill,
    /// Off until the writers start: mapping and the start-up reads are not killed.
    armed: AtomicBool,
    /// Arrivals at the point left until the one that kills.
    countdown: AtomicU64,
    counters: Arc<Counters>,
}

impl KillShared {
    /// Whether this arrival at `point` is the one that kills.
    fn due(&self, point: Kill) -> bool {
        self.point == point && self.armed.load(Relaxed) && self.countdown.fetch_sub(1, Relaxed) == 1
    }

    fn fault<T>(&self, r: &io::Result<T>) {
        if r.is_err() {
            self.counters.faults.fetch_add(1, Relaxed);
        }
    }
}

fn die() -> ! {
    // Tells the parent that the point was reached (else its fallback delay killed the child).
    println!("KILLPOINT");
    // SAFETY: kill(2) on this very process.
    unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
    unreachable!("SIGKILL returned");
}

impl Store for KillStore {
    fn open(&self, object: &str, options: OpenOptions) -> ucache::Result<Arc<dyn Object>> {
        Ok(Arc::new(KillObject {
            inner: self.inner.open(object, options)?,
            store: self.shared.clone(),
        }))
    }
}

impl Object for KillObject {
    forward_object!(inner: name, len, set_len);
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let r = self.inner.read_at(buf, offset);
        self.store.fault(&r);
        r
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        let s = &self.store;
        let r = self.inner.write_at(buf, offset);
        s.fault(&r);
        if r.is_ok() && s.due(Kill::AfterPut) {
            die();
        }
        r
    }
    fn sync(&self) -> io::Result<()> {
        let s = &self.store;
        if s.due(Kill::SyncStart) {
            die();
        }
        let r = self.inner.sync();
        s.fault(&r);
        if r.is_ok() && s.due(Kill::SyncDone) {
            die();
        }
        r
    }
    fn read_batch(&self, reqs: &mut [IoBuf], out: &mut Vec<io::Result<usize>>) {
        self.inner.read_batch(reqs, out);
        for r in out.iter() {
            self.store.fault(r);
        }
    }
    fn write_batch(&self, reqs: &[IoBuf], out: &mut Vec<io::Result<()>>) {
        let s = &self.store;
        if reqs.len() > 1 && s.due(Kill::MidWriteBack) {
            // Half of the batch reaches the store, then the process dies.
            let half = reqs.len() / 2;
            self.inner.write_batch(&reqs[..half], out);
            die();
        }
        self.inner.write_batch(reqs, out);
        for r in out.iter() {
            s.fault(r);
        }
        if out.iter().any(|r| r.is_ok()) && s.due(Kill::AfterPut) {
            die();
        }
    }
}
