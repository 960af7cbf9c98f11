//! A tour of the API: map a file larger than the cache budget, read and write it through pins,
//! use the explicit primitives, plug in an application veto, and read the statistics.
//!
//! Run: `cargo run --release -p ucache --example tour`

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use ucache::policy::{Buffers, Clock, Layout, Policy};
use ucache::store::FileStore;
use ucache::{Cache, CacheOptions, MapOptions};

/// CLOCK plus a veto: buffers at or above the "log horizon" may not be evicted yet, as a
/// database would veto pages whose log records are not yet durable (the paper's §5.3).
struct WalAware {
    clock: Clock,
    durable_up_to: Arc<AtomicU64>,
}

impl Policy for WalAware {
    fn name(&self) -> &str {
        "clock+wal"
    }
    fn attach(&mut self, layout: Layout) {
        self.clock.attach(layout);
    }
    fn choose_eviction_buffers(&self, b: &Buffers<'_>, want: usize, out: &mut Vec<u64>) {
        self.clock.choose_eviction_buffers(b, want, out)
    }
    fn is_evictable(&self, index: u64) -> bool {
        index < self.durable_up_to.load(Ordering::Acquire)
    }
    fn on_insert(&self, index: u64) {
        self.clock.on_insert(index)
    }
    fn on_evict(&self, index: u64) {
        self.clock.on_evict(index)
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    const BS: usize = 4096;
    let dir = std::env::temp_dir().join(format!("ucache-tour-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("table.dat");

    // A 64 MiB budget over a 256 MiB file: 4x more data than memory.
    let cache = Cache::new(CacheOptions::new(64 << 20))?;
    let durable = Arc::new(AtomicU64::new(u64::MAX));
    let policy = WalAware {
        clock: Clock::new(),
        durable_up_to: durable.clone(),
    };
    let table = cache.map(
        Arc::new(FileStore::new()),
        path.to_str().unwrap(),
        MapOptions::new()
            .writable(true)
            .create(true)
            .len(256 << 20)
            .buffer_size(BS)
            .policy(Box::new(policy)),
    )?;

    // Write every buffer through an exclusive pin; eviction writes dirty buffers back.
    for i in 0..table.buffers() {
        let mut page = table.pin_exclusive(i)?;
        page[..8].copy_from_slice(&i.to_le_bytes());
    }
    // Read them back with shared pins and with optimistic (unpinned, validated) reads.
    for i in (0..table.buffers()).step_by(7) {
        let page = table.pin_shared(i)?;
        assert_eq!(u64::from_le_bytes(page[..8].try_into()?), i);
        drop(page);
        let v = table.read_optimistic(i, |view| view.read_u64(0))?;
        assert_eq!(v, i);
    }

    // Explicit primitives over byte ranges.
    table.prefetch(0, 1 << 20)?; // background, many reads in flight
    table.ensure_cached(1 << 20, 1 << 20)?; // one batch, returns when resident
                                            // A stream: each buffer is visited the moment its own read lands, 32 reads in flight.
    let mut sum = 0;
    let scattered: Vec<u64> = (0..table.buffers()).step_by(13).collect();
    table.pin_each(scattered.iter().copied(), 32, |i, b| {
        assert_eq!(u64::from_le_bytes(b[..8].try_into().unwrap()), i);
        sum += i;
    })?;
    assert_eq!(sum, scattered.iter().sum::<u64>());
    table.msync(0, table.len())?; // durable when it returns
    table.evict(0, 2 << 20)?; // drop a range now

    // Errors are typed.
    match table.pin_shared(table.buffers()) {
        Err(ucache::Error::OutOfRange { .. }) => {}
        other => panic!("expected OutOfRange, got {other:?}"),
    }

    let s = cache.stats();
    println!(
        "{} buffers, policy {}: {} hits, {} misses, {} evictions, {} write-backs, p99 miss {:?}",
        table.buffers(),
        table.policy_name(),
        s.hits,
        s.misses,
        s.evictions,
        s.writebacks,
        s.miss_latency_quantile(0.99)
    );
    table.unmap()?;
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
