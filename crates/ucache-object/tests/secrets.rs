//! Credentials are never printed: not the secret access key, not the session token, not the
//! password of an endpoint URL that carries user info (`http://user:secret@host`). Every error
//! a failing S3 run produces (a bad endpoint, a refused connection, wrong credentials on a
//! live server) is collected, with its `Display`, its `Debug` and its source chain, together
//! with the `Debug` of the configuration and the store, and searched for the secrets. A fake
//! server whose 403 answers echo the request's headers, as AWS's `SignatureDoesNotMatch` and
//! `InvalidToken` bodies do, checks that what a server sends back is scrubbed too.

mod common;

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use ucache::store::{OpenOptions, Store};
use ucache::{Cache, CacheOptions, MapOptions};
use ucache_object::{redact_endpoint, S3Config, S3Store};

const SECRET: &str = "Sekr1tAccessKeyNeverPrinted";
const TOKEN: &str = "T0kenOfTheSessionNeverPrinted";
const URL_PASSWORD: &str = "Passw0rdInTheEndpointURL";
const ACCESS_KEY: &str = "AKIAAccessKeyIdNeverPrinted";

/// Every way an error can be shown: Display, Debug and each source's Display.
fn all_forms(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = format!("{e}\n{e:?}\n");
    let mut src = e.source();
    while let Some(x) = src {
        let _ = writeln!(s, "{x}\n{x:?}");
        src = x.source();
    }
    s
}

fn assert_no_secret(what: &str, text: &str) {
    for secret in [SECRET, TOKEN, URL_PASSWORD, ACCESS_KEY] {
        assert!(
            !text.contains(secret),
            "{what} prints a credential ({secret}):\n{text}"
        );
    }
}

/// A port on 127.0.0.1 nothing listens on.
fn closed_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

fn quick(cfg: S3Config) -> S3Config {
    cfg.retries(1, Duration::from_secs(2))
        .timeouts(Duration::from_secs(5), Duration::from_secs(2))
}

/// Opens, creates, uploads and maps through `cfg`, all expected to fail; returns everything
/// they print.
fn failing_run(cfg: S3Config) -> String {
    let mut out = format!("{cfg:?}\n");
    let store = match S3Store::new(cfg.clone()) {
        Ok(s) => s,
        Err(e) => {
            out += &all_forms(&e);
            return out;
        }
    };
    let _ = writeln!(out, "{store:?}");
    match store.open_object(cfg.key()) {
        Ok(_) => panic!("opened {} through a failing server", cfg.url()),
        Err(e) => out += &all_forms(&e),
    }
    if let Err(e) = store.put(cfg.key(), vec![1; 4096]) {
        out += &all_forms(&e);
    }
    let chunked = S3Store::chunked(cfg.clone(), 4096).unwrap();
    let _ = writeln!(out, "{chunked:?}");
    let create = OpenOptions {
        write: true,
        create: true,
    };
    if let Err(e) = chunked.open_chunked(&format!("{}-chunked", cfg.key()), create) {
        out += &all_forms(&e);
    }
    let cache = Cache::new(CacheOptions::new(1 << 20)).unwrap();
    match cache.map(Arc::new(store), cfg.key(), MapOptions::new()) {
        Ok(_) => panic!("mapped {} through a failing server", cfg.url()),
        Err(e) => out += &all_forms(&e),
    }
    if let Err(e) = Store::open(&chunked, cfg.key(), OpenOptions::read_only()) {
        out += &all_forms(&e);
    }
    out
}

#[test]
fn redaction_of_endpoints() {
    for (url, want) in [
        ("http://ak:pw@127.0.0.1:1/x", "http://***@127.0.0.1:1/x"),
        ("https://ak@h", "https://***@h"),
        ("http://a:p@w@h:1/b@c", "http://***@h:1/b@c"),
        ("ak:pw@h", "***@h"),
        ("http//ak:pw@h/x", "***@h/x"),
        ("http://h:1/a@b", "http://h:1/a@b"),
        ("http://h", "http://h"),
        ("", ""),
    ] {
        assert_eq!(redact_endpoint(url), want, "{url}");
    }
}

/// An endpoint URL with user info is refused (the client would print the URL in every
/// transport error), and neither the refusal nor the configuration's or store's `Debug`
/// quotes the password.
#[test]
fn an_endpoint_with_user_info_is_refused_without_printing_it() {
    let port = closed_port();
    for endpoint in [
        format!("http://ak:{URL_PASSWORD}@127.0.0.1:{port}"),
        format!("http://{URL_PASSWORD}@127.0.0.1:{port}/"),
        format!("https://ak:{URL_PASSWORD}@example.com"),
        // Not URLs the client takes: the message quotes them, redacted.
        format!("ftp://ak:{URL_PASSWORD}@127.0.0.1:{port}"),
        format!("ak:{URL_PASSWORD}@127.0.0.1:{port}"),
        format!("http//ak:{URL_PASSWORD}@127.0.0.1"),
    ] {
        let cfg = quick(
            S3Config::new("s3://b/k")
                .unwrap()
                .endpoint(&endpoint)
                .credentials("AKID", SECRET)
                .session_token(TOKEN),
        );
        let debug = format!("{cfg:?}");
        assert!(debug.contains("***@"), "{debug}");
        assert_no_secret("S3Config's Debug", &debug);
        let e = S3Store::new(cfg.clone()).expect_err(&endpoint);
        assert!(matches!(e, ucache::Error::BadArgument(_)), "{e:?}");
        assert_no_secret(&endpoint, &all_forms(&e));
        assert!(e.to_string().contains("***"), "{e}");
        assert_no_secret(&endpoint, &failing_run(cfg));
    }
}

/// A server that refuses connections: every error of opening, uploading, creating and
/// mapping names the object, and none prints the secret or the session token.
#[test]
fn transport_errors_never_print_credentials() {
    let endpoint = format!("http://127.0.0.1:{}", closed_port());
    let cfg = quick(
        S3Config::new("s3://ucache-test/secrets/k")
            .unwrap()
            .endpoint(&endpoint)
            .credentials("AKID", SECRET)
            .session_token(TOKEN),
    );
    let printed = failing_run(cfg);
    assert!(printed.contains("s3://ucache-test/secrets/k"), "{printed}");
    assert_no_secret("a refused connection", &printed);
}

/// A live server and wrong credentials: the server's answer (which may quote the request it
/// signed) travels in the errors, but never the secret or the session token.
#[test]
fn wrong_credentials_on_a_live_server_never_print_them() {
    let Some(endpoint) = common::endpoint("wrong_credentials_on_a_live_server_never_print_them")
    else {
        return;
    };
    let key = common::unique("secrets");
    common::Plain::new(&endpoint).put(&key, vec![7; 8192]);
    let id = std::env::var("AWS_ACCESS_KEY_ID").unwrap_or_else(|_| "AKID".into());
    for (id, token) in [
        (id.as_str(), None),
        (id.as_str(), Some(TOKEN)),
        ("NOSUCHKEY", Some(TOKEN)),
    ] {
        let mut cfg = quick(common::config(&endpoint, &key).credentials(id, SECRET));
        if let Some(t) = token {
            cfg = cfg.session_token(t);
        }
        let printed = failing_run(cfg);
        assert!(
            printed.to_lowercase().contains("denied") || printed.contains("403"),
            "{printed}"
        );
        assert_no_secret("wrong credentials", &printed);
    }
}

/// A server that answers every request with 403 and an AWS-style error body quoting the
/// request back: its headers (the `Authorization` header's `Credential=<access key id>/...`
/// and `x-amz-security-token`, as AWS's `SignatureDoesNotMatch` body quotes them in its
/// `CanonicalRequest`), the access key id, and, as a server gone wrong might, the secret.
/// Returns its endpoint and how many requests it answered.
fn echoing_server() -> (String, Arc<std::sync::atomic::AtomicU64>) {
    use std::io::{BufRead, BufReader, Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    let answered = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let count = answered.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { continue };
            let count = count.clone();
            std::thread::spawn(move || {
                let mut reader = BufReader::new(conn.try_clone().unwrap());
                let mut conn = conn;
                loop {
                    // One request: its head, then a body of Content-Length bytes.
                    let mut head = String::new();
                    let mut body_len = 0usize;
                    loop {
                        let mut line = String::new();
                        if reader.read_line(&mut line).unwrap_or(0) == 0 {
                            return;
                        }
                        if line == "\r\n" {
                            break;
                        }
                        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                            body_len = v.trim().parse().unwrap_or(0);
                        }
                        head.push_str(&line);
                    }
                    let mut body = vec![0u8; body_len];
                    if reader.read_exact(&mut body).is_err() {
                        return;
                    }
                    let head = head.replace('&', "&amp;").replace('<', "&lt;");
                    let xml = format!(
                        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error>\
                         <Code>SignatureDoesNotMatch</Code><Message>The request signature we \
                         calculated does not match the signature you provided.</Message>\
                         <AWSAccessKeyId>{ACCESS_KEY}</AWSAccessKeyId>\
                         <SecretKeyUsed>{SECRET}</SecretKeyUsed>\
                         <Token-0>{TOKEN}</Token-0>\
                         <CanonicalRequest>{head}</CanonicalRequest></Error>"
                    );
                    let head_only = head.starts_with("HEAD ");
                    let reply = format!(
                        "HTTP/1.1 403 Forbidden\r\nContent-Type: application/xml\r\n\
                         Content-Length: {}\r\n\r\n{}",
                        xml.len(),
                        if head_only { "" } else { xml.as_str() }
                    );
                    count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if conn.write_all(reply.as_bytes()).is_err() {
                        return;
                    }
                }
            });
        }
    });
    (endpoint, answered)
}

/// Every request is refused with a body that quotes the access key id, the session token and
/// the secret: the errors say access was denied and name the object, but print none of them.
#[test]
fn credentials_a_server_echoes_back_are_never_printed() {
    let (endpoint, answered) = echoing_server();
    let cfg = quick(
        S3Config::new("s3://ucache-test/secrets/echo")
            .unwrap()
            .endpoint(&endpoint)
            .credentials(ACCESS_KEY, SECRET)
            .session_token(TOKEN),
    );
    let printed = failing_run(cfg);
    assert!(
        answered.load(std::sync::atomic::Ordering::Relaxed) > 0,
        "the fake server was never asked"
    );
    assert!(
        printed.contains("s3://ucache-test/secrets/echo"),
        "{printed}"
    );
    assert!(
        printed.contains("SignatureDoesNotMatch"),
        "the server's answer travels in the errors (else this test checks nothing):\n{printed}"
    );
    assert_no_secret("a server that echoes the credentials", &printed);
}
