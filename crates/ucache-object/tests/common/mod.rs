//! What the S3 tests share: finding (or skipping without) a server, unique keys, a plain
//! object_store client that stands in for any other S3 user, and test data.

#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use ucache_object::S3Config;

/// The server's endpoint, or `None` (after saying so) when the tests should skip: no
/// `UCACHE_S3_ENDPOINT` and `UCACHE_S3_REQUIRED` not 1. With `UCACHE_S3_REQUIRED=1` a missing
/// server fails the test instead, so CI cannot pass by skipping.
pub fn endpoint(test: &str) -> Option<String> {
    match std::env::var("UCACHE_S3_ENDPOINT") {
        Ok(e) if !e.is_empty() => Some(e),
        _ if std::env::var("UCACHE_S3_REQUIRED").as_deref() == Ok("1") => {
            panic!("{test}: UCACHE_S3_REQUIRED=1 but UCACHE_S3_ENDPOINT is unset (scripts/s3-server.sh start DIR)")
        }
        _ => {
            eprintln!(
                "skipping {test}: UCACHE_S3_ENDPOINT is unset (scripts/test.sh starts a server)"
            );
            None
        }
    }
}

pub fn bucket() -> String {
    std::env::var("UCACHE_S3_BUCKET").unwrap_or_else(|_| "ucache-test".into())
}

/// A key no other test (or earlier run) uses.
pub fn unique(tag: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!(
        "{tag}-{}-{t}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// Configuration for `key` on `endpoint` with the credentials of the environment.
pub fn config(endpoint: &str, key: &str) -> S3Config {
    S3Config::from_env(&format!("s3://{}/{key}", bucket()))
        .unwrap()
        .endpoint(endpoint)
}

/// A plain client with its own runtime: another S3 user, independent of the cache, that
/// spells keys exactly as given.
pub struct Plain {
    pub client: Arc<dyn ObjectStore>,
    rt: tokio::runtime::Runtime,
}

impl Plain {
    pub fn new(endpoint: &str) -> Plain {
        Plain {
            // Setup, not the code under test: patient, so a loaded machine (CI runs servers
            // of other tests beside it) does not fail a test before it begins.
            client: config(endpoint, "")
                .retries(8, std::time::Duration::from_secs(120))
                .timeouts(
                    std::time::Duration::from_secs(60),
                    std::time::Duration::from_secs(10),
                )
                .build()
                .unwrap(),
            rt: tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap(),
        }
    }
    pub fn put(&self, key: &str, data: Vec<u8>) {
        self.rt
            .block_on(
                self.client
                    .put(&Path::parse(key).unwrap(), PutPayload::from(data)),
            )
            .unwrap();
    }
    pub fn get(&self, key: &str) -> Option<Vec<u8>> {
        self.rt.block_on(async {
            match self.client.get(&Path::parse(key).unwrap()).await {
                Ok(r) => Some(r.bytes().await.unwrap().to_vec()),
                Err(object_store::Error::NotFound { .. }) => None,
                Err(e) => panic!("get {key}: {e}"),
            }
        })
    }
}

/// Bytes that differ at every offset (and between seeds), so a misplaced buffer shows.
pub fn data(len: usize, seed: u64) -> Vec<u8> {
    let mut v = vec![0u8; len];
    for (k, w) in v.chunks_mut(8).enumerate() {
        let x = (k as u64 ^ seed.rotate_left(32)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        w.copy_from_slice(&x.to_le_bytes()[..w.len()]);
    }
    v
}

/// A server of the test's own, for tests that stop and restart it.
pub struct OwnServer {
    pub dir: tempfile::TempDir,
    pub endpoint: String,
}

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts/s3-server.sh")
}

impl OwnServer {
    pub fn start() -> OwnServer {
        let dir = tempfile::tempdir().unwrap();
        let endpoint = Self::run("start", dir.path());
        OwnServer { dir, endpoint }
    }
    pub fn stop(&self) {
        Self::run("stop", self.dir.path());
    }
    pub fn restart(&self) {
        let e = Self::run("start", self.dir.path());
        assert_eq!(e, self.endpoint, "a restart keeps its ports");
    }
    fn run(cmd: &str, dir: &std::path::Path) -> String {
        let out = Command::new("bash")
            .arg(script())
            .arg(cmd)
            .arg(dir)
            .output()
            .expect("run scripts/s3-server.sh");
        assert!(
            out.status.success(),
            "s3-server.sh {cmd}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }
}

impl Drop for OwnServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Buffer (and chunk) size of the outage tests.
pub const OUTAGE_BS: usize = 16 << 10;

/// The set-up every outage test shares: a server of the test's own, a chunked store on it
/// whose client gives up quickly (one retry), a read-write mapping of `len` buffers over a
/// fresh key, and its first `dirty` buffers written from `want` and left dirty. Fields drop in
/// order: the mapping, then the cache, then the server.
pub struct Outage {
    pub mapping: ucache::Mapping,
    pub cache: ucache::Cache,
    /// What the first `dirty` buffers hold.
    pub want: Vec<u8>,
    pub prefix: String,
    pub server: OwnServer,
}

impl Outage {
    /// `None` (the test skips) where S3 tests do not run.
    pub fn start(
        test: &str,
        cache: ucache::CacheOptions,
        len: u64,
        dirty: u64,
        seed: u64,
    ) -> Option<Outage> {
        // The shared server only tells us whether S3 tests are to run; this one starts its own.
        endpoint(test)?;
        let server = OwnServer::start();
        let prefix = unique(test);
        let want = data(dirty as usize * OUTAGE_BS, seed);
        let cache = ucache::Cache::new(cache).unwrap();
        let mapping = cache
            .map(
                Arc::new(Self::store(&server.endpoint)),
                &prefix,
                // No readahead: the outage tests decide which buffers are resident and dirty
                // when the server goes away, and background loads would change that.
                ucache::MapOptions::new()
                    .buffer_size(OUTAGE_BS)
                    .writable(true)
                    .create(true)
                    .readahead(false)
                    .len(len * OUTAGE_BS as u64),
            )
            .unwrap();
        for (i, bytes) in want.chunks(OUTAGE_BS).enumerate() {
            mapping
                .pin_exclusive(i as u64)
                .unwrap()
                .copy_from_slice(bytes);
        }
        Some(Outage {
            mapping,
            cache,
            want,
            prefix,
            server,
        })
    }

    /// A fresh chunked store on `endpoint` (the test's server), configured as the mapping's is.
    pub fn store(endpoint: &str) -> ucache_object::S3Store {
        let cfg = config(endpoint, "")
            .retries(1, std::time::Duration::from_secs(2))
            .timeouts(
                std::time::Duration::from_secs(30),
                std::time::Duration::from_secs(5),
            );
        ucache_object::S3Store::chunked(cfg, OUTAGE_BS as u64).unwrap()
    }
}
