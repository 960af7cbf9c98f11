//! Where an object lives and how to reach it: `s3://bucket/key`, endpoint, region,
//! credentials, and the timeouts and retries every request runs under.
//!
//! Credentials come from the standard AWS environment variables ([`S3Config::from_env`]) or from
//! explicit options, never from a file this crate reads on its own, so what a program uses is
//! what it was given. [`S3Config`]'s `Debug` redacts the access key id, the secret and the
//! session token because configurations end up in logs and panic messages, and building a
//! client registers them with [`crate::redact`], which scrubs them out of every error text.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use object_store::aws::AmazonS3Builder;
use object_store::path::Path;
use object_store::{BackoffConfig, ClientOptions, ObjectStore, RetryConfig};
use tokio::sync::Semaphore;
use ucache::{Error, Result};

use crate::coalesce::Coalesce;

/// [`S3Config::coalesce_gap`]'s default: 1 MiB, below the time-to-first-byte × bandwidth
/// product of both AWS S3 (~30 ms × ~100 MB/s per connection) and a server on the same host
/// (~2.5 ms × ~1 GB/s, docs/results/2026-11-26-s3-gaps).
pub const DEFAULT_COALESCE_GAP: usize = 1 << 20;

/// A bucket and key (or key prefix) plus everything needed to talk to the server.
///
/// ```
/// use ucache_object::S3Config;
///
/// let cfg = S3Config::new("s3://data/tables/orders.bin")
///     .unwrap()
///     .endpoint("http://127.0.0.1:8333")
///     .credentials("AKIDEXAMPLE", "wJalrXUtnFEMI");
/// assert_eq!(cfg.bucket(), "data");
/// assert_eq!(cfg.key(), "tables/orders.bin");
/// assert!(!format!("{cfg:?}").contains("wJalrXUtnFEMI"));
/// ```
#[derive(Clone)]
pub struct S3Config {
    bucket: String,
    key: String,
    endpoint: Option<String>,
    region: Option<String>,
    access_key_id: Option<String>,
    secret_access_key: Option<String>,
    session_token: Option<String>,
    allow_http: Option<bool>,
    request_timeout: Duration,
    connect_timeout: Duration,
    max_retries: usize,
    retry_timeout: Duration,
    max_in_flight: usize,
    coalesce: Coalesce,
    runtime_threads: usize,
}

impl S3Config {
    /// Parses `s3://bucket/key`. The key may be empty only for configurations used to open
    /// other keys of the same bucket through [`crate::S3Store`].
    pub fn new(url: &str) -> Result<Self> {
        let rest = url.strip_prefix("s3://").ok_or_else(|| {
            Error::BadArgument(format!("'{url}' is not an s3:// URL (s3://bucket/key)"))
        })?;
        let (bucket, key) = rest.split_once('/').unwrap_or((rest, ""));
        if bucket.is_empty() {
            return Err(Error::BadArgument(format!("'{url}' names no bucket")));
        }
        Ok(S3Config {
            bucket: bucket.to_string(),
            key: key.trim_start_matches('/').to_string(),
            endpoint: None,
            region: None,
            access_key_id: None,
            secret_access_key: None,
            session_token: None,
            allow_http: None,
            request_timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(2),
            max_retries: 3,
            retry_timeout: Duration::from_secs(10),
            max_in_flight: 64,
            coalesce: Coalesce {
                limit: 8 << 20,
                gap: DEFAULT_COALESCE_GAP,
            },
            runtime_threads: 2,
        })
    }

    /// Like [`S3Config::new`], then fills endpoint, region and credentials from the standard
    /// variables: `AWS_ENDPOINT_URL` (or `UCACHE_S3_ENDPOINT`), `AWS_REGION` (or
    /// `AWS_DEFAULT_REGION`), `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`.
    pub fn from_env(url: &str) -> Result<Self> {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        let mut c = Self::new(url)?;
        c.endpoint = var("AWS_ENDPOINT_URL").or_else(|| var("UCACHE_S3_ENDPOINT"));
        c.region = var("AWS_REGION").or_else(|| var("AWS_DEFAULT_REGION"));
        c.access_key_id = var("AWS_ACCESS_KEY_ID");
        c.secret_access_key = var("AWS_SECRET_ACCESS_KEY");
        c.session_token = var("AWS_SESSION_TOKEN");
        Ok(c)
    }

    /// The server, for S3-compatible stores (SeaweedFS, MinIO, Ceph); AWS otherwise. Requests
    /// use path-style URLs (`endpoint/bucket/key`), which every such server accepts.
    pub fn endpoint(mut self, url: impl Into<String>) -> Self {
        self.endpoint = Some(url.into());
        self
    }

    pub fn region(mut self, region: impl Into<String>) -> Self {
        self.region = Some(region.into());
        self
    }

    pub fn credentials(mut self, access_key_id: &str, secret_access_key: &str) -> Self {
        self.access_key_id = Some(access_key_id.to_string());
        self.secret_access_key = Some(secret_access_key.to_string());
        self
    }

    pub fn session_token(mut self, token: impl Into<String>) -> Self {
        self.session_token = Some(token.into());
        self
    }

    /// Plain HTTP. On by default only for loopback endpoints (a test server); anywhere else
    /// unencrypted requests would carry signed credentials and data in the clear, so they must
    /// be asked for.
    pub fn allow_http(mut self, allow: bool) -> Self {
        self.allow_http = Some(allow);
        self
    }

    /// Longest one request may take, and longest a connection attempt may take.
    pub fn timeouts(mut self, request: Duration, connect: Duration) -> Self {
        self.request_timeout = request;
        self.connect_timeout = connect;
        self
    }

    /// Retries of a failed request (with exponential backoff) and the total time spent on
    /// them. Kept short by default: a cache miss blocks a thread, and a write-back that fails
    /// leaves its data dirty for a later retry anyway.
    pub fn retries(mut self, max_retries: usize, total: Duration) -> Self {
        self.max_retries = max_retries;
        self.retry_timeout = total;
        self
    }

    /// Requests one object keeps in flight at most (each batch of misses and each write-back
    /// batch runs up to this many GETs or PUTs at once). `usize::MAX` means no limit.
    pub fn max_in_flight(mut self, n: usize) -> Self {
        self.max_in_flight = n.clamp(1, Semaphore::MAX_PERMITS);
        self
    }

    /// Largest GET that the misses of one batch are merged into.
    pub fn coalesce_limit(mut self, bytes: usize) -> Self {
        self.coalesce.limit = bytes;
        self
    }

    /// Largest gap between two misses of one batch that a GET reads through (dropping the
    /// gap's bytes) rather than split into two GETs ([`crate::coalesce`]). Worth it up to
    /// about the server's time to first byte times its bandwidth; 0 merges only misses that
    /// touch. Default [`DEFAULT_COALESCE_GAP`].
    pub fn coalesce_gap(mut self, bytes: usize) -> Self {
        self.coalesce.gap = bytes;
        self
    }

    /// Worker threads of the store's tokio runtime. Two suffice to keep hundreds of requests
    /// in flight: they only drive sockets, the bytes are copied on the cache's threads.
    pub fn runtime_threads(mut self, n: usize) -> Self {
        self.runtime_threads = n.max(1);
        self
    }

    pub fn bucket(&self) -> &str {
        &self.bucket
    }
    pub fn key(&self) -> &str {
        &self.key
    }
    pub fn endpoint_url(&self) -> Option<&str> {
        self.endpoint.as_deref()
    }
    pub(crate) fn in_flight(&self) -> usize {
        self.max_in_flight
    }
    pub(crate) fn coalescing(&self) -> Coalesce {
        self.coalesce
    }
    pub(crate) fn threads(&self) -> usize {
        self.runtime_threads
    }

    /// The same settings for another key of the bucket.
    pub fn with_key(&self, key: &str) -> Self {
        let mut c = self.clone();
        c.key = key.trim_start_matches('/').to_string();
        c
    }

    /// `s3://bucket/key`, the name errors report.
    pub fn url(&self) -> String {
        format!("s3://{}/{}", self.bucket, self.key)
    }

    /// The key as the client's path, spelled exactly as given. (`Path::from` would
    /// percent-encode characters such as `~`, `[` or `%`, and so ask the server for another
    /// key, which may even exist.) A key that names no object is refused: an empty one would
    /// address the bucket itself, and one ending in `/` or holding `//` would be read as another.
    pub(crate) fn object_path(&self) -> Result<Path> {
        let bad = |why: &str| Error::BadArgument(format!("{}: {why}", self.url()));
        if self.key.is_empty() {
            return Err(bad("names a bucket, not an object"));
        }
        if self.key.ends_with('/') {
            return Err(bad("ends in '/', which names a folder, not an object"));
        }
        Path::parse(&self.key).map_err(|e| bad(&format!("is not a usable object key ({e})")))
    }

    /// Refuses what the client would take and then fail on, or panic on, at its first request.
    fn check(&self) -> Result<()> {
        let bad = |what: String| Error::BadArgument(format!("{}: {what}", self.url()));
        if let Some(e) = &self.endpoint {
            let shown = redact_endpoint(e);
            match url::Url::parse(e) {
                Ok(u) if matches!(u.scheme(), "http" | "https") && u.has_host() => {
                    // Refused rather than passed on: the client would print it in every
                    // transport error, and S3 authenticates by signing, not by user info.
                    if !u.username().is_empty() || u.password().is_some() {
                        return Err(bad(format!(
                            "endpoint '{shown}' carries user info (user:password@); give the \
                             credentials with S3Config::credentials or the AWS_* variables"
                        )));
                    }
                }
                _ => {
                    return Err(bad(format!(
                        "endpoint '{shown}' is not an http:// or https:// URL with a host"
                    )))
                }
            }
        }
        for (what, v) in [
            ("access key id", &self.access_key_id),
            ("secret access key", &self.secret_access_key),
            ("session token", &self.session_token),
        ] {
            // These travel in HTTP headers; a control character (often a newline read from a
            // file with the value) is never part of a valid one.
            if v.as_deref()
                .is_some_and(|v| v.chars().any(char::is_control))
            {
                return Err(bad(format!("the {what} holds a control character")));
            }
        }
        if self.session_token.is_some() && self.access_key_id.is_none() {
            return Err(bad(
                "a session token needs the access key id and secret it was issued with".into(),
            ));
        }
        Ok(())
    }

    fn loopback(&self) -> bool {
        self.endpoint.as_deref().is_some_and(|e| {
            let rest = e.strip_prefix("http://").unwrap_or(e);
            let host = if rest.starts_with('[') {
                // IPv6: the host is everything up to the closing bracket.
                rest.split_inclusive(']').next().unwrap_or("")
            } else {
                rest.split(['/', ':']).next().unwrap_or("")
            };
            matches!(host, "127.0.0.1" | "localhost" | "[::1]")
        })
    }

    /// The object_store client for the bucket.
    pub fn build(&self) -> Result<Arc<dyn ObjectStore>> {
        self.check()?;
        let mut b = AmazonS3Builder::new()
            .with_bucket_name(&self.bucket)
            .with_region(self.region.as_deref().unwrap_or("us-east-1"))
            // allow_http is a client option: set on the builder, the client options below
            // would reset it.
            .with_client_options(
                ClientOptions::new()
                    .with_allow_http(self.allow_http.unwrap_or_else(|| self.loopback()))
                    .with_timeout(self.request_timeout)
                    .with_connect_timeout(self.connect_timeout)
                    .with_pool_max_idle_per_host(self.max_in_flight.max(8)),
            )
            .with_retry(RetryConfig {
                backoff: BackoffConfig {
                    init_backoff: Duration::from_millis(50),
                    max_backoff: Duration::from_secs(1),
                    base: 2.0,
                },
                max_retries: self.max_retries,
                retry_timeout: self.retry_timeout,
            });
        if let Some(e) = &self.endpoint {
            b = b.with_endpoint(e);
        }
        match (&self.access_key_id, &self.secret_access_key) {
            (Some(id), Some(secret)) => {
                b = b.with_access_key_id(id).with_secret_access_key(secret);
            }
            (None, None) => {}
            _ => {
                return Err(Error::BadArgument(format!(
                    "{}: an access key id needs a secret access key and vice versa",
                    self.url()
                )))
            }
        }
        if let Some(t) = &self.session_token {
            b = b.with_token(t);
        }
        crate::redact::register(
            [
                &self.access_key_id,
                &self.secret_access_key,
                &self.session_token,
            ]
            .into_iter()
            .flatten()
            .map(String::as_str),
        );
        let store = b.build().map_err(|e| {
            Error::BadArgument(crate::redact::scrub(&format!("{}: {e}", self.url())))
        })?;
        Ok(Arc::new(store))
    }
}

/// `url` with its user info (`user:password@`), if it has any, replaced by `***`, for messages
/// and logs. Works on strings that do not parse as URLs too, since those are the ones error
/// messages quote.
///
/// ```
/// use ucache_object::redact_endpoint;
///
/// assert_eq!(redact_endpoint("http://ak:s3cr3t@127.0.0.1:8333/x"), "http://***@127.0.0.1:8333/x");
/// assert_eq!(redact_endpoint("http://127.0.0.1:8333"), "http://127.0.0.1:8333");
/// ```
pub fn redact_endpoint(url: &str) -> String {
    // Without a `scheme://`, where the host begins is anyone's guess: everything before the
    // last `@` goes.
    let (start, ends) = match url.find("://") {
        Some(i) => (i + 3, &['/', '?', '#'][..]),
        None => (0, &['?', '#'][..]),
    };
    let rest = &url[start..];
    let authority = &rest[..rest.find(ends).unwrap_or(rest.len())];
    match authority.rfind('@') {
        Some(at) => format!("{}***{}", &url[..start], &url[start + at..]),
        None => url.to_string(),
    }
}

impl fmt::Debug for S3Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let redact = |v: &Option<String>| v.as_ref().map(|_| "<redacted>");
        f.debug_struct("S3Config")
            .field("bucket", &self.bucket)
            .field("key", &self.key)
            .field("endpoint", &self.endpoint.as_deref().map(redact_endpoint))
            .field("region", &self.region)
            .field("access_key_id", &redact(&self.access_key_id))
            .field("secret_access_key", &redact(&self.secret_access_key))
            .field("session_token", &redact(&self.session_token))
            .field("allow_http", &self.allow_http)
            .field("request_timeout", &self.request_timeout)
            .field("max_retries", &self.max_retries)
            .field("max_in_flight", &self.max_in_flight)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_bucket_and_key() {
        let c = S3Config::new("s3://b/dir/k.bin").unwrap();
        assert_eq!((c.bucket(), c.key()), ("b", "dir/k.bin"));
        assert_eq!(c.url(), "s3://b/dir/k.bin");
        let c = S3Config::new("s3://b").unwrap();
        assert_eq!((c.bucket(), c.key()), ("b", ""));
        assert!(S3Config::new("http://b/k").is_err());
        assert!(S3Config::new("s3:///k").is_err());
    }

    #[test]
    fn debug_redacts_secrets() {
        let c = S3Config::new("s3://b/k")
            .unwrap()
            .credentials("AKID", "topsecret")
            .session_token("tok3n");
        let d = format!("{c:?}");
        assert_eq!(d.matches("<redacted>").count(), 3, "{d}");
        for s in ["AKID", "topsecret", "tok3n"] {
            assert!(!d.contains(s), "{d}");
        }
    }

    #[test]
    fn http_only_for_loopback_unless_asked() {
        let c = S3Config::new("s3://b/k").unwrap();
        assert!(c.clone().endpoint("http://127.0.0.1:9000").loopback());
        assert!(c.clone().endpoint("http://localhost:9000/").loopback());
        assert!(c.clone().endpoint("http://[::1]:9000").loopback());
        assert!(!c.clone().endpoint("http://[2001:db8::1]:9000").loopback());
        assert!(!c.clone().endpoint("http://example.com").loopback());
        assert!(!c
            .clone()
            .endpoint("http://127.0.0.1.example.com")
            .loopback());
        assert!(!c.loopback());
    }

    #[test]
    fn half_credentials_are_refused() {
        let mut c = S3Config::new("s3://b/k").unwrap();
        c.access_key_id = Some("x".into());
        assert!(matches!(c.build(), Err(Error::BadArgument(_))));
    }
}
