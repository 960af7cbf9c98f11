//! What the store's calls report. Bad input is refused before anything changes; a failure in
//! the middle of a write batch undoes the batch in memory, so nothing half-applied is ever seen
//! or logged.

/// The store's errors.
#[derive(Debug, thiserror::Error)]
pub enum KvError {
    /// A key longer than [`crate::Kv::max_key_len`], or empty.
    #[error("key of {len} bytes: keys must be 1 to {max} bytes")]
    KeyTooLarge { len: usize, max: usize },
    /// A value longer than [`crate::Kv::max_value_len`] (a quarter page).
    #[error("value of {len} bytes: values must be at most {max} bytes (a quarter page)")]
    ValueTooLarge { len: usize, max: usize },
    /// The data file's capacity ([`crate::KvOptions::capacity_pages`]) is used up.
    #[error("the store is full: {pages} pages of {page_size} bytes")]
    Full { pages: u64, page_size: usize },
    /// A page size that is not a power of two from 4 KiB to 64 KiB, or one that differs from
    /// the page size the store was created with.
    #[error("bad page size {0}: a power of two from 4096 to 65536, as the store was created")]
    BadPageSize(usize),
    /// A memory budget below what the placement needs: a pool placement charges its memory
    /// in 2 MiB chunks ([`crate::store::POOL_CHUNK`]), so it needs at least one.
    #[error("memory budget of {budget} bytes is below the {min} bytes this placement needs")]
    BudgetTooSmall { budget: u64, min: u64 },
    /// The files do not hold a store this code can read (a wrong magic number, a data file
    /// shorter than its pages, a page whose layout is broken).
    #[error("corrupt store: {0}")]
    Corrupt(String),
    /// The log could not be written or synced. The store refuses writes from then on (the
    /// kernel may have dropped what it had not synced); reopening recovers from what is durable.
    #[error("write-ahead log failed: {0}")]
    LogFailed(String),
    /// A [`crate::Kv::update`] transaction's own function gave up (a business rule, as
    /// TPC-C's New-Order rolling back on an unknown item); nothing of it was written.
    #[error("transaction aborted: {0}")]
    Aborted(String),
    /// The cache or its store failed (an IO error reading a page, memory exhausted).
    #[error(transparent)]
    Cache(#[from] ucache::Error),
    /// The log's own IO.
    #[error("{op} of the write-ahead log: {source}")]
    Io {
        op: &'static str,
        #[source]
        source: std::io::Error,
    },
}

pub type Result<T> = std::result::Result<T, KvError>;
