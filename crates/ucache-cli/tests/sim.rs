//! `ucache sim` end to end: the binary on small generated traces, its JSON parsed back.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

fn sim(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_ucache"))
        .arg("sim")
        .args(args)
        .output()
        .expect("run ucache")
}

fn json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn replays_a_text_trace_and_writes_json_and_a_plot() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("loop.txt");
    // A loop over 100 ids, 10 times: 1000 requests.
    let text: String = (0..1000).map(|k| format!("{}\n", 7000 + k % 100)).collect();
    std::fs::write(&trace, text).unwrap();
    let out_json = dir.path().join("r.json");
    let out_svg = dir.path().join("mrc.svg");
    let o = sim(&[
        "--trace",
        trace.to_str().unwrap(),
        "--format",
        "text",
        "--policies",
        "lru,mru,s3fifo",
        "--sizes",
        "50%,100,1000",
        "--json",
        out_json.to_str().unwrap(),
        "--plot",
        out_svg.to_str().unwrap(),
        "--quiet",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("mru"), "{stdout}");
    let v = json(&out_json);
    assert_eq!(v["trace"]["requests"], 1000);
    assert_eq!(v["trace"]["unique"], 100);
    let results = v["results"].as_array().unwrap();
    // 50% = 50 buffers; 100 and 1000 both resolve to the whole footprint, once.
    assert_eq!(results.len(), 6);
    for r in results {
        let keys: Vec<&str> = r.as_object().unwrap().keys().map(|k| k.as_str()).collect();
        assert_eq!(keys.len(), 6, "{keys:?}");
        let (size, misses) = (
            r["cache_size"].as_u64().unwrap(),
            r["misses"].as_u64().unwrap(),
        );
        assert_eq!(r["requests"], 1000);
        assert!(r["requests_per_sec"].as_f64().unwrap() > 0.0);
        let ratio = r["miss_ratio"].as_f64().unwrap();
        assert!((ratio - misses as f64 / 1000.0).abs() < 1e-12);
        match (r["policy"].as_str().unwrap(), size) {
            (_, 100) => assert_eq!(misses, 100, "{r}"),
            ("lru", 50) => assert_eq!(misses, 1000, "LRU thrashes on a loop: {r}"),
            ("mru", 50) => assert!(misses < 600, "MRU keeps part of the loop: {r}"),
            _ => {}
        }
    }
    let svg = std::fs::read_to_string(&out_svg).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("s3fifo"));
}

#[test]
fn generates_zipf_and_round_trips_through_a_record_file() {
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("z.rec");
    let j1 = dir.path().join("a.json");
    let j2 = dir.path().join("b.json");
    let common = ["--policies", "clock,sieve", "--sizes", "10%", "--quiet"];
    let o = sim(&[
        &[
            "--generate",
            "zipf:20000:2000",
            "--save-trace",
            rec.to_str().unwrap(),
            "--json",
            j1.to_str().unwrap(),
        ],
        &common[..],
    ]
    .concat());
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = sim(&[
        &[
            "--trace",
            rec.to_str().unwrap(),
            "--format",
            "record",
            "--json",
            j2.to_str().unwrap(),
        ],
        &common[..],
    ]
    .concat());
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let (a, b) = (json(&j1), json(&j2));
    assert_eq!(a["trace"], b["trace"]);
    for k in 0..2 {
        assert_eq!(a["results"][k]["misses"], b["results"][k]["misses"]);
    }
}

#[test]
fn malformed_input_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.csv");
    std::fs::write(&bad, "key\n1\n2\nthree\n").unwrap();
    let o = sim(&[
        "--trace",
        bad.to_str().unwrap(),
        "--format",
        "csv",
        "--quiet",
    ]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("bad.csv: line 4:"), "{err}");
    let o = sim(&["--trace", bad.to_str().unwrap(), "--policies", "belady"]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("unknown policy 'belady'"));
}

/// Policies with parameters and presets: a comma-separated list whose specs hold commas too,
/// and a bad parameter refused with the policy's own parameter list.
#[test]
fn policy_specs_with_parameters_and_presets() {
    let dir = tempfile::tempdir().unwrap();
    let out_json = dir.path().join("r.json");
    let o = sim(&[
        "--generate",
        "zipf:20000:2000",
        "--policies",
        "s3fifo,s3fifo:libcachesim,small_size_ratio=0.3,lru,clock:libcachesim",
        "--sizes",
        "200",
        "--json",
        out_json.to_str().unwrap(),
        "--quiet",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v = json(&out_json);
    let results = v["results"].as_array().unwrap();
    let names: Vec<&str> = results
        .iter()
        .map(|r| r["policy"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "s3fifo",
            "s3fifo:libcachesim,small_size_ratio=0.3",
            "lru",
            "clock:libcachesim"
        ]
    );
    // The parameters change the replay.
    assert_ne!(results[0]["misses"], results[1]["misses"]);

    let bad = sim(&[
        "--generate",
        "zipf:100:10",
        "--policies",
        "s3fifo:small_ratio=0.3",
        "--quiet",
    ]);
    assert!(!bad.status.success());
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(
        err.contains("no parameter 'small_ratio'") && err.contains("small_size_ratio"),
        "{err}"
    );
}
