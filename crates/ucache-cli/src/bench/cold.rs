//! `ucache coldread`: one cold sequential pass over a file, through `std::fs` and through
//! ucache's batched primitives, with the page cache dropped before every pass.
//!
//! The time-based workloads of `ucache bench` measure a steady state; a cold read is a fixed
//! amount of work whose cost is its first IO, so it gets its own command. Each rep runs every
//! system once, in turn (interleaved, so drift on a shared machine hits them all alike), each
//! after `echo 3 > /proc/sys/vm/drop_caches`; every word read is checked against its offset.
//! Figures are reported as each system's throughput over the `std-fs` pass of the same rep.

use std::fs::OpenOptions;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use ucache::store::{FileStore, Store, UringOptions, UringStore};
use ucache::{Cache, CacheOptions, MapOptions, Mapping, Placement};

use super::datafile::{self, word_ok};
use crate::size::{format_size, parse_size};

#[derive(clap::Args, Clone, Debug)]
pub struct ColdArgs {
    /// Size of the data file.
    #[arg(long, default_value = "1GiB", value_parser = parse_size)]
    pub data: u64,
    /// ucache's memory budget (the file may be larger: the pass evicts as it goes).
    #[arg(long, default_value = "256MiB", value_parser = parse_size)]
    pub memory: u64,
    /// Bytes per `read` call of the std-fs and read systems.
    #[arg(long, default_value = "1MiB", value_parser = parse_size)]
    pub piece: u64,
    /// Repetitions; each runs every system once, in turn.
    #[arg(long, default_value_t = 3)]
    pub reps: usize,
    /// Systems, comma-separated: std-fs (the baseline, always run), read:STORE (Mapping::read
    /// in pieces; a long run reads past the cache, `MapOptions::scan_bypass`), read-cached:STORE
    /// (the same with `scan_bypass(false)`: every piece through the cache), read-no-ra:STORE
    /// (with `readahead(false)`: no streams, each piece waits for its own reads), pin-each:STORE (pin_each over every buffer, depth 64), ensure-pins:STORE
    /// (ensure_cached of a piece, then a pin of each of its buffers), pins:STORE (a plain
    /// loop of pin_shared, relying on readahead); stores: file, direct, uring.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "read:file,read:uring,pin-each:file,ensure-pins:file,pins:file,pins:uring"
    )]
    pub systems: Vec<String>,
    /// Leave the kernel's page cache as it is instead of dropping it before each pass: with
    /// the file in the page cache, a pass measures the CPU cost of each path without the
    /// disk's swings (buffered stores only; `O_DIRECT` ones still read the disk).
    #[arg(long)]
    pub keep_page_cache: bool,
    /// Map with `Placement::Pool` (frames reused from eviction to the next load, no fresh
    /// page per miss) instead of in place.
    #[arg(long)]
    pub pool: bool,
    /// Read the pieces into 4 KiB-aligned memory (every system), so that a scan read past the
    /// cache lands in it directly on `O_DIRECT` stores too; by default the pieces live in a
    /// plain `Vec`, as most programs' do, which `O_DIRECT` stores read into through staging.
    #[arg(long)]
    pub aligned: bool,
    /// Data file (default: `/var/tmp/ucache-cold-<data>.dat`); on a real disk, not tmpfs.
    #[arg(long)]
    pub file: Option<PathBuf>,
}

/// How one system reads the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Via {
    StdFs,
    Read,
    ReadCached,
    ReadNoReadahead,
    PinEach,
    EnsurePins,
    Pins,
}

fn parse_system(s: &str) -> Result<(Via, &str), String> {
    let (via, store) = s.split_once(':').unwrap_or((s, "file"));
    let via = match via {
        "std-fs" => Via::StdFs,
        "read" => Via::Read,
        "read-cached" => Via::ReadCached,
        "read-no-ra" => Via::ReadNoReadahead,
        "pin-each" => Via::PinEach,
        "ensure-pins" => Via::EnsurePins,
        "pins" => Via::Pins,
        other => return Err(format!("unknown system '{other}' in '{s}'")),
    };
    if !matches!(store, "file" | "direct" | "uring") {
        return Err(format!(
            "unknown store '{store}' in '{s}' (file, direct, uring)"
        ));
    }
    Ok((via, store))
}

fn store_of(name: &str) -> Result<Arc<dyn Store>, String> {
    Ok(match name {
        "file" => Arc::new(FileStore::new()),
        "direct" => Arc::new(FileStore::direct()),
        _ => Arc::new(UringStore::new(UringOptions::default()).map_err(|e| e.to_string())?),
    })
}

fn drop_caches() -> Result<(), String> {
    OpenOptions::new()
        .write(true)
        .open("/proc/sys/vm/drop_caches")
        .and_then(|mut f| f.write_all(b"3"))
        .map_err(|e| format!("cannot drop the page cache (run as root): {e}"))
}

/// Checks one word per 4 KiB page of `bytes`, which hold the file from byte `base`.
fn check(bytes: &[u8], base: u64, bad: &mut u64) {
    for at in (0..bytes.len().saturating_sub(7)).step_by(4096) {
        if !word_ok(bytes, base, at) {
            *bad += 1;
        }
    }
}

/// One cold pass; returns (seconds, words that did not check, ucache's store reads and
/// overlapped ones, bytes read past the cache).
fn pass(
    args: &ColdArgs,
    path: &std::path::Path,
    via: Via,
    store: &str,
) -> Result<(f64, u64, u64, u64, u64), String> {
    let piece = args.piece.max(4096) as usize;
    let mut bad = 0;
    let mut mem = vec![0u8; piece + 4096];
    let skip = if args.aligned {
        mem.as_ptr().align_offset(4096)
    } else {
        0
    };
    let buf = &mut mem[skip..skip + piece];
    if via == Via::StdFs {
        let t0 = Instant::now();
        let mut f = std::fs::File::open(path).map_err(|e| e.to_string())?;
        let mut off = 0u64;
        loop {
            let n = f.read(buf).map_err(|e| e.to_string())?;
            if n == 0 {
                break;
            }
            check(&buf[..n], off, &mut bad);
            off += n as u64;
        }
        return Ok((t0.elapsed().as_secs_f64(), bad, 0, 0, 0));
    }
    let cache = Cache::new(CacheOptions::new(args.memory)).map_err(|e| e.to_string())?;
    let m: Mapping = cache
        .map(
            store_of(store)?,
            path.to_str().unwrap(),
            MapOptions::new()
                .readahead(via != Via::ReadNoReadahead)
                .scan_bypass(via == Via::Read)
                .placement(if args.pool {
                    Placement::Pool
                } else {
                    Placement::InPlace
                }),
        )
        .map_err(|e| e.to_string())?;
    let len = args.data;
    let bs = m.buffer_size() as u64;
    let t0 = Instant::now();
    match via {
        Via::Read | Via::ReadCached | Via::ReadNoReadahead => {
            let mut off = 0;
            while off < len {
                let n = piece.min((len - off) as usize);
                m.read(off, &mut buf[..n]).map_err(|e| e.to_string())?;
                check(&buf[..n], off, &mut bad);
                off += n as u64;
            }
        }
        Via::PinEach => {
            m.pin_each(0..m.buffers(), 64, |i, b| check(b, i * bs, &mut bad))
                .map_err(|e| e.to_string())?;
        }
        Via::EnsurePins => {
            let per = (piece as u64 / bs).max(1);
            let mut first = 0;
            while first < m.buffers() {
                let n = per.min(m.buffers() - first);
                m.ensure_cached(first * bs, n * bs)
                    .map_err(|e| e.to_string())?;
                for i in first..first + n {
                    let g = m.pin_shared(i).map_err(|e| e.to_string())?;
                    check(&g, i * bs, &mut bad);
                }
                first += n;
            }
        }
        Via::Pins => {
            for i in 0..m.buffers() {
                let g = m.pin_shared(i).map_err(|e| e.to_string())?;
                check(&g, i * bs, &mut bad);
            }
        }
        Via::StdFs => unreachable!(),
    }
    let secs = t0.elapsed().as_secs_f64();
    let s = m.stats();
    Ok((
        secs,
        bad,
        s.store_reads,
        s.store_reads_overlapped,
        s.bytes_read_past_cache,
    ))
}

pub fn run(args: &ColdArgs) -> Result<u64, String> {
    let path = args
        .file
        .clone()
        .unwrap_or_else(|| format!("/var/tmp/ucache-cold-{}.dat", format_size(args.data)).into());
    // Every argument is checked before the data file is written, so a typo costs nothing.
    if args.reps == 0 {
        return Err("--reps must be at least 1".into());
    }
    if args.data == 0 || args.memory == 0 {
        return Err("--data and --memory must be more than 0 bytes".into());
    }
    let mut systems = vec![(Via::StdFs, "file".to_string())];
    for s in &args.systems {
        let (via, store) = parse_system(s)?;
        if via != Via::StdFs {
            systems.push((via, store.to_string()));
        }
    }
    datafile::ensure(&path, args.data, |_| {}).map_err(|e| e.to_string())?;
    println!(
        "{} sequential read of {} ({}), ucache budget {}, pieces of {}{}, {}{}",
        if args.keep_page_cache { "warm" } else { "cold" },
        format_size(args.data),
        path.display(),
        format_size(args.memory),
        format_size(args.piece),
        if args.aligned { " (4 KiB-aligned)" } else { "" },
        if args.keep_page_cache {
            "page cache kept"
        } else {
            "page cache dropped before each pass"
        },
        if args.pool { ", pool placement" } else { "" }
    );
    let mut ratios: Vec<Vec<f64>> = vec![Vec::new(); systems.len()];
    let mut mismatches = 0;
    for rep in 0..args.reps {
        let mut base = 0.0;
        for (k, (via, store)) in systems.iter().enumerate() {
            if !args.keep_page_cache {
                drop_caches()?;
            }
            let (secs, bad, reads, overlapped, past) = pass(args, &path, *via, store)?;
            mismatches += bad;
            let mbs = args.data as f64 / secs / (1 << 20) as f64;
            if k == 0 {
                base = mbs;
            }
            let ratio = mbs / base;
            ratios[k].push(ratio);
            println!(
                "rep {rep} {:<18} {:>8.1} MiB/s  {:>5.2}x std-fs  store reads {reads} ({overlapped} overlapped), {} MiB past the cache{}",
                name(*via, store),
                mbs,
                ratio,
                past >> 20,
                if bad > 0 { "  WRONG DATA" } else { "" }
            );
        }
    }
    println!("\nratio to std-fs over {} reps (min..max):", args.reps);
    for (k, (via, store)) in systems.iter().enumerate() {
        let r = &ratios[k];
        let lo = r.iter().cloned().fold(f64::INFINITY, f64::min);
        let hi = r.iter().cloned().fold(0.0, f64::max);
        println!("  {:<18} {lo:.2}..{hi:.2}", name(*via, store));
    }
    Ok(mismatches)
}

fn name(via: Via, store: &str) -> String {
    let v = match via {
        Via::StdFs => return "std-fs".into(),
        Via::Read => "read",
        Via::ReadCached => "read-cached",
        Via::ReadNoReadahead => "read-no-ra",
        Via::PinEach => "pin-each",
        Via::EnsurePins => "ensure-pins",
        Via::Pins => "pins",
    };
    format!("{v}:{store}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn systems_parse_and_bad_ones_say_why() {
        assert_eq!(parse_system("read:uring").unwrap(), (Via::Read, "uring"));
        assert_eq!(parse_system("pins").unwrap(), (Via::Pins, "file"));
        assert_eq!(
            parse_system("read-cached:direct").unwrap(),
            (Via::ReadCached, "direct")
        );
        assert!(parse_system("scan:file")
            .unwrap_err()
            .contains("unknown system"));
        assert!(parse_system("read:s3")
            .unwrap_err()
            .contains("unknown store"));
    }
}
