//! A missing bucket is not a missing key: SeaweedFS, like S3, answers `NoSuchBucket` for the
//! one and `NoSuchKey` for the other, and the cache reports `BucketNotFound` and `NotFound`.
//! Skips without a server unless `UCACHE_S3_REQUIRED=1` (see `common::endpoint`).

mod common;

use std::sync::Arc;

use common::{config, endpoint, unique};
use ucache::store::{OpenOptions, Store};
use ucache::{Cache, CacheOptions, Error, MapOptions};
use ucache_object::{S3Config, S3Store};

fn in_missing_bucket(ep: &str) -> (String, S3Config) {
    let bucket = unique("ucache-no-such-bucket").to_lowercase();
    let cfg = S3Config::from_env(&format!("s3://{bucket}/k"))
        .unwrap()
        .endpoint(ep);
    (bucket, cfg)
}

#[test]
fn a_missing_bucket_is_not_a_missing_key() {
    let Some(ep) = endpoint("a_missing_bucket_is_not_a_missing_key") else {
        return;
    };
    let cache = Cache::new(CacheOptions::new(1 << 20)).unwrap();
    let (bucket, cfg) = in_missing_bucket(&ep);
    let store = Arc::new(S3Store::new(cfg).unwrap());
    match cache.map(store, "k", MapOptions::new()) {
        Err(e @ Error::BucketNotFound { .. }) => assert_eq!(
            e.to_string(),
            format!("bucket '{bucket}' of object 's3://{bucket}/k' does not exist")
        ),
        other => panic!("expected BucketNotFound, got {other:?}"),
    }

    let key = unique("absent-key");
    let store = Arc::new(S3Store::new(config(&ep, "")).unwrap());
    match cache.map(store, &key, MapOptions::new()) {
        Err(e @ Error::NotFound { .. }) => assert_eq!(
            e.to_string(),
            format!("object 's3://{}/{key}' not found", common::bucket())
        ),
        other => panic!("expected NotFound, got {other:?}"),
    }
}

#[test]
fn a_chunked_prefix_in_a_missing_bucket_is_not_created() {
    let Some(ep) = endpoint("a_chunked_prefix_in_a_missing_bucket_is_not_created") else {
        return;
    };
    let (bucket, cfg) = in_missing_bucket(&ep);
    let store = S3Store::chunked(cfg, 1 << 16).unwrap();
    for create in [false, true] {
        let r = store.open(
            "p",
            OpenOptions {
                write: create,
                create,
            },
        );
        match r {
            Err(Error::BucketNotFound { bucket: b, object }) => {
                assert_eq!(b, bucket);
                assert_eq!(object, format!("s3://{bucket}/p"));
            }
            Err(other) => panic!("create {create}: expected BucketNotFound, got {other:?}"),
            Ok(_) => panic!("create {create}: opened a prefix in a missing bucket"),
        }
    }
}
