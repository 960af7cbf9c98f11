//! object_store's errors in the cache's terms, always naming the object.
//!
//! [`ucache::store::Object`] methods return `io::Error`, which the cache wraps with the object
//! and offset ([`ucache::Error::io`]). The mapping here picks the `io::ErrorKind` the cache
//! acts on: `NotFound` becomes [`ucache::Error::NotFound`], a changed ETag travels as a wrapped
//! [`ucache::Error::ObjectChanged`], and anything transient (server unreachable, timeouts after
//! the retries ran out) stays a plain IO error, which for a write-back keeps the data dirty and
//! resident so a later `msync` retries it.

use std::io;

use ucache::Error;

use crate::redact::scrub;

/// Converts a failed request on `object` (`what` says which part: a chunk key, "manifest").
/// What the server answered is quoted, with every credential scrubbed out of it.
pub(crate) fn to_io(object: &str, what: &str, e: object_store::Error) -> io::Error {
    use object_store::Error as E;
    match e {
        E::NotFound { .. } => io::Error::new(
            io::ErrorKind::NotFound,
            format!("{object}: {what} not found (no such bucket or key)"),
        ),
        E::Precondition { .. } => changed(object),
        E::PermissionDenied { source, .. } | E::Unauthenticated { source, .. } => io::Error::new(
            io::ErrorKind::PermissionDenied,
            scrub(&format!("{object}: {what}: access denied, check the credentials and bucket policy ({source})")),
        ),
        other => io::Error::other(scrub(&format!("{object}: {what}: {other}"))),
    }
}

/// The typed error for an object replaced behind the cache.
pub(crate) fn changed(object: &str) -> io::Error {
    io::Error::other(Error::ObjectChanged {
        object: object.to_string(),
    })
}

/// A copy of `e` for the other requests that shared its GET (io::Error is not Clone).
pub(crate) fn dup(e: &io::Error) -> io::Error {
    if let Some(Error::ObjectChanged { object }) = e.get_ref().and_then(|x| x.downcast_ref()) {
        return changed(object);
    }
    io::Error::new(e.kind(), e.to_string())
}

/// Converts an error from opening `object` into the cache's error: a missing bucket is
/// [`Error::BucketNotFound`], a missing key [`Error::NotFound`].
pub(crate) fn open_error(object: &str, what: &str, e: object_store::Error) -> Error {
    // Any kind: a LIST's 404 comes back as a generic error, with the code in its body.
    if no_such_bucket(&e) {
        return Error::BucketNotFound {
            bucket: bucket_of(object).to_string(),
            object: object.to_string(),
        };
    }
    Error::io("open", object, 0, to_io(object, what, e))
}

/// Whether `e` says the bucket itself is missing. S3 answers a request in a missing bucket
/// with 404 `NoSuchBucket` and one for a missing key with 404 `NoSuchKey` (SeaweedFS as AWS);
/// object_store reports both as `NotFound`, with the response's body in the message. A HEAD
/// response has no body, so after a HEAD [`missing_object`] asks again.
pub(crate) fn no_such_bucket(e: &object_store::Error) -> bool {
    let mut at: Option<&dyn std::error::Error> = Some(e);
    while let Some(x) = at {
        if x.to_string().contains("NoSuchBucket") {
            return true;
        }
        at = x.source();
    }
    false
}

/// The open error for a HEAD of `path` that failed with `e`: where it is a `NotFound`, one LIST
/// of the key as a prefix (a request whose 404 has a body) tells a missing bucket from a
/// missing key. Only the failing open pays for it.
pub(crate) async fn missing_object(
    client: &dyn object_store::ObjectStore,
    object: &str,
    path: &object_store::path::Path,
    e: object_store::Error,
) -> Error {
    if matches!(e, object_store::Error::NotFound { .. }) && !no_such_bucket(&e) {
        if let Err(probe) = client.list_with_delimiter(Some(path)).await {
            if no_such_bucket(&probe) {
                return open_error(object, "bucket", probe);
            }
        }
    }
    open_error(object, "object", e)
}

/// The bucket of an `s3://bucket/key` name.
fn bucket_of(object: &str) -> &str {
    let rest = object.strip_prefix("s3://").unwrap_or(object);
    rest.split('/').next().unwrap_or(rest)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn boxed(s: &str) -> Box<dyn std::error::Error + Send + Sync> {
        s.into()
    }

    #[test]
    fn kinds_the_cache_acts_on() {
        let nf = object_store::Error::NotFound {
            path: "k".into(),
            source: boxed("404"),
        };
        match open_error("s3://b/k", "object", nf) {
            Error::NotFound { object } => assert_eq!(object, "s3://b/k"),
            other => panic!("{other:?}"),
        }
        let no_bucket = object_store::Error::NotFound {
            path: "k".into(),
            source: boxed(
                "Server returned non-2xx status code: 404 Not Found: <?xml version=\"1.0\"?>\
                 <Error><Code>NoSuchBucket</Code></Error>",
            ),
        };
        match open_error("s3://b/dir/k", "object", no_bucket) {
            e @ Error::BucketNotFound { .. } => {
                assert_eq!(
                    e.to_string(),
                    "bucket 'b' of object 's3://b/dir/k' does not exist"
                )
            }
            other => panic!("{other:?}"),
        }
        let no_key = object_store::Error::NotFound {
            path: "k".into(),
            source: boxed("404 Not Found: <Error><Code>NoSuchKey</Code></Error>"),
        };
        assert!(matches!(
            open_error("s3://b/k", "object", no_key),
            Error::NotFound { .. }
        ));
        let pre = object_store::Error::Precondition {
            path: "k".into(),
            source: boxed("412"),
        };
        let e = to_io("s3://b/k", "range", pre);
        assert!(matches!(
            Error::io("read", "s3://b/k", 0, dup(&e)),
            Error::ObjectChanged { .. }
        ));
        let denied = object_store::Error::PermissionDenied {
            path: "k".into(),
            source: boxed("403"),
        };
        let e = to_io("s3://b/k", "object", denied);
        assert_eq!(e.kind(), io::ErrorKind::PermissionDenied);
        assert!(e.to_string().contains("s3://b/k"));
    }
}
