//! Read-write transactions ([`Kv::update`]): reads see the transaction's own writes, merged
//! into scans in order; an error writes nothing; concurrent read-modify-writes lose no update.

mod common;

use std::sync::Arc;

use common::*;
use ucache_kv::{Direction, Kv, KvError, WriteBatch};

fn k(n: u64) -> Vec<u8> {
    format!("k{n:04}").into_bytes()
}

#[test]
fn reads_see_own_writes_and_scans_merge_them() {
    let kv = Kv::open(options(memory_store(), 4096, 64)).unwrap();
    let mut b = WriteBatch::new();
    for n in (0..1000).step_by(2) {
        b.put(k(n), format!("s{n}").into_bytes());
    }
    kv.write(&b).unwrap();
    kv.update(|t| {
        t.put(&k(3), b"o3");
        t.put(&k(4), b"o4"); // replaces a stored one
        t.delete(&k(6)); // hides a stored one
        t.put(&k(7), b"x");
        t.delete(&k(7)); // its own put, undone
        assert_eq!(t.get(&k(3))?.as_deref(), Some(&b"o3"[..]));
        assert_eq!(t.get(&k(6))?, None);
        assert_eq!(t.get(&k(7))?, None);
        assert_eq!(t.get(&k(8))?.as_deref(), Some(&b"s8"[..]));
        let fwd = t.scan(Some(&k(2)), Some(&k(11)), Direction::Forward, usize::MAX)?;
        let want: Vec<(Vec<u8>, Vec<u8>)> =
            [(2, "s2"), (3, "o3"), (4, "o4"), (8, "s8"), (10, "s10")]
                .iter()
                .map(|(n, v)| (k(*n), v.as_bytes().to_vec()))
                .collect();
        assert_eq!(fwd, want);
        let mut bwd = t.scan(Some(&k(2)), Some(&k(11)), Direction::Backward, usize::MAX)?;
        bwd.reverse();
        assert_eq!(bwd, want);
        assert_eq!(
            t.scan(Some(&k(2)), None, Direction::Forward, 3)?,
            want[..3].to_vec()
        );
        // Nothing is visible outside before the commit.
        assert_eq!(kv.get(&k(3))?, None);
        Ok(())
    })
    .unwrap();
    assert_eq!(kv.get(&k(3)).unwrap().as_deref(), Some(&b"o3"[..]));
    assert_eq!(kv.get(&k(6)).unwrap(), None);
    assert_eq!(kv.get(&k(7)).unwrap(), None);
}

#[test]
fn an_error_writes_nothing() {
    let kv = Kv::open(options(memory_store(), 4096, 64)).unwrap();
    kv.put(&k(1), b"a").unwrap();
    let r: Result<(), _> = kv.update(|t| {
        t.put(&k(1), b"b");
        t.put(&k(2), b"c");
        Err(KvError::Aborted("the caller gave up".into()))
    });
    assert!(matches!(r, Err(KvError::Aborted(_))));
    // A value too large is refused at commit, with nothing written either.
    let big = vec![0u8; kv.max_value_len() + 1];
    let r = kv.update(|t| {
        t.put(&k(1), b"b");
        t.put(&k(3), &big);
        Ok(())
    });
    assert!(matches!(r, Err(KvError::ValueTooLarge { .. })));
    assert_eq!(kv.get(&k(1)).unwrap().as_deref(), Some(&b"a"[..]));
    assert_eq!(kv.get(&k(2)).unwrap(), None);
}

#[test]
fn concurrent_increments_lose_nothing() {
    within("concurrent increments", || {
        let kv = Arc::new(Kv::open(options(memory_store(), 4096, 64)).unwrap());
        const THREADS: u64 = 4;
        const EACH: u64 = 300;
        let hs: Vec<_> = (0..THREADS)
            .map(|_| {
                let kv = kv.clone();
                std::thread::spawn(move || {
                    for _ in 0..EACH {
                        kv.update(|t| {
                            // Two counters that must move together.
                            let a = t
                                .get(b"a")?
                                .map_or(0, |v| u64::from_le_bytes(v.try_into().unwrap()));
                            let b = t
                                .get(b"b")?
                                .map_or(0, |v| u64::from_le_bytes(v.try_into().unwrap()));
                            assert_eq!(a, b, "a transaction saw half of another");
                            t.put(b"a", &(a + 1).to_le_bytes());
                            t.put(b"b", &(b + 1).to_le_bytes());
                            Ok(())
                        })
                        .unwrap();
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        let a = u64::from_le_bytes(kv.get(b"a").unwrap().unwrap().try_into().unwrap());
        assert_eq!(a, THREADS * EACH);
    });
}
