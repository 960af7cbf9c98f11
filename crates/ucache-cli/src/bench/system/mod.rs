//! The systems a benchmark compares: each one a way of getting a buffer of the data file into
//! memory so the workload can read it.
//!
//! Each lives in its own file and runs inside a worker process of its own, so no system
//! inherits another's page cache, mappings, or heap.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::worker::ThreadCtx;
use super::workload::Workload;

pub mod aligned;
mod arena;
mod array;
mod mmap;
mod pread;
mod raw_get;
mod raw_psync;
mod raw_uring;
mod residency;
mod row;
mod ucache;

pub use residency::Residency;
pub use row::{parse_policy_spec, split_policy_spec, SystemRow};

/// Reads raw-uring keeps in flight per thread.
pub const URING_QUEUE_DEPTH: usize = 32;
/// Loads ucache-prefetch keeps in flight per thread by default (`--prefetch-depth`):
/// the same as raw-uring's queue depth, so the two are compared at the same amount of IO in
/// flight.
pub const PREFETCH_BATCH: usize = 32;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum SystemKind {
    /// ucache, pinning one buffer per op through a guard (vmcache style).
    UcacheExplicit,
    /// ucache, visiting random buffers through `pin_each` with 32 loads in flight per thread.
    UcachePrefetch,
    /// ucache-explicit over a pool mapping (`Placement::Pool`): misses read into frames of
    /// the cache's pool, reused rather than freed, so a miss costs one read and no page fault.
    UcachePool,
    /// ucache-prefetch (the `pin_each` stream) over a pool mapping.
    UcachePoolPrefetch,
    /// ucache, reading without pins: `read_optimistic`, validated by the buffer's version
    /// (lookups only; a miss takes a pin to load the buffer).
    UcacheOptimistic,
    /// ucache as a drop-in for mmap: plain loads on a transparent mapping, misses served by
    /// its SIGBUS handler on the faulting thread.
    UcacheTransparent,
    /// The same, in compatibility mode: faults queue on the userfaultfd and handler threads
    /// (as many as workload threads) serve them.
    UcacheTransparentThreads,
    /// ucache-transparent with access tracking: eviction candidates are set aside first, so
    /// CLOCK sees the accesses plain loads hide (what tracking costs and buys).
    UcacheTransparentTracked,
    /// The whole file copied into an anonymous array first: the in-memory upper bound (only
    /// meaningful when the data fits in the budget).
    Array,
    /// The kernel page cache through a shared file mapping, in a memory cgroup.
    Mmap,
    /// The kernel page cache through buffered pread, in a memory cgroup.
    Pread,
    /// O_DIRECT pread, one request per thread in flight: the device at the same concurrency.
    RawPsync,
    /// raw-psync reading into fresh memory, as a cache that recycles frames does (see
    /// `arena.rs`): the floor of ucache-explicit's misses.
    RawPsyncFresh,
    /// O_DIRECT reads, 32 in flight per thread on its own io_uring: the device's throughput.
    RawUring,
    /// raw-uring reading into fresh memory, as a cache that recycles frames does: a sliding
    /// arena whose used buffers are dropped 64 at a time (`MADV_DONTNEED`), so every read lands
    /// in a newly faulted page. What the device gives a page-recycling design.
    RawUringFresh,
    /// S3 only: ranged GETs straight into private memory, `--prefetch-depth` in flight per
    /// thread, no cache: what the server gives at the concurrency ucache-prefetch uses.
    RawGet,
}

impl SystemKind {
    pub const ALL: [SystemKind; 16] = [
        SystemKind::UcacheExplicit,
        SystemKind::UcachePrefetch,
        SystemKind::UcachePool,
        SystemKind::UcachePoolPrefetch,
        SystemKind::UcacheOptimistic,
        SystemKind::UcacheTransparent,
        SystemKind::UcacheTransparentThreads,
        SystemKind::UcacheTransparentTracked,
        SystemKind::Array,
        SystemKind::Mmap,
        SystemKind::Pread,
        SystemKind::RawPsync,
        SystemKind::RawPsyncFresh,
        SystemKind::RawUring,
        SystemKind::RawUringFresh,
        SystemKind::RawGet,
    ];

    pub fn name(self) -> &'static str {
        match self {
            SystemKind::UcacheExplicit => "ucache-explicit",
            SystemKind::UcachePrefetch => "ucache-prefetch",
            SystemKind::UcachePool => "ucache-pool",
            SystemKind::UcachePoolPrefetch => "ucache-pool-prefetch",
            SystemKind::UcacheOptimistic => "ucache-optimistic",
            SystemKind::UcacheTransparent => "ucache-transparent",
            SystemKind::UcacheTransparentThreads => "ucache-transparent-threads",
            SystemKind::UcacheTransparentTracked => "ucache-transparent-tracked",
            SystemKind::Array => "array",
            SystemKind::Mmap => "mmap",
            SystemKind::Pread => "pread",
            SystemKind::RawPsync => "raw-psync",
            SystemKind::RawPsyncFresh => "raw-psync-fresh",
            SystemKind::RawUring => "raw-uring",
            SystemKind::RawUringFresh => "raw-uring-fresh",
            SystemKind::RawGet => "raw-get",
        }
    }

    pub fn parse(s: &str) -> Result<SystemKind, String> {
        SystemKind::ALL
            .into_iter()
            .find(|k| k.name() == s.trim())
            .ok_or_else(|| {
                let names: Vec<_> = SystemKind::ALL.iter().map(|k| k.name()).collect();
                format!("unknown system '{s}' (choose from {})", names.join(", "))
            })
    }

    /// The page-cache baselines: only they need the memory cgroup to be held to the budget.
    pub fn uses_page_cache(self) -> bool {
        matches!(self, SystemKind::Mmap | SystemKind::Pread)
    }

    /// Systems that read the local data file themselves (not through a ucache store), so
    /// cannot run against an object store.
    pub fn needs_local_file(self) -> bool {
        matches!(
            self,
            SystemKind::Array
                | SystemKind::Mmap
                | SystemKind::Pread
                | SystemKind::RawPsync
                | SystemKind::RawPsyncFresh
                | SystemKind::RawUring
                | SystemKind::RawUringFresh
        )
    }

    /// Whether this system can run `workload`. The live workloads need what only some
    /// systems have: updates need exclusive pins on a writable mapping, `tenants` two
    /// mappings in one cache; `getscan` and `search` only read, so the kernel's page cache
    /// (its default policy) runs them as a baseline.
    pub fn supports(self, workload: Workload) -> bool {
        match workload {
            Workload::YcsbA | Workload::YcsbB | Workload::YcsbC | Workload::Tenants => {
                matches!(self, SystemKind::UcacheExplicit | SystemKind::UcachePool)
            }
            Workload::Getscan | Workload::Search => matches!(
                self,
                SystemKind::UcacheExplicit
                    | SystemKind::UcachePool
                    | SystemKind::Mmap
                    | SystemKind::Pread
            ),
            Workload::Lookup | Workload::Seq | Workload::Zipf => true,
        }
    }

    pub fn is_ucache(self) -> bool {
        matches!(
            self,
            SystemKind::UcacheExplicit
                | SystemKind::UcachePrefetch
                | SystemKind::UcachePool
                | SystemKind::UcachePoolPrefetch
                | SystemKind::UcacheOptimistic
                | SystemKind::UcacheTransparent
                | SystemKind::UcacheTransparentThreads
                | SystemKind::UcacheTransparentTracked
        )
    }
}

/// The store under ucache: `file`, `uring`, or an object `s3://bucket/key`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoreKind {
    /// ucache's FileStore with O_DIRECT: synchronous reads, batches run one after another.
    File,
    /// ucache's UringStore: batches keep many reads in flight.
    Uring,
    /// ucache-object's S3Object: ranged GETs, a batch's GETs in flight at once.
    S3(String),
}

impl StoreKind {
    pub fn name(&self) -> &str {
        match self {
            StoreKind::File => "file",
            StoreKind::Uring => "uring",
            StoreKind::S3(url) => url,
        }
    }

    pub fn parse(s: &str) -> Result<StoreKind, String> {
        match s.trim() {
            "file" => Ok(StoreKind::File),
            "uring" => Ok(StoreKind::Uring),
            url if url.starts_with("s3://") => {
                ucache_object::S3Config::new(url).map_err(|e| e.to_string())?;
                Ok(StoreKind::S3(url.to_string()))
            }
            other => Err(format!(
                "unknown store '{other}' (file, uring, or s3://bucket/key)"
            )),
        }
    }

    pub fn s3_url(&self) -> Option<&str> {
        match self {
            StoreKind::S3(url) => Some(url),
            _ => None,
        }
    }
}

/// The S3 settings of a run: the object and where to reach it (credentials come from the
/// environment, so they never appear on a command line or in a report).
pub fn s3_config(url: &str, endpoint: Option<&str>) -> Result<ucache_object::S3Config, String> {
    let mut c = ucache_object::S3Config::from_env(url).map_err(|e| e.to_string())?;
    if let Some(e) = endpoint {
        c = c.endpoint(e);
    }
    Ok(c)
}

/// Everything a system needs to set itself up.
#[derive(Clone, Debug)]
pub struct Params {
    pub workload: Workload,
    pub path: PathBuf,
    pub data_bytes: u64,
    pub buffer_size: usize,
    pub memory_bytes: u64,
    pub threads: usize,
    pub store: StoreKind,
    /// S3 endpoint (`--endpoint`), else the environment's.
    pub endpoint: Option<String>,
    /// Buffers per batch of ucache-prefetch, requests in flight per thread of raw-get.
    pub prefetch_depth: usize,
    /// ucache systems: buffers per eviction batch (`None`: the library's default).
    pub eviction_batch: Option<usize>,
    /// ucache systems: `CacheOptions::background_eviction`.
    pub background_eviction: bool,
    /// ucache-pool systems: `CacheOptions::pool_huge_pages`.
    pub pool_huge_pages: bool,
    /// ucache systems: the policy spec of the row ([`SystemRow`]); `None` for the default.
    pub policy: Option<String>,
    /// `tenants`: [`::ucache::MapOptions::weight`] of tenant A and tenant B.
    pub tenant_weights: [u32; 2],
}

impl Params {
    pub fn buffers(&self) -> u64 {
        self.data_bytes / self.buffer_size as u64
    }
}

/// One system, set up and shared by all of a worker's threads.
pub trait System: Sync {
    /// Runs ops on the calling thread until `ctx.running()` turns false.
    fn run_thread(&self, ctx: &mut ThreadCtx) -> Result<(), String>;

    /// Named counters (ucache's hits, misses, evictions); the worker reports how much each grew
    /// during the measured interval.
    fn counters(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }

    /// Whether the system's own cache is full (or holds all the data), so that measuring now
    /// sees steady state: with a large budget, filling it takes seconds, and misses without
    /// evictions would flatter the result.
    fn warm(&self) -> bool {
        true
    }

    /// What one latency sample covers.
    fn latency_unit(&self) -> &'static str {
        "op"
    }
}

pub fn open(kind: SystemKind, p: &Params) -> Result<Box<dyn System>, String> {
    let sys: Box<dyn System> = match kind {
        SystemKind::UcacheExplicit => Box::new(ucache::Ucache::open(p, ucache::Mode::Explicit)?),
        SystemKind::UcachePrefetch => Box::new(ucache::Ucache::open(p, ucache::Mode::Prefetch)?),
        SystemKind::UcachePool => Box::new(ucache::Ucache::open(p, ucache::Mode::Pool)?),
        SystemKind::UcachePoolPrefetch => {
            Box::new(ucache::Ucache::open(p, ucache::Mode::PoolPrefetch)?)
        }
        SystemKind::UcacheOptimistic => {
            Box::new(ucache::Ucache::open(p, ucache::Mode::Optimistic)?)
        }
        SystemKind::UcacheTransparent => {
            Box::new(ucache::Ucache::open(p, ucache::Mode::Transparent)?)
        }
        SystemKind::UcacheTransparentTracked => {
            Box::new(ucache::Ucache::open(p, ucache::Mode::TransparentTracked)?)
        }
        SystemKind::UcacheTransparentThreads => {
            Box::new(ucache::Ucache::open(p, ucache::Mode::TransparentThreads)?)
        }
        SystemKind::Array => Box::new(array::Array::open(p)?),
        SystemKind::Mmap => Box::new(mmap::Mmap::open(p)?),
        SystemKind::Pread => Box::new(pread::Pread::open(p)?),
        SystemKind::RawPsync => Box::new(raw_psync::RawPsync::open(p, false)?),
        SystemKind::RawPsyncFresh => Box::new(raw_psync::RawPsync::open(p, true)?),
        SystemKind::RawUring => Box::new(raw_uring::RawUring::open(p, false)?),
        SystemKind::RawUringFresh => Box::new(raw_uring::RawUring::open(p, true)?),
        SystemKind::RawGet => Box::new(raw_get::RawGet::open(p)?),
    };
    Ok(sys)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_match_clap() {
        use clap::ValueEnum;
        for k in SystemKind::ALL {
            assert_eq!(SystemKind::parse(k.name()).unwrap(), k);
            assert_eq!(k.to_possible_value().unwrap().get_name(), k.name());
            assert_eq!(serde_json::to_value(k).unwrap(), k.name());
        }
        assert!(SystemKind::parse("nope").is_err());
    }

    #[test]
    fn stores_parse() {
        assert_eq!(StoreKind::parse("file").unwrap(), StoreKind::File);
        assert_eq!(StoreKind::parse("uring").unwrap(), StoreKind::Uring);
        let s3 = StoreKind::parse("s3://b/k").unwrap();
        assert_eq!((s3.name(), s3.s3_url()), ("s3://b/k", Some("s3://b/k")));
        assert!(StoreKind::parse("s3://").is_err());
        assert!(StoreKind::parse("nfs").is_err());
    }
}
