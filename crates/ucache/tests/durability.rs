//! Data written and `msync`ed survives the process being killed with SIGKILL: a child process
//! writes through a mapping larger than its budget, syncs, reports, and is killed; the parent
//! reads every byte back through a fresh cache.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;

use ucache::store::FileStore;
use ucache::{Cache, CacheOptions, MapOptions};

const BS: usize = 4096;
const BUFFERS: u64 = 512;
const CHILD_ENV: &str = "UCACHE_DURABILITY_CHILD";

fn stamp(i: u64, round: u64) -> u8 {
    (i.wrapping_mul(31) ^ round.wrapping_mul(7)) as u8
}

fn child(path: &Path) -> ! {
    let cache = Cache::new(CacheOptions::new(64 * BS as u64).batch(16)).unwrap();
    let m = cache
        .map(
            Arc::new(FileStore::direct()),
            path.to_str().unwrap(),
            MapOptions::new()
                .writable(true)
                .create(true)
                .len(BUFFERS * BS as u64),
        )
        .unwrap();
    for i in 0..BUFFERS {
        m.pin_exclusive(i).unwrap().fill(stamp(i, 1));
    }
    m.msync(0, m.len()).unwrap();
    println!("SYNCED");
    // Dirty more buffers, never synced: the kill may or may not leave them, but never torn.
    for i in 0..16 {
        m.pin_exclusive(i).unwrap().fill(stamp(i, 2));
    }
    loop {
        std::thread::sleep(std::time::Duration::from_secs(1));
    }
}

#[test]
fn msynced_data_survives_sigkill() {
    if let Some(p) = std::env::var_os(CHILD_ENV) {
        child(Path::new(&p));
    }
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let path: PathBuf = dir.path().join("data");
    let mut proc = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "msynced_data_survives_sigkill",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, &path)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let out = BufReader::new(proc.stdout.take().unwrap());
    let mut synced = false;
    for line in out.lines() {
        if line.unwrap().contains("SYNCED") {
            synced = true;
            break;
        }
    }
    assert!(synced, "child died before syncing");
    // SAFETY: kill(2) on our own child's pid.
    assert_eq!(unsafe { libc::kill(proc.id() as i32, libc::SIGKILL) }, 0);
    let status = proc.wait().unwrap();
    assert!(!status.success());

    let cache = Cache::new(CacheOptions::new(64 * BS as u64).batch(16)).unwrap();
    let m = cache
        .map(
            Arc::new(FileStore::direct()),
            path.to_str().unwrap(),
            MapOptions::new(),
        )
        .unwrap();
    assert_eq!(m.len(), BUFFERS * BS as u64);
    for i in 0..BUFFERS {
        let g = m.pin_shared(i).unwrap();
        let first = g[0];
        assert!(
            first == stamp(i, 1) || (i < 16 && first == stamp(i, 2)),
            "buffer {i} lost its synced data: {first}"
        );
        assert!(g.iter().all(|&b| b == first), "buffer {i} is torn");
    }
}
