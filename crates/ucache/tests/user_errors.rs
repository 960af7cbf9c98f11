//! Errors in the caller's terms: an index call names the index and the buffer count, a range
//! call the byte range and the mapping's length, an address call the address; a missing
//! directory is not a missing file, nor a "length 0". Every message is checked word for word.

use std::sync::Arc;

use ucache::store::{FileStore, MemoryStore};
use ucache::{Bounds, Cache, CacheOptions, Error, MapOptions};

const BS: u64 = 4096;

fn cache() -> Cache {
    Cache::new(CacheOptions::new(64 * BS).batch(8)).unwrap()
}

fn store(len: u64) -> Arc<MemoryStore> {
    let s = MemoryStore::new();
    s.insert("o", vec![7u8; len as usize]);
    Arc::new(s)
}

fn bounds<T: std::fmt::Debug>(r: Result<T, Error>) -> (Bounds, String) {
    match r {
        Err(e @ Error::OutOfRange(b)) => (b, e.to_string()),
        other => panic!("expected OutOfRange, got {other:?}"),
    }
}

#[test]
fn index_calls_name_the_index_and_the_buffer_count() {
    let c = cache();
    let m = c.map(store(16 * BS), "o", MapOptions::new()).unwrap();
    let want = Bounds::Buffer {
        index: 16,
        buffers: 16,
    };
    let msg = "buffer index 16 is out of range: the mapping has 16 buffer(s), indices 0..16";
    assert_eq!(bounds(m.pin_shared(16)), (want, msg.to_string()));
    assert_eq!(bounds(m.read_optimistic(16, |_| ())), (want, msg.into()));
    assert_eq!(
        bounds(m.ensure_cached_buffers(&[3, 16, 17])),
        (want, msg.into())
    );
    assert_eq!(bounds(m.prefetch_buffers(&[16])), (want, msg.into()));
    let rw = c
        .map(store(16 * BS), "o", MapOptions::new().writable(true))
        .unwrap();
    assert_eq!(bounds(rw.pin_exclusive(16)), (want, msg.into()));
}

#[test]
fn an_index_of_u64_max_prints_no_wrapped_address() {
    let c = cache();
    let m = c.map(store(16 * BS), "o", MapOptions::new()).unwrap();
    let (b, msg) = bounds(m.pin_shared(u64::MAX));
    assert_eq!(
        b,
        Bounds::Buffer {
            index: u64::MAX,
            buffers: 16
        }
    );
    assert_eq!(
        msg,
        "buffer index 18446744073709551615 is out of range: the mapping has 16 buffer(s), \
         indices 0..16"
    );
    assert!(!msg.contains("0x"), "{msg}");
}

#[test]
fn range_calls_name_the_range_and_the_mappings_length() {
    let c = cache();
    let len = 10 * BS + 100;
    let m = c.map(store(len), "o", MapOptions::new()).unwrap();
    let want = |offset, n| Bounds::Range {
        offset,
        len: n,
        mapping_len: len,
    };
    let msg =
        "byte range 40900..41061 (161 bytes) is out of range: the mapping is 41060 bytes long";
    let mut buf = vec![0u8; 161];
    assert_eq!(
        bounds(m.read(40_900, &mut buf)),
        (want(40_900, 161), msg.into())
    );
    assert_eq!(
        bounds(m.ensure_cached(40_900, 161)),
        (want(40_900, 161), msg.into())
    );
    assert_eq!(
        bounds(m.prefetch(40_900, 161)),
        (want(40_900, 161), msg.into())
    );
    assert_eq!(
        bounds(m.evict(40_900, 161)),
        (want(40_900, 161), msg.into())
    );
    assert_eq!(
        bounds(m.writeback(40_900, 161)),
        (want(40_900, 161), msg.into())
    );
    assert_eq!(
        bounds(m.msync(40_900, 161)),
        (want(40_900, 161), msg.into())
    );
    // An end that overflows is named as given, not wrapped.
    let (b, msg) = bounds(m.msync(u64::MAX, 2));
    assert_eq!(b, want(u64::MAX, 2));
    assert_eq!(
        msg,
        "byte range of 2 bytes at offset 18446744073709551615 is out of range: its end \
         overflows, and the mapping is 41060 bytes long"
    );
}

#[test]
fn address_calls_name_the_address() {
    let c = cache();
    let _m = c.map(store(16 * BS), "o", MapOptions::new()).unwrap();
    let local = [0u8; 16];
    let (b, msg) = bounds(c.ensure_cached(local.as_ptr(), 16));
    assert_eq!(
        b,
        Bounds::Address {
            addr: local.as_ptr() as usize,
            len: 16
        }
    );
    assert_eq!(
        msg,
        format!(
            "address range {:#x} (16 bytes) is outside every mapping of the cache",
            local.as_ptr() as usize
        )
    );
}

#[test]
fn creating_in_a_missing_directory_names_the_directory() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such-dir");
    let path = missing.join("data");
    let name = path.to_str().unwrap();
    let c = cache();
    for store in [FileStore::new(), FileStore::direct()] {
        let r = c.map(
            Arc::new(store),
            name,
            MapOptions::new().writable(true).create(true).len(1 << 20),
        );
        match r {
            Err(e @ Error::DirectoryNotFound { .. }) => {
                assert_eq!(
                    e.to_string(),
                    format!(
                        "directory '{}' of object '{name}' does not exist",
                        missing.display()
                    )
                );
            }
            other => panic!("expected DirectoryNotFound, got {other:?}"),
        }
    }
    // Without `create`, and without a length, the directory is still what is missing.
    for o in [
        MapOptions::new(),
        MapOptions::new().writable(true).create(true),
    ] {
        let r = c.map(Arc::new(FileStore::new()), name, o);
        assert!(
            matches!(&r, Err(Error::DirectoryNotFound { directory, object })
                if *directory == missing.display().to_string() && object == name),
            "{r:?}"
        );
    }
    assert!(!missing.exists(), "nothing was created");
}

#[test]
fn a_missing_file_in_an_existing_directory_is_not_found() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("absent");
    let name = path.to_str().unwrap();
    let c = cache();
    let r = c.map(Arc::new(FileStore::new()), name, MapOptions::new());
    match r {
        Err(e @ Error::NotFound { .. }) => {
            assert_eq!(e.to_string(), format!("object '{name}' not found"))
        }
        other => panic!("expected NotFound, got {other:?}"),
    }
    // `create` without a length has nothing to create: that, and only that, is a length
    // problem.
    let r = c.map(
        Arc::new(FileStore::new()),
        name,
        MapOptions::new().writable(true).create(true),
    );
    match r {
        Err(e @ Error::BadLength { len: 0, .. }) => assert_eq!(
            e.to_string(),
            "invalid length 0: a new object is empty: give the length to map"
        ),
        other => panic!("expected BadLength, got {other:?}"),
    }
    // With a length, it is created.
    let m = c
        .map(
            Arc::new(FileStore::new()),
            name,
            MapOptions::new().writable(true).create(true).len(1 << 20),
        )
        .unwrap();
    assert_eq!(m.len(), 1 << 20);
}
