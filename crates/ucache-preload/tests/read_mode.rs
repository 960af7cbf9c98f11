//! Read mode (`UCACHE_READS=1`): tests/c/reads.c checks every `pread` the shim serves against
//! the kernel's bytes (threads, reopening, a descriptor reused behind the shim's back, writes
//! and truncation through other descriptors, errors), under budgets that do and do not hold
//! the file; the statistics must show that the shim served the reads, from its cache.

mod common;

use std::path::Path;
use std::process::Command;

use common::*;

/// A number from the shim's read-mode statistics line: the count before `what`.
fn read_mode_count(stderr: &[u8], what: &str) -> u64 {
    let s = text(stderr);
    let line = s
        .lines()
        .find_map(|l| l.strip_prefix("ucache-preload: read mode: "))
        .unwrap_or_else(|| panic!("no read-mode statistics in:\n{s}"));
    let words: Vec<&str> = line.split([' ', ',']).filter(|w| !w.is_empty()).collect();
    let at = words
        .iter()
        .position(|w| *w == what)
        .unwrap_or_else(|| panic!("no '{what}' in '{line}'"));
    words[at - 1].parse().unwrap()
}

/// The cache's hits, from the shim's statistics line.
fn hits(stderr: &[u8]) -> u64 {
    let s = text(stderr);
    let at = s.find("hits: ").expect("no hits in the statistics") + "hits: ".len();
    s[at..].split(',').next().unwrap().parse().unwrap()
}

#[test]
fn served_preads_equal_the_kernels_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/reads.c");
    let prog = compile(&src, dir.path(), "reads", &["-pthread"]);
    let file = dir.path().join("data.dat");
    let other = dir.path().join("other.txt");
    let glob = format!("{}/*.dat", dir.path().display());
    let cmd = || {
        let mut c = Command::new(&prog);
        c.arg(&file).arg(&other);
        c
    };
    assert_eq!(ok(&run(cmd()), "plain"), "ok\n");
    // 8 MiB holds the 3 MiB file; 256 KiB does not (every thread's reads evict).
    for (memory, bs) in [("8MiB", "64KiB"), ("256KiB", "4KiB"), ("256KiB", "64KiB")] {
        let mut c = under_shim(cmd(), &glob, memory);
        c.env("UCACHE_READS", "1").env("UCACHE_BUFFER_SIZE", bs);
        let out = run(c);
        assert_eq!(ok(&out, &format!("read mode, {memory}, {bs}")), "ok\n");
        let served = read_mode_count(&out.stderr, "preads");
        let mapped = read_mode_count(&out.stderr, "file");
        // 12,000 preads in the threads (an eighth of 0 bytes, some past the end: served
        // too), more after; mapped again after the write and the truncation.
        assert!(served > 12_000, "{memory}, {bs}: {served} preads served");
        assert!(mapped >= 3, "{memory}, {bs}: {mapped} mappings");
        assert!(hits(&out.stderr) > 0, "{memory}, {bs}: no hits");
    }
}

#[test]
fn without_read_mode_preads_go_to_the_kernel() {
    let dir = tempfile::tempdir().unwrap();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/reads.c");
    let prog = compile(&src, dir.path(), "reads", &["-pthread"]);
    let glob = format!("{}/*.dat", dir.path().display());
    let mut c = Command::new(&prog);
    c.arg(dir.path().join("data.dat"))
        .arg(dir.path().join("other.txt"));
    let out = run(under_shim(c, &glob, "8MiB"));
    assert_eq!(ok(&out, "shim without read mode"), "ok\n");
    assert!(
        !text(&out.stderr).contains("read mode:"),
        "{}",
        text(&out.stderr)
    );
    assert!(text(&out.stderr).contains("no cache made"));
}

#[test]
fn a_bad_reads_value_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/reads.c");
    let prog = compile(&src, dir.path(), "reads", &["-pthread"]);
    let mut c = Command::new(&prog);
    c.arg(dir.path().join("data.dat"))
        .arg(dir.path().join("other.txt"));
    let mut c = under_shim(c, "*.dat", "8MiB");
    c.env("UCACHE_READS", "yes");
    let out = run(c);
    assert_eq!(ok(&out, "bad UCACHE_READS"), "ok\n");
    let err = text(&out.stderr);
    assert!(err.contains("UCACHE_READS='yes' must be 0 or 1"), "{err}");
}
