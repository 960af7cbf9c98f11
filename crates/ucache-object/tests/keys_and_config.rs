//! Object keys are used exactly as spelled, and a configuration the client would fail or panic
//! on is refused when it is built. Same server discovery as tests/s3.rs (UCACHE_S3_ENDPOINT);
//! the configuration cases need no server.

mod common;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::Duration;

use object_store::path::Path;
use object_store::{ObjectStoreExt, PutPayload};
use ucache::store::{Object, OpenOptions, Store};
use ucache::Error;
use ucache::{Cache, CacheOptions, MapOptions};
use ucache_object::{S3Config, S3Object, S3Store};

use common::{config, data, endpoint, unique, Plain};

/// S3 keys may hold `~ [ ] % #` and the like, and another client's object so named opens
/// (percent-encoding them, as `Path::from` does, would ask the server for another key).
#[test]
fn a_key_with_reserved_characters_is_found() {
    let Some(ep) = endpoint("a_key_with_reserved_characters_is_found") else {
        return;
    };
    let store = S3Store::new(config(&ep, "")).unwrap();
    for tag in ["~a", "[1]", "#2"] {
        let key = format!("{}{tag}", unique("chars"));
        Plain::new(&ep).put(&key, data(4096, 1));
        match store.open_object(&key) {
            Ok(o) => assert_eq!(o.len().unwrap(), 4096, "{key}"),
            Err(e) => panic!("existing object '{key}' failed to open: {e:?}"),
        }
    }
}

/// When the percent-encoded spelling of a key exists as well, a mapping of the key shows the
/// key's own bytes, not that other object's.
#[test]
fn a_key_with_reserved_characters_does_not_alias_its_encoding() {
    let Some(ep) = endpoint("a_key_with_reserved_characters_does_not_alias_its_encoding") else {
        return;
    };
    let base = unique("alias");
    let named = format!("{base}~a");
    let other = format!("{base}%7Ea");
    let plain = Plain::new(&ep);
    plain.put(&named, data(4096, 1));
    plain.put(&other, data(4096, 2));
    let store = S3Store::new(config(&ep, "")).unwrap();
    let o = store.open_object(&named).unwrap();
    let mut buf = vec![0u8; 4096];
    assert_eq!(o.read_at(&mut buf, 0).unwrap(), 4096);
    assert!(
        buf != data(4096, 2),
        "opening '{named}' read the bytes of the different object '{other}'"
    );
    assert_eq!(buf, data(4096, 1));
}

/// An empty key names no object: it is refused, not opened as the bucket itself (whose HEAD
/// answers 200, so it would map as an object of length 0), and no PUT turns into CreateBucket.
#[test]
fn an_empty_key_is_refused_not_opened_as_the_bucket() {
    let Some(ep) = endpoint("an_empty_key_is_refused_not_opened_as_the_bucket") else {
        return;
    };
    let store = S3Store::new(config(&ep, "")).unwrap();
    let bucket_url = format!("s3://{}/", common::bucket());
    for name in ["", "/", bucket_url.as_str()] {
        match store.open(name, OpenOptions::read_only()) {
            Err(Error::BadArgument(_)) | Err(Error::NotFound { .. }) => {}
            Err(e) => panic!("'{name}': expected BadArgument or NotFound, got {e:?}"),
            Ok(o) => panic!(
                "'{name}' names no object but opened as '{}' with length {:?}",
                o.name(),
                o.len()
            ),
        }
    }
}

/// `max_in_flight(usize::MAX)` means no limit, and reads work under it (tokio's semaphore
/// panics above `MAX_PERMITS`).
#[test]
fn an_unbounded_max_in_flight_reads_instead_of_panicking() {
    let Some(ep) = endpoint("an_unbounded_max_in_flight_reads_instead_of_panicking") else {
        return;
    };
    let key = unique("inflight");
    Plain::new(&ep).put(&key, data(8192, 3));
    let store = S3Store::new(config(&ep, "").max_in_flight(usize::MAX)).unwrap();
    let o = store.open_object(&key).unwrap();
    let mut buf = vec![0u8; 4096];
    match catch_unwind(AssertUnwindSafe(|| o.read_at(&mut buf, 0))) {
        Err(_) => panic!("read_at panicked with max_in_flight(usize::MAX)"),
        Ok(r) => assert_eq!(r.unwrap(), 4096),
    }
    assert_eq!(buf, data(8192, 3)[..4096]);
}

/// An endpoint without a scheme (`AWS_ENDPOINT_URL=localhost:9000` is a common slip) is a
/// bad argument at `build()`, not a panic in object_store's signer at the first request.
#[test]
fn an_endpoint_without_a_scheme_is_a_bad_argument() {
    for ep in ["localhost:9000", "127.0.0.1:9000", "not a url"] {
        let cfg = S3Config::new("s3://b/k")
            .unwrap()
            .endpoint(ep)
            .credentials("id", "secret")
            .retries(0, Duration::from_secs(1));
        match catch_unwind(AssertUnwindSafe(|| S3Object::open(&cfg))) {
            Err(_) => panic!("endpoint {ep:?}: S3Object::open panicked"),
            Ok(Err(Error::BadArgument(_))) => {}
            Ok(other) => panic!(
                "endpoint {ep:?}: expected BadArgument, got {:?}",
                other.err()
            ),
        }
        assert!(
            matches!(cfg.build(), Err(Error::BadArgument(_))),
            "endpoint {ep:?}: build() accepted it"
        );
    }
}

/// A session token that is no valid header value (a trailing newline from a token file) is a
/// bad argument, not a panic in object_store's header construction.
#[test]
fn a_session_token_with_a_newline_is_a_bad_argument() {
    let cfg = S3Config::new("s3://b/k")
        .unwrap()
        .endpoint("http://127.0.0.1:9")
        .credentials("id", "secret")
        .session_token("tok3n\n")
        .retries(0, Duration::from_secs(1))
        .timeouts(Duration::from_secs(1), Duration::from_millis(200));
    match catch_unwind(AssertUnwindSafe(|| S3Object::open(&cfg))) {
        Err(_) => panic!("S3Object::open panicked on a session token with a newline"),
        Ok(Err(Error::BadArgument(_))) => {}
        Ok(other) => panic!("expected BadArgument, got {:?}", other.err()),
    }
}

/// A session token without the key pair it belongs to is refused, as half a key pair is
/// (object_store would drop it and fall back to the instance-metadata credential chain).
#[test]
fn a_session_token_without_keys_is_refused() {
    let cfg = S3Config::new("s3://b/k")
        .unwrap()
        .endpoint("http://127.0.0.1:9")
        .session_token("tok3n");
    assert!(
        matches!(cfg.build(), Err(Error::BadArgument(_))),
        "a session token without an access key id and secret was accepted and ignored"
    );
}

/// A key ending in `/` or holding `//` would be read as another key (the client drops empty
/// segments): both are refused, as is a chunked prefix that the client cannot spell.
#[test]
fn keys_the_client_would_respell_are_refused() {
    let Some(ep) = endpoint("keys_the_client_would_respell_are_refused") else {
        return;
    };
    let store = S3Store::new(config(&ep, "")).unwrap();
    let base = unique("respell");
    Plain::new(&ep).put(&base, data(4096, 4));
    for name in [format!("{base}/"), format!("a//{base}")] {
        let r = store.open(&name, OpenOptions::read_only());
        assert!(
            matches!(r, Err(Error::BadArgument(_))),
            "'{name}': {:?}",
            r.err()
        );
    }
    let r = store.open_chunked("a//b", OpenOptions::create());
    assert!(matches!(r, Err(Error::BadArgument(_))), "{:?}", r.err());
}

/// A chunked prefix with reserved characters stores its chunks and manifest under exactly that
/// prefix, where other S3 clients find them.
#[test]
fn chunked_prefixes_are_spelled_as_given() {
    let Some(ep) = endpoint("chunked_prefixes_are_spelled_as_given") else {
        return;
    };
    let store = S3Store::new(config(&ep, "")).unwrap();
    let prefix = format!("{}~[x]", unique("chunked-chars"));
    let o = store.open_chunked(&prefix, OpenOptions::create()).unwrap();
    o.set_len(4096).unwrap();
    o.write_at(&data(4096, 5), 0).unwrap();
    o.sync().unwrap();
    let plain = Plain::new(&ep);
    let chunk = plain
        .get(&format!("{prefix}/00000000"))
        .expect("the chunk under the prefix as spelled");
    assert_eq!(chunk[..4096], data(4096, 5)[..]);
    assert!(plain.get(&format!("{prefix}/manifest")).is_some());
}

/// Keys with spaces and non-ASCII characters still open (they needed no encoding before).
#[test]
fn keys_with_spaces_and_unicode_still_open() {
    let Some(ep) = endpoint("keys_with_spaces_and_unicode_still_open") else {
        return;
    };
    let store = S3Store::new(config(&ep, "")).unwrap();
    for tag in [" with space", "-ünïcødé-日本", "/dir with space/x y"] {
        let key = format!("{}{tag}", unique("k"));
        Plain::new(&ep).put(&key, data(4096, 7));
        let o = store
            .open_object(&key)
            .unwrap_or_else(|e| panic!("'{key}': {e}"));
        assert_eq!(o.len().unwrap(), 4096, "{key}");
    }
}

/// A chunked prefix given with a trailing `/` (or several) is the same prefix as without.
#[test]
fn a_chunked_prefix_with_a_trailing_slash_still_opens() {
    let Some(ep) = endpoint("a_chunked_prefix_with_a_trailing_slash_still_opens") else {
        return;
    };
    let store = Arc::new(S3Store::chunked(config(&ep, ""), 1 << 20).unwrap());
    let prefix = unique("slash");
    {
        let c = Cache::new(CacheOptions::new(16 << 20)).unwrap();
        let m = c
            .map(
                store.clone(),
                &format!("{prefix}/"),
                MapOptions::new().writable(true).create(true).len(1 << 20),
            )
            .unwrap();
        m.pin_exclusive(0).unwrap()[..3].copy_from_slice(b"abc");
        m.msync(0, 1 << 20).unwrap();
    }
    let o = store
        .open_chunked(&format!("{prefix}//"), OpenOptions::read_write())
        .unwrap();
    let mut buf = vec![0u8; 4096];
    o.read_at(&mut buf, 0).unwrap();
    assert_eq!(&buf[..3], b"abc");
}

/// A chunked prefix holding a character that `Path::from` percent-encodes, written before keys
/// were spelled verbatim, lives under the encoded spelling (`p%7E1/manifest`, ...): it is still
/// found under its name, not reported missing (or created again, empty).
#[test]
fn a_chunked_prefix_written_under_the_old_spelling_is_still_found() {
    let Some(ep) = endpoint("a_chunked_prefix_written_under_the_old_spelling_is_still_found")
    else {
        return;
    };
    let base = unique("legacy");
    let prefix = format!("{base}~1");
    let plain = Plain::new(&ep);
    // Exactly the old code's calls: `Path::from(format!("{prefix}/manifest"))` and
    // `Path::from(chunk_key(0))`, through an object_store client of the same configuration.
    let client = config(&ep, "").build().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut chunk = vec![0u8; 1 << 20];
    chunk[..4096].copy_from_slice(&data(4096, 9));
    for (key, bytes) in [
        (
            format!("{prefix}/manifest"),
            b"ucache-chunked 1\nlength 4096\nchunk_size 1048576\n".to_vec(),
        ),
        (format!("{prefix}/00000000"), chunk),
    ] {
        rt.block_on(client.put(&Path::from(key.as_str()), PutPayload::from(bytes)))
            .unwrap();
    }
    // Where that put them: under the encoded spelling.
    assert!(plain.get(&format!("{base}%7E1/manifest")).is_some());
    let store = S3Store::chunked(config(&ep, ""), 1 << 20).unwrap();
    let o = store
        .open_chunked(&format!("{base}~1"), OpenOptions::read_write())
        .unwrap_or_else(|e| panic!("the prefix written under the old spelling is gone: {e}"));
    let mut buf = vec![0u8; 4096];
    o.read_at(&mut buf, 0).unwrap();
    assert_eq!(buf, data(4096, 9));
}
