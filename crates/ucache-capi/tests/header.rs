//! The checked-in include/ucache.h is what cbindgen generates from the sources now.

use std::path::Path;

#[test]
fn checked_in_header_is_current() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(dir.join("cbindgen.toml")).expect("cbindgen.toml");
    let mut fresh = Vec::new();
    cbindgen::Builder::new()
        .with_crate(dir)
        .with_config(config)
        .generate()
        .expect("cbindgen failed")
        .write(&mut fresh);
    let path = dir.join("include/ucache.h");
    if std::env::var_os("UCACHE_BLESS_HEADER").is_some() {
        std::fs::write(&path, &fresh).expect("write include/ucache.h");
        return;
    }
    let checked_in = std::fs::read(&path).unwrap_or_default();
    assert!(
        checked_in == fresh,
        "include/ucache.h differs from what cbindgen generates from the sources; regenerate \
         it with `bash crates/ucache-capi/scripts/gen-header.sh` and commit it"
    );
}
