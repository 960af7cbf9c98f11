//! Crash recovery: a child process runs write batches and is killed with SIGKILL at random
//! points, 50 times; after each kill the parent reopens the store and checks that every
//! batch the child acknowledged is there and no other batch is there even in part.
//!
//! The child is this test binary run again with `UCACHE_KV_CRASH_DIR` set (the test
//! `crash_child` then runs the workload instead of returning). Its cache is small (16 pages
//! of 4 KiB under a tree of a few hundred) so pages are written back by eviction all the time,
//! and it checkpoints every 32 KiB of log, so kills land mid-commit, mid-write-back and
//! mid-checkpoint. Batch `i` is a pure function of `i` and also sets key `last` to `i`, so the
//! parent knows exactly what the store must hold after batches `1..=last`.
//!
//! Both placements run. In place: the cycles above (50 synced, 20 not). On the pool, whose
//! budget cannot go below one 2 MiB chunk: 64 KiB pages (32 of them in the cache), values and
//! the checkpoint interval 16 times larger. Before its cycles, the pool's parent writes
//! batches until the tree is 1.5 times the cache, so every child there runs over a tree
//! larger than the cache. The pool also runs 50 synced cycles and 20 unsynced ones. The last
//! cycle checks that the tree outgrew the cache, on both placements.

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;

use common::within;
use rand::{Rng, SeedableRng};
use ucache::store::FileStore;
use ucache_kv::{Direction, Kv, KvOptions, Placement, WriteBatch, POOL_CHUNK};

const ENV: &str = "UCACHE_KV_CRASH_DIR";
/// Set (to anything) for a child whose commits are not synced.
const NOSYNC: &str = "UCACHE_KV_CRASH_NOSYNC";
/// Set (to anything) for a child on the pool placement.
const POOL: &str = "UCACHE_KV_CRASH_POOL";
const CYCLES: usize = 50;
const NOSYNC_CYCLES: usize = 20;
const POOL_CYCLES: usize = 50;
const POOL_NOSYNC_CYCLES: usize = 20;
const KEYSPACE: u64 = 1500;

/// How much larger pages, values and the checkpoint interval are on the pool.
fn scale(pool: bool) -> usize {
    if pool {
        16
    } else {
        1
    }
}

fn opts(dir: &str, sync: bool, pool: bool) -> KvOptions {
    let mut o = KvOptions::in_dir(dir);
    o.sync_commits = sync;
    o.store = Arc::new(FileStore::new());
    o.page_size = 4096 * scale(pool);
    o.memory_bytes = 16 * 4096;
    o.checkpoint_bytes = (32 << 10) * scale(pool) as u64;
    o.placement = Placement::InPlace;
    if pool {
        o.placement = Placement::Pool;
        o.memory_bytes = POOL_CHUNK;
    }
    o.capacity_pages = 1 << 14;
    o
}

fn mix(a: u64, b: u64) -> u64 {
    let mut x = a.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ b.wrapping_mul(0xC2B2_AE3D_27D4_EB4F);
    x ^= x >> 31;
    x.wrapping_mul(0x94D0_49BB_1331_11EB) ^ (x >> 29)
}

/// Batch `i`: a few puts (values naming the batch), sometimes a delete, and `last = i`.
fn batch(i: u64, pool: bool) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
    let mut ops = Vec::new();
    for j in 0..1 + i % 6 {
        let k = mix(i, j) % KEYSPACE;
        let mut v = format!("{k}@{i}").into_bytes();
        v.resize((60 + (mix(i, 100 + j) % 200) as usize) * scale(pool), b'x');
        ops.push((format!("k{k:05}").into_bytes(), Some(v)));
    }
    if i.is_multiple_of(3) {
        ops.push((format!("k{:05}", mix(i, 99) % KEYSPACE).into_bytes(), None));
    }
    ops.push((b"last".to_vec(), Some(i.to_string().into_bytes())));
    ops
}

fn apply(model: &mut BTreeMap<Vec<u8>, Vec<u8>>, i: u64, pool: bool) {
    for (k, v) in batch(i, pool) {
        match v {
            Some(v) => model.insert(k, v),
            None => model.remove(&k),
        };
    }
}

/// The workload of the child: batches from the one after the store's `last`, acknowledged
/// on stdout once `write` returned.
#[test]
fn crash_child() {
    let Ok(dir) = std::env::var(ENV) else {
        return;
    };
    let pool = std::env::var(POOL).is_ok();
    let kv = Kv::open(opts(&dir, std::env::var(NOSYNC).is_err(), pool)).unwrap();
    let last: u64 = kv
        .get(b"last")
        .unwrap()
        .map_or(0, |v| String::from_utf8(v).unwrap().parse().unwrap());
    let mut out = std::io::stdout().lock();
    use std::io::Write;
    for i in last + 1.. {
        let mut b = WriteBatch::new();
        for (k, v) in batch(i, pool) {
            match v {
                Some(v) => b.put(k, v),
                None => b.delete(k),
            };
        }
        kv.write(&b).unwrap();
        writeln!(out, "ack {i}").unwrap();
        out.flush().unwrap();
    }
}

#[test]
fn sigkill_at_random_points_loses_no_acknowledged_batch() {
    within("crash cycles", || cycles(true, false, CYCLES));
}

/// Without synced commits, a crash may lose the latest acknowledged batches, but the store
/// still holds exactly batches `1..=last` for some `last`: no batch in part, no hole.
#[test]
fn sigkill_without_synced_commits_leaves_a_whole_prefix() {
    within("no-sync crash cycles", || {
        cycles(false, false, NOSYNC_CYCLES)
    });
}

#[test]
fn sigkill_on_the_pool_loses_no_acknowledged_batch() {
    within("pool crash cycles", || cycles(true, true, POOL_CYCLES));
}

#[test]
fn sigkill_on_the_pool_without_synced_commits_leaves_a_whole_prefix() {
    within("pool no-sync crash cycles", || {
        cycles(false, true, POOL_NOSYNC_CYCLES)
    });
}

/// Writes batches `1..` (synced) until the tree is larger than the cache, so every cycle's
/// child writes pages back on eviction. The pool's cache is 2 MiB, which the children alone
/// would take many cycles to outgrow (an unsynced child keeps only what happened to become
/// durable). Returns the last batch written, applied to `model`.
fn grow_past_the_cache(path: &str, model: &mut BTreeMap<Vec<u8>, Vec<u8>>) -> u64 {
    let o = opts(path, true, true);
    let kv = Kv::open(o.clone()).unwrap();
    let mut i = 0;
    while kv.pages_used().unwrap() * (o.page_size as u64) < o.memory_bytes * 3 / 2 {
        i += 1;
        assert!(i < 20_000, "the tree stopped growing");
        let mut b = WriteBatch::new();
        for (k, v) in batch(i, true) {
            match v {
                Some(v) => b.put(k, v),
                None => b.delete(k),
            };
        }
        kv.write(&b).unwrap();
        apply(model, i, true);
    }
    kv.close().unwrap();
    i
}

fn cycles(sync: bool, pool: bool, cycles: usize) {
    {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().to_str().unwrap().to_string();
        let exe = std::env::current_exe().unwrap();
        let mut rng = rand::rngs::StdRng::seed_from_u64(20);
        let mut model = BTreeMap::new();
        let mut applied = 0u64;
        if pool {
            applied = grow_past_the_cache(&path, &mut model);
        }
        let mut acked_total = 0u64;
        for cycle in 0..cycles {
            let mut cmd = Command::new(&exe);
            if !sync {
                cmd.env(NOSYNC, "1");
            }
            if pool {
                cmd.env(POOL, "1");
            }
            let mut child = cmd
                .args(["--exact", "crash_child", "--nocapture", "--test-threads=1"])
                .env(ENV, &path)
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            let stdout = child.stdout.take().unwrap();
            let mut lines = BufReader::new(stdout).lines();
            // Kill after a random number of acknowledgements (0: possibly during recovery),
            // then a random short moment, so the kill lands anywhere in the next batch.
            let wait_for = rng.gen_range(0..60);
            let mut acked = applied;
            let mut seen = 0;
            while seen < wait_for {
                match lines.next() {
                    Some(Ok(l)) => {
                        if let Some(n) = l.strip_prefix("ack ") {
                            acked = n.parse().unwrap();
                            seen += 1;
                        }
                    }
                    _ => panic!("cycle {cycle}: the child ended early"),
                }
            }
            std::thread::sleep(std::time::Duration::from_micros(rng.gen_range(0..3000)));
            // SAFETY: kill(2) on our own child's pid.
            unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
            // Acknowledgements printed before the kill count too.
            for l in lines.map_while(|l| l.ok()) {
                if let Some(n) = l.strip_prefix("ack ") {
                    acked = n.parse().unwrap();
                }
            }
            child.wait().unwrap();
            acked_total += acked - applied.min(acked);

            let kv = Kv::open(opts(&path, true, pool)).unwrap();
            let last: u64 = kv
                .get(b"last")
                .unwrap()
                .map_or(0, |v| String::from_utf8(v).unwrap().parse().unwrap());
            // Synced: every acknowledged batch. Not synced: at least what the last reopen
            // made durable (its checkpoint), as prefixes only grow.
            let floor = if sync { acked } else { applied };
            assert!(
                last >= floor,
                "cycle {cycle}: batch {floor} was durable, the store ends at {last}"
            );
            while applied < last {
                applied += 1;
                apply(&mut model, applied, pool);
            }
            let got: BTreeMap<_, _> = kv
                .scan(None, None, Direction::Forward, usize::MAX)
                .unwrap()
                .into_iter()
                .collect();
            if got != model {
                let diff: Vec<_> = model
                    .iter()
                    .filter(|(k, v)| got.get(*k) != Some(v))
                    .map(|(k, _)| String::from_utf8_lossy(k).into_owned())
                    .chain(
                        got.keys()
                            .filter(|k| !model.contains_key(*k))
                            .map(|k| format!("extra {}", String::from_utf8_lossy(k))),
                    )
                    .take(10)
                    .collect();
                panic!(
                    "cycle {cycle}: the store after batch {last} differs from the model: {diff:?}"
                );
            }
            if cycle + 1 == cycles {
                // The later cycles ran over a tree larger than the cache, so the children
                // wrote pages back on eviction, not only at checkpoints.
                let o = opts(&path, true, pool);
                let bytes = kv.pages_used().unwrap() * o.page_size as u64;
                assert!(
                    bytes > o.memory_bytes,
                    "the tree ({bytes} bytes) outgrew the cache ({})",
                    o.memory_bytes
                );
            }
            drop(kv);
        }
        assert!(
            acked_total > 100,
            "the children committed batches: {acked_total}"
        );
    }
}
