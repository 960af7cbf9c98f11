//! The small symmetric primitives: `Mapping::write` beside `read`, `is_resident`, the
//! index-list forms of `evict`, `writeback` and `msync`, typed reads and writes on guards and
//! optimistic views, and typed slices over transparent mappings; each with its bad inputs.

use std::sync::Arc;

use ucache::store::MemoryStore;
use ucache::{Bounds, Cache, CacheOptions, Error, MapOptions, Mapping};

const BS: u64 = 4096;

fn cache() -> Cache {
    Cache::new(CacheOptions::new(64 * BS).batch(4)).unwrap()
}

fn store(len: u64) -> Arc<MemoryStore> {
    let s = MemoryStore::new();
    s.insert("o", (0..len).map(|i| (i % 251) as u8).collect());
    Arc::new(s)
}

fn original(off: u64, n: u64) -> Vec<u8> {
    (off..off + n).map(|i| (i % 251) as u8).collect()
}

fn rw(c: &Cache, s: &Arc<MemoryStore>) -> Mapping {
    c.map(s.clone(), "o", MapOptions::new().writable(true))
        .unwrap()
}

fn oor_range(e: &Error, offset: u64, len: u64, mapping_len: u64) -> bool {
    matches!(e, Error::OutOfRange(b) if *b == Bounds::Range { offset, len, mapping_len })
}

fn oor_index(e: &Error, index: u64, buffers: u64) -> bool {
    matches!(e, Error::OutOfRange(b) if *b == Bounds::Buffer { index, buffers })
}

#[test]
fn write_is_read_back_and_leaves_the_rest_of_each_buffer_alone() {
    let (c, s) = (cache(), store(8 * BS));
    let m = rw(&c, &s);
    let data: Vec<u8> = (0..2 * BS + 10).map(|i| (i * 7) as u8).collect();
    m.write(BS - 5, &data).unwrap();
    let mut back = vec![0u8; data.len()];
    m.read(BS - 5, &mut back).unwrap();
    assert_eq!(back, data);
    // The bytes of the partly covered buffers outside the write keep the object's values.
    let mut before = vec![0u8; (BS - 5) as usize];
    m.read(0, &mut before).unwrap();
    assert_eq!(before, original(0, BS - 5));
    let after_at = BS - 5 + data.len() as u64;
    let mut after = vec![0u8; (4 * BS - after_at) as usize];
    m.read(after_at, &mut after).unwrap();
    assert_eq!(after, original(after_at, 4 * BS - after_at));
    // Dirty until msync, then in the store.
    m.msync(0, m.len()).unwrap();
    let stored = s.get("o").unwrap();
    assert_eq!(&stored[(BS - 5) as usize..after_at as usize], &data[..]);
    // An empty write within the mapping is a no-op.
    m.write(8 * BS, &[]).unwrap();
}

#[test]
fn write_refuses_ranges_past_the_end_and_writes_nothing() {
    let (c, s) = (cache(), store(8 * BS));
    let m = rw(&c, &s);
    let r = m.write(8 * BS - 3, &[9; 4]);
    assert!(
        oor_range(r.as_ref().unwrap_err(), 8 * BS - 3, 4, 8 * BS),
        "{r:?}"
    );
    assert_eq!(m.resident(), 0, "a refused write loaded nothing");
    let r = m.write(u64::MAX, &[1]);
    assert!(
        oor_range(r.as_ref().unwrap_err(), u64::MAX, 1, 8 * BS),
        "{r:?}"
    );
    assert_eq!(
        r.unwrap_err().to_string(),
        "byte range of 1 bytes at offset 18446744073709551615 is out of range: its end \
         overflows, and the mapping is 32768 bytes long"
    );
}

#[test]
fn write_on_a_read_only_mapping_is_refused() {
    let (c, s) = (cache(), store(8 * BS));
    let m = c.map(s.clone(), "o", MapOptions::new()).unwrap();
    assert!(matches!(m.write(0, &[1, 2, 3]), Err(Error::ReadOnly)));
    assert!(matches!(m.write(0, &[]), Err(Error::ReadOnly)));
    assert_eq!(
        m.write(5, b"x").unwrap_err().to_string(),
        "mapping is read-only"
    );
    // Past the end, the range is what is wrong.
    assert!(matches!(m.write(8 * BS, b"x"), Err(Error::OutOfRange(_))));
    assert_eq!(m.resident(), 0);
}

#[test]
fn write_to_a_buffer_this_thread_holds_would_deadlock() {
    let (c, s) = (cache(), store(8 * BS));
    let m = rw(&c, &s);
    let g = m.pin_exclusive(2).unwrap();
    let r = m.write(2 * BS + 1, b"abc");
    assert!(
        matches!(r, Err(Error::WouldDeadlock { index: 2, .. })),
        "{r:?}"
    );
    drop(g);
    m.write(2 * BS + 1, b"abc").unwrap();
}

#[test]
fn is_resident_follows_loads_and_evictions() {
    let (c, s) = (cache(), store(8 * BS + 100));
    let m = c.map(s, "o", MapOptions::new()).unwrap();
    assert!(!m.is_resident(3).unwrap());
    m.ensure_cached_buffers(&[3, 8]).unwrap();
    assert!(m.is_resident(3).unwrap());
    assert!(m.is_resident(8).unwrap(), "the partial last buffer");
    let g = m.pin_shared(3).unwrap();
    assert!(m.is_resident(3).unwrap());
    drop(g);
    m.evict(3 * BS, 1).unwrap();
    assert!(!m.is_resident(3).unwrap());
    let r = m.is_resident(9);
    assert!(oor_index(r.as_ref().unwrap_err(), 9, 9), "{r:?}");
    assert!(m.is_resident(u64::MAX).is_err());
}

#[test]
fn is_empty_agrees_with_len() {
    let (c, s) = (cache(), store(8 * BS));
    let m = c.map(s, "o", MapOptions::new()).unwrap();
    // A mapping is never empty (`map` refuses a zero length), and says so.
    assert_eq!(m.len(), 8 * BS);
    assert!(!m.is_empty());
    let r = c.map(store(8 * BS), "o", MapOptions::new().len(0));
    assert!(matches!(r, Err(Error::BadLength { len: 0, .. })), "{r:?}");
}

#[test]
fn index_list_forms_check_every_index_first() {
    let (c, s) = (cache(), store(8 * BS));
    let m = rw(&c, &s);
    m.write(0, &[0xAA; 8 * BS as usize]).unwrap();
    assert_eq!(m.resident(), 8);
    let bad = [1, 2, 8, 9];
    let r = m.evict_buffers(&bad);
    assert!(oor_index(r.as_ref().unwrap_err(), 8, 8), "{r:?}");
    assert_eq!(m.resident(), 8, "a refused evict_buffers evicted nothing");
    let r = m.msync_buffers(&bad);
    assert!(oor_index(r.as_ref().unwrap_err(), 8, 8), "{r:?}");
    let r = m.writeback_buffers(&[u64::MAX]);
    assert!(oor_index(r.as_ref().unwrap_err(), u64::MAX, 8), "{r:?}");
    assert!(
        s.get("o").unwrap()[..] == original(0, 8 * BS)[..],
        "a refused msync_buffers or writeback_buffers wrote nothing"
    );
    // Empty lists are fine and do nothing.
    m.evict_buffers(&[]).unwrap();
    m.writeback_buffers(&[]).unwrap();
    m.msync_buffers(&[]).unwrap();
    assert_eq!(m.resident(), 8);
}

#[test]
fn msync_buffers_makes_the_listed_buffers_durable_even_when_repeated() {
    let (c, s) = (cache(), store(8 * BS));
    let m = rw(&c, &s);
    for i in 0..8u64 {
        m.pin_exclusive(i).unwrap().write::<u64>(8, 1000 + i);
    }
    // Repeats count once (a repeat must not wait for this call's own claim).
    m.msync_buffers(&[5, 2, 5, 2]).unwrap();
    let stored = s.get("o").unwrap();
    for i in [2u64, 5] {
        let at = (i * BS + 8) as usize;
        assert_eq!(stored[at..at + 8], (1000 + i).to_ne_bytes(), "buffer {i}");
    }
    let at = (3 * BS + 8) as usize;
    assert_eq!(
        stored[at..at + 8],
        original(3 * BS + 8, 8)[..],
        "buffer 3 was not listed"
    );
    // writeback_buffers starts the rest; msync then finds them clean or finishes them.
    m.writeback_buffers(&[0, 1, 3, 4, 6, 7, 7]).unwrap();
    m.msync_buffers(&[0, 1, 3, 4, 6, 7]).unwrap();
    let stored = s.get("o").unwrap();
    for i in 0..8u64 {
        let at = (i * BS + 8) as usize;
        assert_eq!(stored[at..at + 8], (1000 + i).to_ne_bytes(), "buffer {i}");
    }
}

#[test]
fn evict_buffers_evicts_the_listed_unpinned_buffers_and_writes_dirty_ones_back() {
    let (c, s) = (cache(), store(8 * BS));
    let m = rw(&c, &s);
    m.ensure_cached(0, 8 * BS).unwrap();
    m.write(4 * BS, b"dirty").unwrap();
    let g = m.pin_shared(6).unwrap();
    m.evict_buffers(&[4, 6, 1, 1]).unwrap();
    assert!(!m.is_resident(4).unwrap());
    assert!(!m.is_resident(1).unwrap());
    assert!(m.is_resident(6).unwrap(), "a pinned buffer stays");
    assert!(m.is_resident(0).unwrap(), "an unlisted buffer stays");
    drop(g);
    assert_eq!(
        &s.get("o").unwrap()[4 * BS as usize..4 * BS as usize + 5],
        b"dirty"
    );
    // Read-only mappings: evict works, writeback and msync have nothing to do.
    let ro = c.map(s.clone(), "o", MapOptions::new()).unwrap();
    ro.ensure_cached_buffers(&[0, 1]).unwrap();
    ro.writeback_buffers(&[0]).unwrap();
    ro.msync_buffers(&[0, 1]).unwrap();
    ro.evict_buffers(&[0]).unwrap();
    assert!(!ro.is_resident(0).unwrap());
    assert!(ro.is_resident(1).unwrap());
}

#[test]
fn typed_reads_and_writes_on_guards_and_views() {
    let (c, s) = (cache(), store(4 * BS));
    let m = rw(&c, &s);
    {
        let mut g = m.pin_exclusive(1).unwrap();
        g.write::<u32>(1, 0xdead_beef);
        g.write::<[u16; 3]>(BS as usize - 6, [1, 2, 3]);
        assert_eq!(g.read::<u32>(1), 0xdead_beef);
    }
    let g = m.pin_shared(1).unwrap();
    assert_eq!(g.read::<u32>(1), 0xdead_beef);
    assert_eq!(g.read::<[u16; 3]>(BS as usize - 6), [1, 2, 3]);
    drop(g);
    let (v, arr) = m
        .read_optimistic(1, |v| {
            let mut arr = [0u16; 3];
            v.read_slice(BS as usize - 6, &mut arr);
            (v.read::<u32>(1), arr)
        })
        .unwrap();
    assert_eq!((v, arr), (0xdead_beef, [1, 2, 3]));
    // The write left the buffer dirty: msync puts it in the store.
    m.msync(0, m.len()).unwrap();
    assert_eq!(
        s.get("o").unwrap()[BS as usize + 1..BS as usize + 5],
        0xdead_beefu32.to_ne_bytes()
    );
}

#[test]
#[should_panic(
    expected = "read::<u64> of 8 bytes at offset 4089 is outside the buffer of 4096 bytes"
)]
fn a_typed_read_past_the_buffer_panics() {
    let (c, s) = (cache(), store(4 * BS));
    let m = c.map(s, "o", MapOptions::new()).unwrap();
    m.pin_shared(0).unwrap().read::<u64>(4089);
}

#[test]
#[should_panic(expected = "write::<u32> of 4 bytes at offset 18446744073709551615")]
fn a_typed_write_with_an_overflowing_offset_panics() {
    let (c, s) = (cache(), store(4 * BS));
    let m = rw(&c, &s);
    m.pin_exclusive(0).unwrap().write::<u32>(usize::MAX, 1);
}

#[test]
#[should_panic(expected = "read_slice::<u32> of 8 bytes at offset 4092")]
fn an_optimistic_slice_past_the_buffer_panics() {
    let (c, s) = (cache(), store(4 * BS));
    let m = c.map(s, "o", MapOptions::new()).unwrap();
    let _ = m.read_optimistic(0, |v| v.read_slice(4092, &mut [0u32; 2]));
}

#[test]
#[should_panic(
    expected = "read::<u16> of 2 bytes at offset 4095 is outside the buffer of 4096 bytes"
)]
fn an_optimistic_typed_read_past_the_buffer_panics() {
    let (c, s) = (cache(), store(4 * BS));
    let m = c.map(s, "o", MapOptions::new()).unwrap();
    let _ = m.read_optimistic(0, |v| v.read::<u16>(4095));
}

fn transparent(c: &Cache, s: &Arc<MemoryStore>, writable: bool) -> Mapping {
    let o = MapOptions::new().transparent(true).writable(writable);
    c.map(s.clone(), "o", o).unwrap()
}

fn bad_argument<T: std::fmt::Debug>(r: Result<T, Error>) -> String {
    match r {
        Err(Error::BadArgument(why)) => why,
        other => panic!("expected BadArgument, got {other:?}"),
    }
}

#[test]
fn typed_slices_read_and_write_transparent_mappings() {
    let (c, s) = (cache(), store(16 * BS));
    let ro = transparent(&c, &s, false);
    let bytes: &[u8] = ro.as_slice().unwrap();
    assert_eq!(bytes, &original(0, 16 * BS)[..]);
    let words: &[u64] = ro.as_slice().unwrap();
    assert_eq!(words.len(), 2 * BS as usize);
    assert_eq!(
        words[513],
        u64::from_ne_bytes(original(513 * 8, 8).try_into().unwrap())
    );
    drop(ro);

    let mut m = transparent(&c, &s, true);
    {
        let v: &mut [u32] = m.as_mut_slice().unwrap();
        assert_eq!(v.len(), 4 * BS as usize);
        v[3 * 1024 + 7] = 77;
        v[0] = 1;
    }
    m.msync(0, m.len()).unwrap();
    let stored = s.get("o").unwrap();
    assert_eq!(
        stored[(3 * BS + 28) as usize..(3 * BS + 32) as usize],
        77u32.to_ne_bytes()
    );
    assert_eq!(stored[0..4], 1u32.to_ne_bytes());
    // Evicted and read back, the values are as stored.
    m.evict(0, m.len()).unwrap();
    assert_eq!(m.as_mut_slice::<u32>().unwrap()[3 * 1024 + 7], 77);
}

#[test]
fn typed_slices_refuse_what_they_cannot_serve() {
    let (c, s) = (cache(), store(16 * BS));
    // Not transparent.
    let mut plain = rw(&c, &s);
    let why = bad_argument(plain.as_mut_slice::<u8>());
    assert_eq!(
        why,
        "as_mut_slice needs a transparent mapping (MapOptions::transparent): the memory of \
         another mapping holds data only while a pin is held"
    );
    let ro_plain = c.map(s.clone(), "o", MapOptions::new()).unwrap();
    assert!(bad_argument(ro_plain.as_slice::<u8>()).starts_with("as_slice needs a transparent"));
    drop((plain, ro_plain));
    // Shared slices of a writable mapping, mutable ones of a read-only mapping.
    let mut w = transparent(&c, &s, true);
    assert_eq!(
        bad_argument(w.as_slice::<u8>()),
        "as_slice needs a read-only mapping: pins and writes through `&self` could change a \
         writable one under the slice (use as_mut_slice)"
    );
    // Zero-sized and odd-sized element types.
    assert_eq!(
        bad_argument(w.as_mut_slice::<()>()),
        "as_mut_slice::<()>: a zero-sized element type has no slice to map"
    );
    assert_eq!(
        bad_argument(w.as_mut_slice::<[u8; 3]>()),
        "as_mut_slice::<[u8; 3]>: the mapping's 65536 bytes are not a whole number of 3-byte \
         elements"
    );
    drop(w);
    let mut ro = transparent(&c, &s, false);
    assert!(matches!(ro.as_mut_slice::<u8>(), Err(Error::ReadOnly)));
    drop(ro);
    // A read-only mapping whose length is not a whole number of u64.
    let odd = store(BS + 4);
    let m = transparent(&c, &odd, false);
    assert_eq!(m.as_slice::<u32>().unwrap().len(), 1025);
    assert_eq!(
        bad_argument(m.as_slice::<u64>()),
        "as_slice::<u64>: the mapping's 4100 bytes are not a whole number of 8-byte elements"
    );
}
