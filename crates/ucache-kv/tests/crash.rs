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

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;

use common::within;
use rand::{Rng, SeedableRng};
use ucache::store::FileStore;
use ucache_kv::{Direction, Kv, KvOptions, WriteBatch};

const ENV: &str = "UCACHE_KV_CRASH_DIR";
/// Set (to anything) for a child whose commits are not synced.
const NOSYNC: &str = "UCACHE_KV_CRASH_NOSYNC";
const CYCLES: usize = 50;
const NOSYNC_CYCLES: usize = 20;
const KEYSPACE: u64 = 1500;

fn opts(dir: &str, sync: bool) -> KvOptions {
    let mut o = KvOptions::in_dir(dir);
    o.sync_commits = sync;
    o.store = Arc::new(FileStore::new());
    o.memory_bytes = 16 * 4096;
    o.capacity_pages = 1 << 14;
    o.checkpoint_bytes = 32 << 10;
    o
}

fn mix(a: u64, b: u64) -> u64 {
    let mut x = a.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ b.wrapping_mul(0xC2B2_AE3D_27D4_EB4F);
    x ^= x >> 31;
    x.wrapping_mul(0x94D0_49BB_1331_11EB) ^ (x >> 29)
}

/// Batch `i`: a few puts (values naming the batch), sometimes a delete, and `last = i`.
fn batch(i: u64) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
    let mut ops = Vec::new();
    for j in 0..1 + i % 6 {
        let k = mix(i, j) % KEYSPACE;
        let mut v = format!("{k}@{i}").into_bytes();
        v.resize(60 + (mix(i, 100 + j) % 200) as usize, b'x');
        ops.push((format!("k{k:05}").into_bytes(), Some(v)));
    }
    if i.is_multiple_of(3) {
        ops.push((format!("k{:05}", mix(i, 99) % KEYSPACE).into_bytes(), None));
    }
    ops.push((b"last".to_vec(), Some(i.to_string().into_bytes())));
    ops
}

fn apply(model: &mut BTreeMap<Vec<u8>, Vec<u8>>, i: u64) {
    for (k, v) in batch(i) {
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
    let kv = Kv::open(opts(&dir, std::env::var(NOSYNC).is_err())).unwrap();
    let last: u64 = kv
        .get(b"last")
        .unwrap()
        .map_or(0, |v| String::from_utf8(v).unwrap().parse().unwrap());
    let mut out = std::io::stdout().lock();
    use std::io::Write;
    for i in last + 1.. {
        let mut b = WriteBatch::new();
        for (k, v) in batch(i) {
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
    within("crash cycles", || cycles(true, CYCLES));
}

/// Without synced commits, a crash may lose the latest acknowledged batches, but the store
/// still holds exactly batches `1..=last` for some `last`: no batch in part, no hole.
#[test]
fn sigkill_without_synced_commits_leaves_a_whole_prefix() {
    within("no-sync crash cycles", || cycles(false, NOSYNC_CYCLES));
}

fn cycles(sync: bool, cycles: usize) {
    {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().to_str().unwrap().to_string();
        let exe = std::env::current_exe().unwrap();
        let mut rng = rand::rngs::StdRng::seed_from_u64(20);
        let mut model = BTreeMap::new();
        let mut applied = 0u64;
        let mut acked_total = 0u64;
        for cycle in 0..cycles {
            let mut cmd = Command::new(&exe);
            if !sync {
                cmd.env(NOSYNC, "1");
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

            let kv = Kv::open(opts(&path, true)).unwrap();
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
                apply(&mut model, applied);
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
            drop(kv);
        }
        assert!(
            acked_total > 100,
            "the children committed batches: {acked_total}"
        );
    }
}
