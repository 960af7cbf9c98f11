//! Serving many concurrent requests from one tokio thread over an S3-backed mapping, and the
//! measurement behind docs/results/2026-11-26-async: how many S3 misses one runtime thread
//! keeps in flight with the async pins, against the blocking pins on many threads.
//!
//! Each request pins a random buffer of an object much larger than the cache (so nearly every
//! request is a miss: a ranged GET) and checks its bytes. `async` runs the requests as tasks
//! on one `current_thread` runtime, `--tasks` of them at once; `blocking` runs them on
//! `--threads` OS threads with the blocking pins. Both share the store's own runtime (two
//! threads by default) for the HTTP work, so the difference is what the cache's caller needs.
//!
//! ```text
//! eval "$(scripts/s3-server.sh start /tmp/s3)"   # or: . /tmp/s3/env
//! cargo run --release -p ucache-object --example async_s3 -- \
//!     --mode async --tasks 256 --requests 20000
//! cargo run --release -p ucache-object --example async_s3 -- --compare --rounds 3
//! ```
//!
//! `--store-threads` sets the store's runtime threads (default 2). `--compare` runs async with 64 and 256 tasks and blocking with 32 threads, interleaved,
//! `--rounds` times, and prints each run and the median of each configuration.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use ucache::store::{Object, OpenOptions, Store};
use ucache::{Cache, CacheOptions, MapOptions, Mapping};
use ucache_object::{S3Config, S3Object, S3Store};

const BS: usize = 16 << 10;

struct Args {
    mode: String,
    tasks: u64,
    threads: u64,
    requests: u64,
    object_mib: u64,
    compare: bool,
    rounds: usize,
    store_threads: usize,
}

fn args() -> Args {
    let mut a = Args {
        mode: "async".into(),
        tasks: 256,
        threads: 32,
        requests: 20_000,
        object_mib: 256,
        compare: false,
        rounds: 3,
        store_threads: 2,
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let mut v = || it.next().unwrap_or_else(|| panic!("{k} needs a value"));
        match k.as_str() {
            "--mode" => a.mode = v(),
            "--tasks" => a.tasks = v().parse().unwrap(),
            "--threads" => a.threads = v().parse().unwrap(),
            "--requests" => a.requests = v().parse().unwrap(),
            "--object-mib" => a.object_mib = v().parse().unwrap(),
            "--rounds" => a.rounds = v().parse().unwrap(),
            "--store-threads" => a.store_threads = v().parse().unwrap(),
            "--compare" => a.compare = true,
            _ => panic!("unknown flag {k} (see the example's doc comment)"),
        }
    }
    a
}

/// The u64 at word `w` of the object: every request checks the bytes it got.
fn word(w: u64) -> u64 {
    w.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xA5
}

fn check(i: u64, b: &[u8]) {
    for (k, c) in b.chunks_exact(8).enumerate() {
        let w = i * (BS / 8) as u64 + k as u64;
        assert_eq!(
            u64::from_le_bytes(c.try_into().unwrap()),
            word(w),
            "buffer {i}"
        );
    }
}

/// Requests in flight now and at most: a request counts from its pin's call to its return.
#[derive(Default)]
struct InFlight {
    now: AtomicU64,
    peak: AtomicU64,
}

impl InFlight {
    fn enter(&self) {
        let n = self.now.fetch_add(1, Ordering::Relaxed) + 1;
        self.peak.fetch_max(n, Ordering::Relaxed);
    }
    fn leave(&self) {
        self.now.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The buffer request `r` of worker `w` asks for.
fn pick(w: u64, r: u64, buffers: u64) -> u64 {
    let mut x = (w << 32 | r).wrapping_mul(0x2545_F491_4F6C_DD1D) | 1;
    x ^= x >> 29;
    x.wrapping_mul(0xBF58_476D_1CE4_E5B9) % buffers
}

struct Run {
    label: String,
    misses_per_s: f64,
    /// GETs in flight at once, at most (the object's own count).
    peak_gets: u64,
    /// Requests (pins) in flight at once, at most.
    peak: u64,
    miss_ratio: f64,
}

/// The one object the example maps, so that its GET counters can be read.
struct One(Arc<S3Object>);

impl Store for One {
    fn open(&self, _: &str, _: OpenOptions) -> ucache::Result<Arc<dyn Object>> {
        Ok(self.0.clone())
    }
}

/// `workers` async tasks on one current_thread runtime, serving `requests` in all.
fn run_async(map: &Arc<Mapping>, workers: u64, requests: u64) -> (f64, u64) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let inflight = Arc::new(InFlight::default());
    let t0 = Instant::now();
    rt.block_on(async {
        let mut handles = Vec::new();
        for w in 0..workers {
            let (map, inflight) = (map.clone(), inflight.clone());
            handles.push(tokio::spawn(async move {
                for r in (w..requests).step_by(workers as usize) {
                    let i = pick(w, r, map.buffers());
                    inflight.enter();
                    {
                        let g = map.pin_shared_async(i).await.unwrap();
                        check(i, &g);
                    }
                    inflight.leave();
                }
            }));
        }
        for h in handles {
            h.await.unwrap();
        }
    });
    (
        t0.elapsed().as_secs_f64(),
        inflight.peak.load(Ordering::Relaxed),
    )
}

/// `workers` OS threads with the blocking pins, serving `requests` in all.
fn run_blocking(map: &Arc<Mapping>, workers: u64, requests: u64) -> (f64, u64) {
    let inflight = InFlight::default();
    let t0 = Instant::now();
    std::thread::scope(|s| {
        for w in 0..workers {
            let (map, inflight) = (map, &inflight);
            s.spawn(move || {
                for r in (w..requests).step_by(workers as usize) {
                    let i = pick(w, r, map.buffers());
                    inflight.enter();
                    check(i, &map.pin_shared(i).unwrap());
                    inflight.leave();
                }
            });
        }
    });
    (
        t0.elapsed().as_secs_f64(),
        inflight.peak.load(Ordering::Relaxed),
    )
}

fn one(map: &Arc<Mapping>, obj: &S3Object, mode: &str, workers: u64, requests: u64) -> Run {
    map.evict(0, map.len()).unwrap();
    obj.reset_peak_gets_in_flight();
    let before = map.stats();
    let (secs, peak) = match mode {
        "async" => run_async(map, workers, requests),
        "blocking" => run_blocking(map, workers, requests),
        m => panic!("--mode {m}: async or blocking"),
    };
    let s = map.stats();
    let misses = s.misses - before.misses;
    let label = match mode {
        "async" => format!("async, 1 runtime thread, {workers} tasks"),
        _ => format!("blocking, {workers} threads"),
    };
    let r = Run {
        label,
        misses_per_s: misses as f64 / secs,
        peak_gets: obj.peak_gets_in_flight(),
        peak,
        miss_ratio: misses as f64 / requests as f64,
    };
    println!(
        "{:<40} {:>6.0} misses/s  GETs in flight {:>4} (requests {:>4})  miss ratio {:.3}  ({requests} requests, {secs:.2} s)",
        r.label, r.misses_per_s, r.peak_gets, r.peak, r.miss_ratio
    );
    r
}

fn main() -> ucache::Result<()> {
    let a = args();
    let ep = std::env::var("UCACHE_S3_ENDPOINT")
        .expect("UCACHE_S3_ENDPOINT is unset: start a server with scripts/s3-server.sh");
    let bucket = std::env::var("UCACHE_S3_BUCKET").unwrap_or_else(|_| "ucache-test".into());
    let key = format!("async-example-{}mib", a.object_mib);
    let store = S3Store::new(
        S3Config::from_env(&format!("s3://{bucket}/"))?
            .endpoint(&ep)
            .runtime_threads(a.store_threads),
    )?;
    let len = a.object_mib << 20;
    let data: Vec<u8> = (0..len / 8).flat_map(|w| word(w).to_le_bytes()).collect();
    store.put(&key, data)?;
    // A 4 MiB cache over the object: nearly every request misses.
    let cache = Cache::new(CacheOptions::new(4 << 20))?;
    let obj = store.open_object(&key)?;
    let map = Arc::new(cache.map(
        Arc::new(One(obj.clone())),
        &key,
        MapOptions::new().buffer_size(BS),
    )?);
    if !a.compare {
        let w = if a.mode == "async" {
            a.tasks
        } else {
            a.threads
        };
        one(&map, &obj, &a.mode, w, a.requests);
        return Ok(());
    }
    let configs = [("async", 64), ("async", 256), ("blocking", 32)];
    let mut runs: Vec<Vec<Run>> = configs.iter().map(|_| Vec::new()).collect();
    for _ in 0..a.rounds {
        for (k, &(mode, w)) in configs.iter().enumerate() {
            runs[k].push(one(&map, &obj, mode, w, a.requests));
        }
    }
    println!("\nmedians of {} rounds:", a.rounds);
    let median = |v: &mut Vec<f64>| {
        v.sort_by(|x, y| x.partial_cmp(y).unwrap());
        v[v.len() / 2]
    };
    let mut med = Vec::new();
    for r in &runs {
        let mps = median(&mut r.iter().map(|x| x.misses_per_s).collect());
        let peak = median(&mut r.iter().map(|x| x.peak_gets as f64).collect());
        println!(
            "{:<40} {mps:>6.0} misses/s  GETs in flight {peak:>4.0}",
            r[0].label
        );
        med.push((mps, peak));
    }
    let (blocking_mps, blocking_peak) = med[2];
    for (k, r) in runs.iter().enumerate().take(2) {
        println!(
            "{}: {:.2}x the misses/s and {:.2}x the GETs in flight of blocking with 32 threads",
            r[0].label,
            med[k].0 / blocking_mps,
            med[k].1 / blocking_peak
        );
    }
    Ok(())
}
