//! Every registered policy under a real cache: several threads, skewed accesses, every byte
//! checked; and admission control on the live read path.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use ucache::policy::{policy_by_name, Buffers, Clock, Hint, Layout, Policy, POLICY_NAMES};
use ucache::store::MemoryStore;
use ucache::Phase;
use ucache::{Cache, CacheOptions, MapOptions};

const BS: usize = 4096;
const BUDGET: u64 = 48;
const BUFFERS: u64 = 256;

fn byte(k: usize) -> u8 {
    ((k / BS) as u8).wrapping_mul(31) ^ (k % 251) as u8
}

fn store() -> Arc<MemoryStore> {
    let s = MemoryStore::new();
    s.insert("db", (0..BUFFERS as usize * BS).map(byte).collect());
    Arc::new(s)
}

#[test]
fn every_policy_serves_correct_bytes_under_threads() {
    // Every policy, and the configurations that build another policy or other rules.
    let configured = ["clock:libcachesim", "s3fifo:libcachesim", "lfu:exact"];
    for &name in POLICY_NAMES.iter().chain(&configured) {
        let cache = Cache::new(CacheOptions::new(BUDGET * BS as u64).batch(8)).unwrap();
        let policy = policy_by_name(name).unwrap();
        let m = cache
            .map(store(), "db", MapOptions::new().policy(policy))
            .unwrap();
        assert_eq!(m.policy_name(), name.split(':').next().unwrap());
        std::thread::scope(|s| {
            for t in 0..4u64 {
                let m = &m;
                s.spawn(move || {
                    let mut rng = SmallRng::seed_from_u64(t);
                    let mut buf = vec![0u8; 3 * BS];
                    for n in 0..3000 {
                        // Skewed: half the accesses go to an eighth of the buffers.
                        let i = if rng.gen_bool(0.5) {
                            rng.gen_range(0..BUFFERS / 8)
                        } else {
                            rng.gen_range(0..BUFFERS)
                        };
                        if n % 7 == 0 {
                            let off = i * BS as u64 + rng.gen_range(0..BS as u64);
                            let len = (buf.len() as u64).min(BUFFERS * BS as u64 - off) as usize;
                            m.read(off, &mut buf[..len]).unwrap();
                            for (k, b) in buf[..len].iter().enumerate() {
                                assert_eq!(*b, byte(off as usize + k), "{name} read at {off}");
                            }
                        } else {
                            let g = m.pin_shared(i).unwrap();
                            let at = rng.gen_range(0..BS);
                            assert_eq!(g[at], byte(i as usize * BS + at), "{name} buffer {i}");
                        }
                    }
                });
            }
        });
        assert!(m.resident() <= BUDGET, "{name}: {} resident", m.resident());
        let st = cache.stats();
        assert!(st.evictions > 0 && st.hits > 0, "{name}: {st:?}");
        assert_eq!(
            m.policy_name(),
            name.split(':').next().unwrap(),
            "{name} was switched off (it panicked)"
        );
    }
}

/// CLOCK that refuses reads made under [`Hint::BACKGROUND`], like cache_ext's filter of
/// compaction threads.
struct NoBackground {
    clock: Clock,
    asked: AtomicU64,
}

impl Policy for NoBackground {
    fn name(&self) -> &str {
        "no-background"
    }
    fn attach(&mut self, layout: Layout) {
        self.clock.attach(layout);
    }
    fn choose_eviction_buffers(&self, b: &Buffers<'_>, want: usize, out: &mut Vec<u64>) {
        self.clock.choose_eviction_buffers(b, want, out);
    }
    fn admit(&self, _: u64) -> bool {
        self.asked.fetch_add(1, Ordering::Relaxed);
        Hint::current() != Hint::BACKGROUND
    }
    fn on_insert(&self, index: u64) {
        self.clock.on_insert(index);
    }
    fn on_evict(&self, index: u64) {
        self.clock.on_evict(index);
    }
}

#[test]
fn refused_admission_reads_around_the_cache() {
    let cache = Cache::new(CacheOptions::new(BUDGET * BS as u64).batch(8)).unwrap();
    let policy = NoBackground {
        clock: Clock::new(),
        asked: AtomicU64::new(0),
    };
    let m = cache
        .map(store(), "db", MapOptions::new().policy(Box::new(policy)))
        .unwrap();
    // Buffer 5 is cached by an ordinary read; 6..9 are not.
    let mut one = vec![0u8; 10];
    m.read(5 * BS as u64 + 100, &mut one).unwrap();
    assert_eq!(m.resident(), 1);

    // A background pass over 5..9 (starting mid-buffer, ending mid-buffer): right bytes, and
    // only the buffer that was already cached is used; nothing new enters.
    let off = 5 * BS as u64 + 17;
    let mut buf = vec![0u8; 4 * BS];
    Hint::BACKGROUND.scoped(|| m.read(off, &mut buf)).unwrap();
    for (k, b) in buf.iter().enumerate() {
        assert_eq!(*b, byte(off as usize + k), "byte {k}");
    }
    assert_eq!(m.resident(), 1);
    for i in 6..=9 {
        assert_eq!(m.state(i).unwrap().phase(), Phase::Evicted, "buffer {i}");
    }
    let st = cache.stats();
    assert_eq!(st.bypasses, 4);
    assert_eq!(st.misses, 1);

    // A background prefetch is dropped too; a pin always admits.
    Hint::BACKGROUND
        .scoped(|| m.prefetch(20 * BS as u64, 4 * BS as u64))
        .unwrap();
    assert_eq!(cache.stats().bypasses, 8);
    Hint::BACKGROUND.scoped(|| {
        let g = m.pin_shared(6).unwrap();
        assert_eq!(g[0], byte(6 * BS));
    });
    assert_eq!(m.resident(), 2);

    // The same pass in the foreground caches what it reads.
    m.read(off, &mut buf).unwrap();
    assert_eq!(m.resident(), 5);
}

#[test]
fn read_checks_its_range() {
    let cache = Cache::new(CacheOptions::new(BUDGET * BS as u64).batch(8)).unwrap();
    let m = cache.map(store(), "db", MapOptions::new()).unwrap();
    let mut buf = vec![0u8; 2];
    assert!(m.read(BUFFERS * BS as u64 - 1, &mut buf).is_err());
    m.read(BUFFERS * BS as u64 - 2, &mut buf).unwrap();
    assert_eq!(
        buf,
        [
            byte(BUFFERS as usize * BS - 2),
            byte(BUFFERS as usize * BS - 1)
        ]
    );
    m.read(0, &mut []).unwrap();
}
