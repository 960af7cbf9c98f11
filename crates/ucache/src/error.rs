//! One error type for every public call.
//!
//! Each variant names what went wrong in terms the caller can act on: which argument was bad,
//! which object and offset failed, whether data is still safe in the cache.

use std::io;

/// The result of every fallible ucache call.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in ucache.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A buffer size that is not a power of two between 4 KiB and 1 GiB.
    #[error("invalid buffer size {0}: must be a power of two from 4096 to 1 GiB")]
    BadBufferSize(usize),

    /// A zero length, or a length that the mapping's mode cannot cover.
    #[error("invalid length {len}: {why}")]
    BadLength { len: u64, why: &'static str },

    /// A cache budget that cannot hold even one eviction batch, or, for a pool mapping
    /// ([`crate::Placement::Pool`]), one chunk of its frame pool (`batch` is then the chunk).
    #[error(
        "memory budget {budget} bytes is smaller than one eviction batch or pool chunk \
         ({batch} bytes)"
    )]
    BudgetTooSmall { budget: u64, batch: u64 },

    /// Any other invalid option.
    #[error("invalid argument: {0}")]
    BadArgument(String),

    /// A read-only mapping that reaches past the end of its object.
    #[error(
        "mapping of {len} bytes at offset {offset} exceeds object '{object}' of {object_len} bytes"
    )]
    BeyondObject {
        object: String,
        offset: u64,
        len: u64,
        object_len: u64,
    },

    /// The store has no object by that name (no such file, no such key).
    #[error("object '{object}' not found")]
    NotFound { object: String },

    /// The directory that would hold the object does not exist. Unlike [`Error::NotFound`],
    /// `create` cannot help: the directory must be made first (or the path fixed).
    #[error("directory '{directory}' of object '{object}' does not exist")]
    DirectoryNotFound { directory: String, object: String },

    /// The bucket that would hold the object does not exist (S3's `NoSuchBucket`), told apart
    /// from a missing key (`NoSuchKey`, [`Error::NotFound`]): the bucket name or the endpoint
    /// is wrong, not the key.
    #[error("bucket '{bucket}' of object '{object}' does not exist")]
    BucketNotFound { bucket: String, object: String },

    /// The object was replaced behind the cache (its ETag or version changed since it was
    /// opened). Serving the new bytes next to cached old ones would hand the program a mix of
    /// two versions, so the read fails instead; remap to see the new object.
    #[error("object '{object}' changed since it was opened")]
    ObjectChanged { object: String },

    /// A buffer index, byte range or address outside the mapping (or, for the cache's
    /// address calls, outside every mapping). [`Bounds`] says which, in the unit of the call:
    /// an index and the buffer count, a byte range and the mapping's length, or an address.
    #[error("{0}")]
    OutOfRange(Bounds),

    /// A write access through a read-only mapping.
    #[error("mapping is read-only")]
    ReadOnly,

    /// Every resident buffer is pinned, being loaded, or refused eviction, so no memory can be
    /// freed. `used` is the budget in use, in bytes. A load reports it only after waiting
    /// [`crate::CacheOptions::budget_wait`] (5 s by default) without an eviction freeing
    /// anything, since pins held for a moment are normal. Where the evictions failed because
    /// dirty buffers could not be written back, the load reports that instead
    /// ([`Error::WritebackFailed`]).
    #[error("cache budget exhausted: {used} bytes in use and none evictable")]
    BudgetExhausted { used: u64 },

    /// An earlier sync of this mapping's object failed after writes that the cache no longer
    /// holds as dirty buffers (eviction's and `writeback`'s write-backs, left clean or
    /// evicted): the store may have dropped those bytes ("fsyncgate"), so no later msync can
    /// promise durability. Every msync and unmap of the mapping fails with this until
    /// [`crate::Mapping::clear_sync_failure`]; the application decides (replay its log,
    /// rewrite, or accept the loss). `first` is the failed sync's error.
    #[error(
        "an earlier sync of '{object}' failed ({first}) after write-backs the cache no longer \
         holds: they may be lost, so msync refuses until clear_sync_failure"
    )]
    SyncPoisoned { object: String, first: String },

    /// This process was forked from the one that made the cache: a child cannot use its
    /// parent's caches (their IO threads, evictor and fault handling stay in the parent, and
    /// its copy of their memory may be stale). Make a new cache in the child, or exec.
    #[error(
        "this process is a fork of the one that made the cache: its mappings cannot be used \
         here (make a new cache in the child, or exec)"
    )]
    Forked,

    /// The store returned fewer bytes than the buffer needs.
    #[error("short {op} on '{object}' at offset {offset}: {got} of {want} bytes")]
    ShortIo {
        op: &'static str,
        object: String,
        offset: u64,
        got: usize,
        want: usize,
    },

    /// The store failed. For a failed write-back the data stays dirty and resident.
    #[error("{op} failed on '{object}' at offset {offset}: {source}")]
    Io {
        op: &'static str,
        object: String,
        offset: u64,
        #[source]
        source: io::Error,
    },

    /// Some buffers could not be written back; they stay dirty and resident. Returned by
    /// msync, eviction and unmap, and by a load that needed memory when the budget was full of
    /// dirty buffers whose write-backs kept failing for [`crate::CacheOptions::budget_wait`]
    /// (a full disk, a store that is down): `first` is the last such failure's first error.
    #[error("write-back failed for {failed} buffer(s); first: {first}")]
    WritebackFailed { failed: usize, first: Box<Error> },

    /// The call would wait for a buffer that the calling thread itself holds: one it pinned
    /// exclusively, or one its own `pin_each` is still reading (a callback that pins a buffer
    /// later in the same stream). Or `msync` would wait for another thread's exclusive pin
    /// while the caller holds exclusive pins of its own, which that thread may be waiting for.
    /// The wait could deadlock, so the call fails instead; drop the guards first, or let
    /// `pin_each` hand the buffer over.
    #[error("buffer {index} is {why}: waiting for it here could deadlock")]
    WouldDeadlock { index: u64, why: &'static str },

    /// `unmap` found buffers loaded or pinned again after its passes: another thread is
    /// still using the mapping. Nothing was lost; the mapping is whole again.
    #[error("mapping still in use while unmapping: {resident} buffer(s) resident again")]
    InUse { resident: u64 },

    /// A call on a mapping that was already unmapped.
    #[error("mapping was unmapped")]
    Unmapped,

    /// A pool mapping ([`crate::Placement::Pool`]) was asked for what only an in-place
    /// mapping has: transparent access, its base address, a typed slice over its memory, or
    /// an address-based call. A pool mapping's buffers live in frames of the cache's pool,
    /// wherever a miss put them, so there is no one address range to hand out: reach its
    /// bytes through pins, optimistic reads, `read`, `write` and `pin_each`.
    #[error("{what} needs an in-place mapping: a pool mapping's buffers have no fixed address")]
    NotInPlace { what: &'static str },

    /// An operating system call that ucache itself made failed (mmap, madvise, ...).
    #[error("{call} failed: {source}")]
    Os {
        call: &'static str,
        #[source]
        source: io::Error,
    },
}

/// What an [`Error::OutOfRange`] call asked for, and what there is, in the call's own unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Bounds {
    /// A buffer index (pins, optimistic reads, index lists) past the last buffer.
    Buffer {
        /// The index asked for.
        index: u64,
        /// The mapping's buffer count: valid indices are `0..buffers`.
        buffers: u64,
    },
    /// A byte range (`read`, `write`, `ensure_cached`, `evict`, ...) that ends past the
    /// mapping, or whose end does not fit a `u64`.
    Range {
        /// The range's first byte, from the mapping's start.
        offset: u64,
        /// The range's length in bytes.
        len: u64,
        /// The mapping's length in bytes.
        mapping_len: u64,
    },
    /// An address range given to [`crate::Cache`]'s address calls that lies in no mapping.
    Address {
        /// The first address asked for.
        addr: usize,
        /// The range's length in bytes.
        len: usize,
    },
}

impl std::fmt::Display for Bounds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Bounds::Buffer { index, buffers } => write!(
                f,
                "buffer index {index} is out of range: the mapping has {buffers} buffer(s), \
                 indices 0..{buffers}"
            ),
            Bounds::Range {
                offset,
                len,
                mapping_len,
            } => match offset.checked_add(len) {
                Some(end) => write!(
                    f,
                    "byte range {offset}..{end} ({len} bytes) is out of range: the mapping is \
                     {mapping_len} bytes long"
                ),
                None => write!(
                    f,
                    "byte range of {len} bytes at offset {offset} is out of range: its end \
                     overflows, and the mapping is {mapping_len} bytes long"
                ),
            },
            Bounds::Address { addr, len } => write!(
                f,
                "address range {addr:#x} ({len} bytes) is outside every mapping of the cache"
            ),
        }
    }
}

impl Error {
    /// Wraps the calling thread's `errno` from a failed system call.
    pub(crate) fn last_os(call: &'static str) -> Self {
        Error::Os {
            call,
            source: io::Error::last_os_error(),
        }
    }

    /// Wraps a store IO error with the object and offset it concerns.
    ///
    /// A store whose failure has a variant of its own (such as [`Error::ObjectChanged`]) returns
    /// `io::Error::other(that_error)` from its [`crate::store::Object`] methods, which only speak
    /// `io::Error`; it is unwrapped here so the caller sees the typed error.
    pub fn io(op: &'static str, object: &str, offset: u64, source: io::Error) -> Self {
        if source.get_ref().is_some_and(|e| e.is::<Error>()) {
            if let Some(inner) = source.into_inner() {
                if let Ok(typed) = inner.downcast::<Error>() {
                    return *typed;
                }
            }
            unreachable!("checked above that the payload is an Error");
        }
        if source.kind() == io::ErrorKind::NotFound {
            return Error::NotFound {
                object: object.to_string(),
            };
        }
        Error::Io {
            op,
            object: object.to_string(),
            offset,
            source,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typed_error_inside_io_error_is_unwrapped() {
        let wrapped = io::Error::other(Error::ObjectChanged {
            object: "s3://b/k".into(),
        });
        match Error::io("read", "s3://b/k", 4096, wrapped) {
            Error::ObjectChanged { object } => assert_eq!(object, "s3://b/k"),
            other => panic!("expected ObjectChanged, got {other:?}"),
        }
        match Error::io("read", "o", 0, io::Error::other("plain")) {
            Error::Io { op, object, .. } => assert_eq!((op, object.as_str()), ("read", "o")),
            other => panic!("expected Io, got {other:?}"),
        }
    }

    /// Every out-of-range message names what was asked for in the call's unit, and what
    /// there is; none prints an address unless an address was given.
    #[test]
    fn out_of_range_messages_speak_the_callers_unit() {
        let buf = Error::OutOfRange(Bounds::Buffer {
            index: 16,
            buffers: 16,
        });
        assert_eq!(
            buf.to_string(),
            "buffer index 16 is out of range: the mapping has 16 buffer(s), indices 0..16"
        );
        let max = Error::OutOfRange(Bounds::Buffer {
            index: u64::MAX,
            buffers: 3,
        });
        assert_eq!(
            max.to_string(),
            "buffer index 18446744073709551615 is out of range: the mapping has 3 buffer(s), \
             indices 0..3"
        );
        let range = Error::OutOfRange(Bounds::Range {
            offset: 8000,
            len: 400,
            mapping_len: 8192,
        });
        assert_eq!(
            range.to_string(),
            "byte range 8000..8400 (400 bytes) is out of range: the mapping is 8192 bytes long"
        );
        let over = Error::OutOfRange(Bounds::Range {
            offset: u64::MAX,
            len: 2,
            mapping_len: 8192,
        });
        assert_eq!(
            over.to_string(),
            "byte range of 2 bytes at offset 18446744073709551615 is out of range: its end \
             overflows, and the mapping is 8192 bytes long"
        );
        let addr = Error::OutOfRange(Bounds::Address {
            addr: 0x1000,
            len: 8,
        });
        assert_eq!(
            addr.to_string(),
            "address range 0x1000 (8 bytes) is outside every mapping of the cache"
        );
    }

    #[test]
    fn missing_containers_are_named() {
        let dir = Error::DirectoryNotFound {
            directory: "/no/such".into(),
            object: "/no/such/f".into(),
        };
        assert_eq!(
            dir.to_string(),
            "directory '/no/such' of object '/no/such/f' does not exist"
        );
        let bucket = Error::BucketNotFound {
            bucket: "b".into(),
            object: "s3://b/k".into(),
        };
        assert_eq!(
            bucket.to_string(),
            "bucket 'b' of object 's3://b/k' does not exist"
        );
        let key = Error::NotFound {
            object: "s3://b/k".into(),
        };
        assert_eq!(key.to_string(), "object 's3://b/k' not found");
    }
}
