//! `ucache bench` end to end on cache_ext's workloads and on the raw device baselines: each for
//! a second on a small file, several policies as rows of one run, the JSON parsed back.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

/// Runs one short bench; returns the parsed JSON.
fn bench(dir: &Path, workload: &str, extra: &[&str]) -> Value {
    let json = dir.join(format!("{workload}.json"));
    let o = Command::new(env!("CARGO_BIN_EXE_ucache"))
        .arg("bench")
        .arg(workload)
        .args(["--data", "32MiB", "--memory", "8MiB", "--threads", "2"])
        .args([
            "--seconds",
            "1",
            "--warmup",
            "0",
            "--reps",
            "1",
            "--no-cgroup",
        ])
        .arg("--file")
        .arg(dir.join("data.dat"))
        .arg("--json")
        .arg(&json)
        .arg("--plot")
        .arg(dir.join(format!("{workload}.svg")))
        .args(extra)
        .output()
        .expect("run ucache");
    assert!(
        o.status.success(),
        "{workload}: {}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap()
}

fn systems(v: &Value) -> Vec<String> {
    v["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            assert!(r["ops_per_sec"].as_f64().unwrap() > 0.0, "{r}");
            assert!(r["p99_us"].as_f64().unwrap() > 0.0, "{r}");
            assert_eq!(r["mismatches"], 0, "{r}");
            r["system"].as_str().unwrap().to_string()
        })
        .collect()
}

/// O_DIRECT needs a real file system; /tmp may be tmpfs.
fn dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("ucache-bench-live")
        .tempdir_in("/var/tmp")
        .unwrap()
}

#[test]
fn live_workloads_report_a_row_per_policy() {
    let d = dir();
    let v = bench(
        d.path(),
        "ycsb-a",
        &[
            "--systems",
            "ucache-explicit,mmap",
            "--policies",
            "clock,lfu",
        ],
    );
    // mmap cannot update: left out.
    assert_eq!(
        systems(&v),
        ["ucache-explicit:clock", "ucache-explicit:lfu"]
    );
    assert_eq!(v["results"][1]["policy"], "lfu");
    assert_eq!(v["config"]["policies"][1], "lfu");
    let evictions = v["results"][0]["counters"]["evictions"].as_u64().unwrap();
    assert!(evictions > 0, "the data is 4x the budget");

    let v = bench(
        d.path(),
        "getscan",
        &[
            "--systems",
            "ucache-explicit,mmap",
            "--policies",
            "clock,get-scan",
        ],
    );
    assert_eq!(
        systems(&v),
        ["ucache-explicit:clock", "ucache-explicit:get-scan", "mmap"]
    );
    for r in v["results"].as_array().unwrap() {
        for role in ["get", "scan"] {
            let st = &r["roles"][role];
            assert!(st["ops_per_sec"].as_f64().unwrap() > 0.0, "{role}: {r}");
            assert!(
                st["p99_us"].is_number() && st["threads"] == 1,
                "{role}: {r}"
            );
        }
    }

    let v = bench(
        d.path(),
        "search",
        &["--systems", "ucache-explicit,mmap", "--policies", "lru,mru"],
    );
    assert_eq!(
        systems(&v),
        ["ucache-explicit:lru", "ucache-explicit:mru", "mmap"]
    );

    let v = bench(
        d.path(),
        "tenants",
        &[
            "--systems",
            "ucache-explicit",
            "--policies",
            "clock,lfu+mru",
            "--tenant-weights",
            "3,1",
        ],
    );
    assert_eq!(
        systems(&v),
        ["ucache-explicit:clock", "ucache-explicit:lfu+mru"]
    );
    assert_eq!(v["config"]["tenant_weights"][0], 3);
    let r = &v["results"][1];
    assert!(r["roles"]["tenant-a"]["ops_per_sec"].as_f64().unwrap() > 0.0);
    assert!(r["roles"]["tenant-b"]["ops_per_sec"].as_f64().unwrap() > 0.0);
}

#[test]
fn unknown_policies_and_misplaced_tenant_specs_are_refused() {
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_ucache"))
            .arg("bench")
            .args(args)
            .output()
            .unwrap()
    };
    let o = run(&["ycsb-c", "--policies", "nope"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("unknown policy"));
    let o = run(&["ycsb-c", "--policies", "lfu+mru", "--data", "1MiB"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("tenants"));
}

/// The device baselines, the `-fresh` ones too (reading into pages they fault in and give
/// back), read every word right (`systems` checks `mismatches`).
#[test]
fn raw_baselines_read_every_word() {
    let d = dir();
    let v = bench(
        d.path(),
        "lookup",
        &[
            "--systems",
            "raw-psync,raw-psync-fresh,raw-uring,raw-uring-fresh",
        ],
    );
    assert_eq!(
        systems(&v),
        [
            "raw-psync",
            "raw-psync-fresh",
            "raw-uring",
            "raw-uring-fresh"
        ]
    );
}
