//! The statistics say what their docs promise: every miss is in the latency histogram, a
//! cancelled eviction is a candidate that was pinned, dirty or vetoed, and the fault profile
//! samples every thread's faults at random.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use ucache::store::FaultStore;
use ucache::{Cache, CacheOptions, MapOptions};

mod common;
use common::{pattern_store as store, within};

const BS: usize = 4096;

fn histogram_total(s: &ucache::StatsSnapshot) -> u64 {
    s.miss_latency.iter().sum()
}

/// Every miss is one sample of the latency histogram, whether it was loaded alone, in a batch
/// (`ensure_cached`, one sample per buffer) or in a stream (`pin_each`, timed from its read's
/// issue).
#[test]
fn the_miss_latency_histogram_counts_every_miss() {
    within("loads", || {
        let cache = Cache::new(CacheOptions::new(64 * BS as u64).batch(2)).unwrap();
        let m = cache.map(store("o", 64), "o", MapOptions::new()).unwrap();

        // The misses that `load` made, and the latency samples it added.
        let count = |load: &dyn Fn()| {
            let before = cache.stats();
            load();
            let after = cache.stats();
            let samples = histogram_total(&after) - histogram_total(&before);
            (after.misses - before.misses, samples)
        };
        let batched = count(&|| m.ensure_cached(0, 16 * BS as u64).unwrap());
        assert_eq!(
            batched,
            (16, 16),
            "ensure_cached: (misses, latency samples)"
        );
        let streamed = count(&|| m.pin_each(16..32, 4, |_, _| {}).unwrap());
        assert_eq!(streamed, (16, 16), "pin_each: (misses, latency samples)");
    });
}

/// A miss's latency is what the thread that missed waited for, making room included: here the
/// only candidates are dirty, so the miss waits for a write-back that takes 100 ms, while the
/// read itself is a memory copy. Once, the histogram started its clock after the eviction.
#[test]
fn a_miss_that_must_make_room_counts_the_eviction_in_its_latency() {
    within("miss", || {
        let store = Arc::new(FaultStore::new(store("o", 16)));
        let cache = Cache::new(CacheOptions::new(4 * BS as u64).batch(4)).unwrap();
        let m = cache
            .map(store.clone(), "o", MapOptions::new().writable(true))
            .unwrap();
        for i in 0..4 {
            m.pin_exclusive(i).unwrap().mark_dirty();
        }
        store.config().write_latency_us.store(100_000, Relaxed);
        store.config().reset_counters();
        let before = cache.stats();
        drop(m.pin_shared(8).unwrap());
        let after = cache.stats();
        let mut delta = after.clone();
        for (d, b) in delta.miss_latency.iter_mut().zip(&before.miss_latency) {
            *d -= b;
        }
        assert_eq!(after.misses - before.misses, 1);
        // The write-back (and its injected delay) happened inside the miss: counted, not timed.
        assert_eq!(
            store.config().delays(),
            1,
            "one write-back batch, delayed once"
        );
        let delayed = Duration::from_micros(store.config().delayed_us());
        // What is checked is which events the sample covers: it must include the delay the
        // store counted during the miss. A one-sided bound that a slow machine cannot break
        // (a sleep lasts at least as long as asked; slowness only adds); the bug it guards
        // (the clock started after the eviction) gave a sample of microseconds.
        let took = delta.miss_latency_quantile(1.0).expect("one sample");
        assert!(
            took >= delayed,
            "the miss waited for a {delayed:?} write-back, its sample says under {took:?}"
        );
    });
}

/// Buffers that are not resident are no eviction candidates, so an explicit `evict` of a range
/// or an `unmap` that passes over them cancels no eviction.
#[test]
fn evicting_buffers_that_are_not_resident_cancels_nothing() {
    within("evict", || {
        let cache = Cache::new(
            CacheOptions::new(64 * BS as u64)
                .batch(2)
                .background_eviction(false),
        )
        .unwrap();
        let m = cache.map(store("o", 64), "o", MapOptions::new()).unwrap();
        drop(m.pin_shared(5).unwrap());

        let before = cache.stats();
        m.evict(0, m.len()).unwrap();
        let after = cache.stats();
        assert_eq!(after.evictions - before.evictions, 1);
        assert_eq!(
            after.eviction_cancels - before.eviction_cancels,
            0,
            "nothing was pinned, dirty or vetoed: explicit evict of 64 buffers, 1 resident"
        );

        drop(m.pin_shared(9).unwrap());
        let before = cache.stats();
        m.unmap().unwrap();
        let after = cache.stats();
        assert_eq!(after.evictions - before.evictions, 1);
        assert_eq!(
            after.eviction_cancels - before.eviction_cancels,
            0,
            "nothing was pinned, dirty or vetoed: unmap of 64 buffers, 1 resident"
        );
    });
}

/// The fault profile draws its one-in-16 sample at random on every thread, short-lived ones
/// included: with one seed for all, every thread timed the same positions of its own faults
/// (its 7th, 64th, ...), so 40 threads of 6 faults each timed none. At one in 16 at random,
/// all 240 untimed has a probability of 2e-7.
#[test]
fn fault_profile_samples_the_faults_of_short_lived_threads() {
    within("faults", || {
        const THREADS: usize = 40;
        const PER: usize = 6;
        let n = THREADS * PER;
        let cache =
            Cache::new(CacheOptions::new(2 * n as u64 * BS as u64).profile_faults(true)).unwrap();
        let m = cache
            .map(
                store("o", n),
                "o",
                MapOptions::new().transparent(true).readahead(false),
            )
            .unwrap();
        let base = m.as_ptr() as usize;
        for t in 0..THREADS {
            std::thread::spawn(move || {
                for k in 0..PER {
                    let i = t * PER + k;
                    // SAFETY: inside the mapping, which outlives these joined threads.
                    let b = unsafe { std::ptr::read_volatile((base + i * BS + 1) as *const u8) };
                    assert_eq!(b, i as u8);
                }
            })
            .join()
            .unwrap();
        }
        let st = cache.stats();
        assert_eq!(st.faults, n as u64, "{st:?}");
        assert!(
            st.faults_timed > 0,
            "{} faults, none timed: every thread draws the same sequence",
            st.faults
        );
    });
}
