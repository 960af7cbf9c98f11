//! Consistency of chunked objects at their edges, each case found by review (2026-11-25) and
//! failing before its fix: damaged chunks, the length's durability against failures and races,
//! and calls from async code. Same server discovery as tests/s3.rs (UCACHE_S3_ENDPOINT).

mod common;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Barrier};
use std::time::Duration;

use ucache::store::{IoBuf, Object, OpenOptions};
use ucache_object::{ChunkedObject, S3Store};

use common::{config, data, endpoint, unique, OwnServer, Plain};

const CS: u64 = 16 << 10;

/// A prefix laid out by hand (a manifest saying `len`/`CS`, and chunk 0 holding `chunk0`),
/// opened read-only.
fn hand_made(ep: &str, len: u64, chunk0: Vec<u8>) -> Arc<ChunkedObject> {
    let prefix = unique("short-chunk");
    let plain = Plain::new(ep);
    plain.put(
        &format!("{prefix}/manifest"),
        format!("ucache-chunked 1\nlength {len}\nchunk_size {CS}\n").into_bytes(),
    );
    plain.put(&format!("{prefix}/00000000"), chunk0);
    S3Store::chunked(config(ep, ""), CS)
        .unwrap()
        .open_chunked(&prefix, OpenOptions::read_only())
        .unwrap()
}

/// A coalesced ranged GET answered with fewer bytes than asked (a chunk object shorter than
/// the chunk size) fails its requests with an error; a piece starting past the body used to
/// slice out of bounds and panic on the caller's thread.
#[test]
fn a_short_chunk_fails_a_coalesced_read_without_a_panic() {
    let Some(ep) = endpoint("a_short_chunk_fails_a_coalesced_read_without_a_panic") else {
        return;
    };
    let o = hand_made(&ep, CS, data(5000, 1));
    let mut mem = vec![0u8; CS as usize];
    let base = mem.as_mut_ptr();
    let r = catch_unwind(AssertUnwindSafe(|| {
        // Four adjacent 4 KiB buffers of chunk 0: one coalesced GET 0..16384.
        let mut reqs: Vec<IoBuf> = (0..4)
            .map(|k| unsafe { IoBuf::new(base.add(k * 4096), 4096, (k * 4096) as u64) })
            .collect();
        let mut out = Vec::new();
        o.read_batch(&mut reqs, &mut out);
        out.into_iter().map(|r| r.is_ok()).collect::<Vec<_>>()
    }));
    let oks = r.expect("read_batch panicked on a short GET body instead of returning errors");
    // Buffers 2 and 3 lie wholly past the 5000 bytes the server has: they must not be Ok.
    assert!(!oks[2] && !oks[3], "{oks:?}");
}

/// A chunk object shorter than the chunk size (the library only ever PUTs whole chunks, so it
/// is foreign or damaged) is an error, on reads and on the read-modify-write path; its missing
/// bytes used to read as zeros, reported as a full success.
#[test]
fn a_short_chunk_is_an_error_not_zeros() {
    let Some(ep) = endpoint("a_short_chunk_is_an_error_not_zeros") else {
        return;
    };
    let o = hand_made(&ep, CS, data(5000, 2));
    let mut buf = vec![0xAAu8; CS as usize];
    let r = o.read_at(&mut buf, 0);
    assert!(
        !matches!(r, Ok(n) if n == CS as usize),
        "a {CS}-byte read of a 5000-byte chunk object returned Ok({CS}) (zeros past 5000)"
    );
}

/// A set_len whose manifest upload fails (server down) leaves the old length: it used to
/// report the new one, with nothing pending, so a later sync() returned Ok without writing it.
#[test]
fn a_failed_set_len_leaves_the_durable_length() {
    if endpoint("a_failed_set_len_leaves_the_durable_length").is_none() {
        return;
    }
    let server = OwnServer::start();
    let ep = server.endpoint.clone();
    let cfg = config(&ep, "")
        .retries(0, Duration::from_secs(1))
        .timeouts(Duration::from_secs(30), Duration::from_secs(5));
    let store = S3Store::chunked(cfg.clone(), CS).unwrap();
    let prefix = unique("review-setlen");
    // A freshly started server may answer 500 for a moment (retries are off here).
    let t0 = std::time::Instant::now();
    let o = loop {
        match store.open_chunked(&prefix, OpenOptions::create()) {
            Ok(o) if o.set_len(4 * CS).is_ok() => break o,
            r if t0.elapsed() > Duration::from_secs(300) => {
                panic!("server not ready: {:?}", r.err())
            }
            _ => std::thread::sleep(Duration::from_millis(500)),
        }
    };

    server.stop();
    assert!(o.set_len(8 * CS).is_err(), "set_len with the server down");
    server.restart();
    let fresh = S3Store::chunked(cfg, CS).unwrap();
    let reopen = || {
        // The restarted server answers 500 for a moment: wait until it serves the manifest.
        let t0 = std::time::Instant::now();
        loop {
            match fresh.open_chunked(&prefix, OpenOptions::read_only()) {
                Ok(r) => return r.len().unwrap(),
                Err(e) if t0.elapsed() < Duration::from_secs(300) => {
                    eprintln!("waiting for the server: {e}");
                    std::thread::sleep(Duration::from_millis(500));
                }
                Err(e) => panic!("server did not come back: {e}"),
            }
        }
    };
    reopen();

    o.sync().expect("sync after the server is back");
    let reported = o.len().unwrap();
    let durable = reopen();
    assert_eq!(
        durable, reported,
        "sync() returned Ok but the manifest holds {durable} while the handle reports {reported}"
    );
}

/// A write_at that extends the object while set_len's manifest upload is in flight stays
/// pending; set_len used to clear the flag after its upload, so sync() returned Ok while the
/// manifest kept the shorter length and a reopen lost the written chunk.
#[test]
fn set_len_racing_an_extending_write_keeps_the_length_durable() {
    let Some(ep) = endpoint("set_len_racing_an_extending_write") else {
        return;
    };
    let store = Arc::new(S3Store::chunked(config(&ep, ""), CS).unwrap());
    let prefix = unique("review-race");
    let o = store.open_chunked(&prefix, OpenOptions::create()).unwrap();
    let chunk = data(CS as usize, 3);
    for k in 0..40u64 {
        // set_len grows to L; concurrently a whole-chunk write lands at L..L+CS.
        let l = (2 * k + 1) * CS;
        let b = Arc::new(Barrier::new(2));
        let (o1, b1) = (o.clone(), b.clone());
        let t = std::thread::spawn(move || {
            b1.wait();
            o1.set_len(l).unwrap();
        });
        b.wait();
        o.write_at(&chunk, l).unwrap();
        t.join().unwrap();
        o.sync().unwrap();
        let reported = o.len().unwrap();
        let durable = store
            .open_chunked(&prefix, OpenOptions::read_only())
            .unwrap()
            .len()
            .unwrap();
        assert_eq!(
            durable, reported,
            "round {k}: sync() returned Ok but the manifest says {durable}, the handle {reported}"
        );
        // Next round starts past everything written so far.
        if reported < l + CS {
            o.set_len(l + CS).unwrap();
        }
    }
}

/// An Object call from a thread inside a tokio runtime works (it blocks, as any IO does):
/// tokio's `block_on` used to panic there ("Cannot start a runtime from within a runtime"),
/// in the middle of the cache's batches.
#[test]
fn object_calls_work_from_async_code() {
    let Some(ep) = endpoint("object_calls_work_from_async_code") else {
        return;
    };
    let key = unique("review-async");
    Plain::new(&ep).put(&key, data(8192, 4));
    let store = S3Store::new(config(&ep, "")).unwrap();
    let o = store.open_object(&key).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let r = catch_unwind(AssertUnwindSafe(|| {
        rt.block_on(async {
            let mut buf = vec![0u8; 4096];
            o.read_at(&mut buf, 0).map(|n| (n, buf))
        })
    }));
    match r {
        Err(_) => panic!("read_at from inside a tokio runtime panicked instead of returning"),
        Ok(Ok((n, buf))) => assert_eq!((n, &buf[..]), (4096, &data(8192, 4)[..4096])),
        Ok(Err(_)) => {} // a typed refusal would be acceptable
    }
}

/// Concurrent sync()s land their manifests in the order they read the length, and one that
/// finds nothing pending has waited for the upload that took it. Unserialized, an older,
/// shorter length could land last while every sync returned Ok.
#[test]
fn concurrent_syncs_land_the_newest_length_last() {
    let Some(ep) = endpoint("concurrent_syncs_land_the_newest_length_last") else {
        return;
    };
    let store = Arc::new(S3Store::chunked(config(&ep, ""), CS).unwrap());
    let chunk = data(CS as usize, 5);
    for round in 0..100 {
        let prefix = unique("review-syncs");
        let o = store.open_chunked(&prefix, OpenOptions::create()).unwrap();
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let syncers: Vec<_> = (0..8)
            .map(|_| {
                let (o, done) = (o.clone(), done.clone());
                std::thread::spawn(move || {
                    while !done.load(std::sync::atomic::Ordering::Acquire) {
                        o.sync().unwrap();
                    }
                })
            })
            .collect();
        for k in 0..40u64 {
            o.write_at(&chunk, k * CS).unwrap();
        }
        done.store(true, std::sync::atomic::Ordering::Release);
        for t in syncers {
            t.join().unwrap();
        }
        o.sync().unwrap();
        let reported = o.len().unwrap();
        let durable = store
            .open_chunked(&prefix, OpenOptions::read_only())
            .unwrap()
            .len()
            .unwrap();
        assert_eq!(
            durable, reported,
            "round {round}: every sync() returned Ok but the manifest says {durable}, the handle {reported}"
        );
    }
}
