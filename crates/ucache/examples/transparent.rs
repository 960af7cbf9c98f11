//! Transparent mode: a mapping used with plain loads and stores, like `mmap`, under a budget a
//! quarter of the data. Run with `cargo run --release -p ucache --example transparent`.
//!
//! The program sums a column of u64s by plain loads (misses fault into ucache, which reads the
//! buffer and retries the load), increments every 1000th value by plain stores (the first store
//! to a clean buffer marks it dirty), then makes the changes durable with `msync` and checks
//! them through a second, explicit mapping.

use std::sync::Arc;

use ucache::store::FileStore;
use ucache::{Cache, CacheOptions, MapOptions};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("column.bin");
    let n: usize = 4 << 20; // 32 MiB of u64s
    let data: Vec<u8> = (0..n as u64).flat_map(|v| v.to_le_bytes()).collect();
    std::fs::write(&path, &data)?;
    let path = path.to_str().ok_or("path is not UTF-8")?;

    let cache = Cache::new(CacheOptions::new(8 << 20))?;
    let m = cache.map(
        Arc::new(FileStore::direct()),
        path,
        MapOptions::new().transparent(true).writable(true),
    )?;
    // SAFETY: the mapping is valid for its length while `m` lives, and this program is its
    // only user; plain loads and stores are what a transparent mapping is for.
    let column: &mut [u64] =
        unsafe { std::slice::from_raw_parts_mut(m.as_mut_ptr() as *mut u64, m.len() as usize / 8) };

    let sum: u64 = column.iter().sum();
    assert_eq!(sum, (n as u64) * (n as u64 - 1) / 2);
    for v in column.iter_mut().step_by(1000) {
        *v += 1;
    }
    m.msync(0, m.len())?;
    let st = cache.stats();
    println!(
        "sum {sum}; {} faults ({} first writes), {} misses, {} prefetched by readahead, \
         {} evictions, {} write-backs; resident {} of {} bytes",
        st.faults,
        st.write_faults,
        st.misses,
        st.prefetches,
        st.evictions,
        st.writebacks,
        cache.used(),
        m.len()
    );
    drop(m);

    // The stores reached the file: read them back through an explicit mapping.
    let check = Cache::new(CacheOptions::new(1 << 20))?;
    let e = check.map(Arc::new(FileStore::direct()), path, MapOptions::new())?;
    let g = e.pin_shared(0)?;
    assert_eq!(u64::from_le_bytes(g[..8].try_into()?), 1);
    println!("write-back checked through a second cache");
    Ok(())
}
