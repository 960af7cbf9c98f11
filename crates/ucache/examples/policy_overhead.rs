//! What the policy machinery costs on the miss path: the built-in CLOCK with no optional hooks
//! against the same CLOCK wrapped in a policy that takes every hook (on_miss, admit, on_hit,
//! on_insert, on_evict, is_evictable), each doing a little work. Both evict exactly the same
//! buffers, so the difference is the cost of calling hooks through the guarded dispatch.
//!
//! Run single-threaded under callgrind, which counts instructions and so is immune to the
//! noise of a shared machine:
//!
//! ```sh
//! cargo build --release -p ucache --example policy_overhead
//! valgrind --tool=callgrind --callgrind-out-file=/dev/null target/release/examples/policy_overhead builtin
//! valgrind --tool=callgrind --callgrind-out-file=/dev/null target/release/examples/policy_overhead hooked
//! ```
//!
//! or without valgrind for wall-clock throughput (noisy on a shared machine).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use ucache::policy::{Buffers, Clock, Layout, Policy};
use ucache::store::MemoryStore;
use ucache::{Cache, CacheOptions, MapOptions};

const BS: usize = 4096;
const BUFFERS: u64 = 16_384;
const BUDGET: u64 = 1_024;
const OPS: u64 = 200_000;

/// CLOCK with every optional hook switched on, each counting its calls.
struct Hooked {
    clock: Clock,
    calls: AtomicU64,
}

impl Policy for Hooked {
    fn name(&self) -> &str {
        "clock+hooks"
    }
    fn attach(&mut self, layout: Layout) {
        self.clock.attach(layout);
    }
    fn choose_eviction_buffers(&self, buffers: &Buffers<'_>, want: usize, out: &mut Vec<u64>) {
        self.clock.choose_eviction_buffers(buffers, want, out);
    }
    fn is_evictable(&self, index: u64) -> bool {
        self.calls.fetch_add(index & 1, Ordering::Relaxed);
        true
    }
    fn admit(&self, index: u64) -> bool {
        self.calls.fetch_add(index & 1, Ordering::Relaxed);
        true
    }
    fn wants_hits(&self) -> bool {
        true
    }
    fn on_hit(&self, index: u64) {
        self.calls.fetch_add(index & 1, Ordering::Relaxed);
    }
    fn on_miss(&self, index: u64) {
        self.calls.fetch_add(index & 1, Ordering::Relaxed);
    }
    fn on_insert(&self, index: u64) {
        self.clock.on_insert(index);
        self.calls.fetch_add(1, Ordering::Relaxed);
    }
    fn on_evict(&self, index: u64) {
        self.clock.on_evict(index);
        self.calls.fetch_add(1, Ordering::Relaxed);
    }
}

fn main() {
    let mode = std::env::args().nth(1).unwrap_or_else(|| "builtin".into());
    let policy: Box<dyn Policy> = match mode.as_str() {
        "builtin" => Box::new(Clock::new()),
        "hooked" => Box::new(Hooked {
            clock: Clock::new(),
            calls: AtomicU64::new(0),
        }),
        other => panic!("mode {other}: builtin or hooked"),
    };
    let store = MemoryStore::new();
    store.insert("db", vec![7u8; BUFFERS as usize * BS]);
    let cache = Cache::new(CacheOptions::new(BUDGET * BS as u64)).unwrap();
    let m = cache
        .map(Arc::new(store), "db", MapOptions::new().policy(policy))
        .unwrap();
    let mut rng = SmallRng::seed_from_u64(1);
    let t = Instant::now();
    let mut sum = 0u64;
    for _ in 0..OPS {
        let g = m.pin_shared(rng.gen_range(0..BUFFERS)).unwrap();
        sum += g[0] as u64;
    }
    let secs = t.elapsed().as_secs_f64();
    let st = cache.stats();
    assert_eq!(sum, 7 * OPS);
    println!(
        "{mode}: {OPS} pins, {} misses, {} evictions, {:.0} k ops/s",
        st.misses,
        st.evictions,
        OPS as f64 / secs / 1e3
    );
}
