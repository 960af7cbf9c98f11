//! `ucache sim`'s CSV reader on files as spreadsheets write them (quoted fields, a byte-order
//! mark), each case found by review (2026-11-25) and failing before its fix.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

/// Runs `ucache sim` on `trace` (written to a temporary file) and returns its JSON report.
fn sim_json(trace: &[u8], args: &[&str]) -> Result<Value, String> {
    let dir = tempfile::tempdir().unwrap();
    let t = dir.path().join("trace");
    std::fs::write(&t, trace).unwrap();
    let j = dir.path().join("r.json");
    let o = Command::new(env!("CARGO_BIN_EXE_ucache"))
        .arg("sim")
        .args([
            "--trace",
            t.to_str().unwrap(),
            "--json",
            j.to_str().unwrap(),
            "--quiet",
        ])
        .args(args)
        .output()
        .expect("run ucache");
    if !o.status.success() {
        return Err(String::from_utf8_lossy(&o.stderr).into_owned());
    }
    Ok(read(&j))
}

fn read(p: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

/// A quoted field holding a comma does not shift the columns after it. Split on every comma,
/// column 3 used to read 7, 7, 44 instead of 42, 43, 44: two distinct ids for three, silently.
#[test]
fn csv_quoted_field_with_a_comma_does_not_shift_the_columns() {
    let csv = b"time,path,block\n1,\"/x,7\",42\n2,\"/y,7\",43\n3,\"/z\",44\n";
    let v = sim_json(
        csv,
        &[
            "--format",
            "csv",
            "--column",
            "3",
            "--sizes",
            "1",
            "--policies",
            "lru",
        ],
    )
    .unwrap_or_else(|e| panic!("refused a well-formed CSV: {e}"));
    assert_eq!(v["trace"]["requests"], 3, "{v}");
    assert_eq!(v["trace"]["unique"], 3, "ids 42, 43, 44 mis-read: {v}");
}

/// A byte-order mark (Excel, PowerShell) before a header-less CSV is not part of the first
/// field; the first request used to be taken for a header and dropped.
#[test]
fn csv_byte_order_mark_does_not_drop_the_first_request() {
    let v = sim_json(
        b"\xef\xbb\xbf5\n6\n5\n",
        &["--format", "csv", "--sizes", "1", "--policies", "lru"],
    )
    .unwrap();
    assert_eq!(v["trace"]["requests"], 3, "{v}");
}
