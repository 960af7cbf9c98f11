//! Scrubbing credentials out of every error text this crate produces.
//!
//! A server's error answer travels in the error object_store reports, and S3 servers quote the
//! request back: AWS's `SignatureDoesNotMatch` body holds the canonical request, whose signed
//! headers include `x-amz-security-token` (the session token) and whose `Authorization`
//! header names the access key id; `InvalidToken` quotes the token itself. Errors end up in
//! logs, panic messages and bug reports, so every text [`crate::error`] makes from a failed
//! request goes through [`scrub`], which replaces each credential a client of this process was
//! built with ([`register`], from `S3Config::build`) by `<redacted>`.
//!
//! The set is process-wide rather than carried by each object: an error can be made on any
//! path (open, read, write-back, manifest, upload), and a set that every conversion consults
//! cannot be forgotten on one of them. It only grows, by the credentials of the configurations
//! built, which those configurations hold anyway.

use std::sync::RwLock;

static SECRETS: RwLock<Vec<String>> = RwLock::new(Vec::new());

/// What replaces a credential in a text.
pub(crate) const REDACTED: &str = "<redacted>";

/// Values shorter than this are not scrubbed: a one- or two-letter "secret" (as tests against
/// local servers use) would turn every `a` or `b` of every later message into `<redacted>`,
/// and is no secret to begin with. Real credentials are far longer (AWS: 20-character key
/// ids, 40-character secrets, session tokens of hundreds).
pub(crate) const MIN_SCRUBBED: usize = 4;

/// Adds credentials to the set [`scrub`] removes, each also in its percent-encoded spelling
/// (a token with `/`, `+` or `=` appears so in query strings a server quotes). Values shorter
/// than [`MIN_SCRUBBED`] are skipped.
pub(crate) fn register<'a>(values: impl IntoIterator<Item = &'a str>) {
    let mut set = SECRETS.write().unwrap_or_else(|p| p.into_inner());
    for v in values.into_iter().filter(|v| v.len() >= MIN_SCRUBBED) {
        for form in [v.to_string(), percent_encoded(v)] {
            if !set.contains(&form) {
                set.push(form);
            }
        }
    }
    // Longest first, so that a credential containing another is removed whole.
    set.sort_by_key(|s| std::cmp::Reverse(s.len()));
}

/// `text` with every registered credential replaced by [`REDACTED`].
pub(crate) fn scrub(text: &str) -> String {
    let set = SECRETS.read().unwrap_or_else(|p| p.into_inner());
    let mut out = text.to_string();
    for s in set.iter() {
        if out.contains(s.as_str()) {
            out = out.replace(s.as_str(), REDACTED);
        }
    }
    out
}

/// `v` with every byte outside RFC 3986's unreserved set written as `%XX`, as S3 signs it.
fn percent_encoded(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for b in v.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registered_credentials_are_scrubbed_in_both_spellings() {
        register(["unit-AKID-1", "unit/se+cret=", "", "b"]);
        let text = "id unit-AKID-1, raw unit/se+cret=, query unit%2Fse%2Bcret%3D, other words";
        assert_eq!(
            scrub(text),
            "id <redacted>, raw <redacted>, query <redacted>, other words"
        );
        assert_eq!(scrub("nothing here"), "nothing here");
        assert_eq!(
            scrub("s3://bucket/key"),
            "s3://bucket/key",
            "a 1-letter value is kept"
        );
    }

    #[test]
    fn a_credential_inside_another_goes_whole() {
        register(["unit-inner", "unit-inner-and-outer"]);
        assert_eq!(scrub("[unit-inner-and-outer]"), "[<redacted>]");
    }
}
