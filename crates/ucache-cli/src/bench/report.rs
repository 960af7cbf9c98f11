//! What a benchmark produces: per-run results from workers, per-system summaries, the table on
//! stdout and the JSON file other tools read.
//!
//! The JSON keys `config`, `results[].{system, workload, threads, buffer_size, data_bytes,
//! memory_bytes, ops_per_sec, cpu_us_per_op, p99_us, reps, others_cpu_pct}` are an interface:
//! add keys, never rename these. Added since: `policy` (with `--policies`, when `system` reads
//! `ucache-explicit:lru`) and `roles` (per thread class of `getscan` and `tenants`).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use super::latency::LatencySummary;
use super::system::{SystemKind, SystemRow};
use super::workload::Workload;

/// One class of threads of a mixed workload (`getscan`'s GETs and scans, `tenants`' A and B):
/// its own throughput and latency, which the totals would hide.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RoleStats {
    pub threads: usize,
    pub ops_per_sec: f64,
    pub p50_us: f64,
    pub p99_us: f64,
}

/// One run of one system, as the worker measured it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunResult {
    /// JSON: `system` ("ucache-explicit:lru") and `policy` ("lru").
    #[serde(flatten)]
    pub system: SystemRow,
    pub workload: Workload,
    pub threads: usize,
    pub buffer_size: usize,
    pub data_bytes: u64,
    pub memory_bytes: u64,
    /// The ucache store used, for ucache systems.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub store: Option<String>,
    /// Buffers per ucache-prefetch batch, GETs in flight per raw-get thread.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub prefetch_depth: Option<usize>,
    /// Length of the measured interval.
    pub seconds: f64,
    pub ops: u64,
    pub ops_per_sec: f64,
    /// ops/s times the buffer size: each op touches one buffer.
    pub bytes_per_sec: f64,
    /// The worker's own user+system CPU during the interval, per op.
    pub cpu_us_per_op: f64,
    /// The same CPU as cores kept busy on average.
    pub cpu_cores: f64,
    /// CPU other processes used during the interval, in % of one core.
    pub others_cpu_pct: f64,
    /// CPU the hypervisor took from this VM, in % of one core.
    pub steal_pct: f64,
    pub latency_unit: String,
    #[serde(flatten)]
    pub latency: LatencySummary,
    /// Words read that did not hold their offset. Anything but 0 is a bug in the system.
    pub mismatches: u64,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub first_mismatch: Option<String>,
    /// Growth of the system's own counters over the interval (ucache: hits, misses, evictions).
    #[serde(skip_serializing_if = "BTreeMap::is_empty", default)]
    pub counters: BTreeMap<String, u64>,
    /// Per class of threads, for workloads with more than one (keyed by role name).
    #[serde(skip_serializing_if = "BTreeMap::is_empty", default)]
    pub roles: BTreeMap<String, RoleStats>,
    /// The memory cgroup the worker ran in, from /proc/self/cgroup.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub cgroup: Option<String>,
    /// High-water mark of the cgroup's memory during the run (memory.max_usage_in_bytes).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub cgroup_peak_bytes: Option<u64>,
    /// How often the cgroup hit its limit (memory.failcnt).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub cgroup_limit_hits: Option<u64>,
}

/// One system over all reps: medians, with the reps themselves kept.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SystemResult {
    #[serde(flatten)]
    pub system: SystemRow,
    pub workload: Workload,
    pub threads: usize,
    pub buffer_size: usize,
    pub data_bytes: u64,
    pub memory_bytes: u64,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub prefetch_depth: Option<usize>,
    pub ops_per_sec: f64,
    pub bytes_per_sec: f64,
    pub cpu_us_per_op: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub others_cpu_pct: f64,
    pub latency_unit: String,
    /// Total over all reps; non-zero fails the benchmark.
    pub mismatches: u64,
    /// Median ops/s divided by raw-psync's / mmap's median, when those ran.
    pub vs_raw_psync: Option<f64>,
    pub vs_mmap: Option<f64>,
    /// Median ops/s divided by raw-get's, when it ran (S3 stores).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub vs_raw_get: Option<f64>,
    /// Counters of the median rep (ucache's cache stats).
    #[serde(skip_serializing_if = "BTreeMap::is_empty", default)]
    pub counters: BTreeMap<String, u64>,
    /// Per class of threads (`getscan`: `get`, `scan`; `tenants`: `tenant-a`, `tenant-b`),
    /// each figure the median over reps.
    #[serde(skip_serializing_if = "BTreeMap::is_empty", default)]
    pub roles: BTreeMap<String, RoleStats>,
    pub reps: Vec<RunResult>,
}

/// The whole file: `{"config": {...}, "results": [...]}`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Report {
    pub config: serde_json::Value,
    pub results: Vec<SystemResult>,
}

/// Median; the mean of the middle two for an even count. 0 for none.
pub fn median(values: impl IntoIterator<Item = f64>) -> f64 {
    let mut v: Vec<f64> = values.into_iter().collect();
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Summarises each system's reps, in the order systems were given.
pub fn summarize(order: &[SystemRow], runs: &[RunResult]) -> Vec<SystemResult> {
    let mut out: Vec<SystemResult> = order
        .iter()
        .filter_map(|sys| {
            let reps: Vec<RunResult> = runs.iter().filter(|r| r.system == *sys).cloned().collect();
            let first = reps.first()?;
            let ops = median(reps.iter().map(|r| r.ops_per_sec));
            let median_rep = reps.iter().min_by(|a, b| {
                (a.ops_per_sec - ops)
                    .abs()
                    .total_cmp(&(b.ops_per_sec - ops).abs())
            })?;
            let roles = first
                .roles
                .iter()
                .map(|(name, st)| {
                    let of = |f: fn(&RoleStats) -> f64| {
                        median(reps.iter().filter_map(|r| r.roles.get(name)).map(f))
                    };
                    let stats = RoleStats {
                        threads: st.threads,
                        ops_per_sec: of(|x| x.ops_per_sec),
                        p50_us: of(|x| x.p50_us),
                        p99_us: of(|x| x.p99_us),
                    };
                    (name.clone(), stats)
                })
                .collect();
            Some(SystemResult {
                system: sys.clone(),
                workload: first.workload,
                threads: first.threads,
                buffer_size: first.buffer_size,
                data_bytes: first.data_bytes,
                memory_bytes: first.memory_bytes,
                prefetch_depth: first.prefetch_depth,
                ops_per_sec: ops,
                bytes_per_sec: median(reps.iter().map(|r| r.bytes_per_sec)),
                cpu_us_per_op: median(reps.iter().map(|r| r.cpu_us_per_op)),
                p50_us: median(reps.iter().map(|r| r.latency.p50_us)),
                p99_us: median(reps.iter().map(|r| r.latency.p99_us)),
                others_cpu_pct: median(reps.iter().map(|r| r.others_cpu_pct)),
                latency_unit: first.latency_unit.clone(),
                mismatches: reps.iter().map(|r| r.mismatches).sum(),
                vs_raw_psync: None,
                vs_mmap: None,
                vs_raw_get: None,
                counters: median_rep.counters.clone(),
                roles,
                reps,
            })
        })
        .collect();
    let base = |k: SystemKind, out: &[SystemResult]| {
        out.iter()
            .find(|r| r.system.kind == k && r.system.policy.is_none())
            .map(|r| r.ops_per_sec)
            .filter(|&x| x > 0.0)
    };
    let (psync, mmap, get) = (
        base(SystemKind::RawPsync, &out),
        base(SystemKind::Mmap, &out),
        base(SystemKind::RawGet, &out),
    );
    for r in &mut out {
        r.vs_raw_psync = psync.map(|b| r.ops_per_sec / b);
        r.vs_mmap = mmap.map(|b| r.ops_per_sec / b);
        r.vs_raw_get = get.map(|b| r.ops_per_sec / b);
    }
    out
}

fn thousands(x: f64) -> String {
    let n = x.round() as u64;
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn ratio(x: Option<f64>) -> String {
    x.map_or("-".into(), |r| format!("{r:.2}x"))
}

/// The stdout table: one row per system.
pub fn table(results: &[SystemResult]) -> String {
    let headers = [
        "system",
        "ops/s",
        "MB/s",
        "cpu µs/op",
        "p99 µs",
        "others' CPU %",
        "vs raw-psync",
        "vs mmap",
    ];
    let rows: Vec<[String; 8]> = results
        .iter()
        .map(|r| {
            [
                r.system.name().to_string(),
                thousands(r.ops_per_sec),
                format!("{:.1}", r.bytes_per_sec / 1e6),
                format!("{:.2}", r.cpu_us_per_op),
                format!(
                    "{:.1}{}",
                    r.p99_us,
                    if r.latency_unit == "op" { "" } else { "*" }
                ),
                format!("{:.0}", r.others_cpu_pct),
                ratio(r.vs_raw_psync),
                ratio(r.vs_mmap),
            ]
        })
        .collect();
    let mut widths = headers.map(|h| h.chars().count());
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let line = |cells: &[String], out: &mut String| {
        for (i, (cell, w)) in cells.iter().zip(&widths).enumerate() {
            let pad = w - cell.chars().count();
            if i == 0 {
                let _ = write!(out, "{cell}{}", " ".repeat(pad));
            } else {
                let _ = write!(out, "  {}{cell}", " ".repeat(pad));
            }
        }
        out.push('\n');
    };
    line(&headers.map(String::from), &mut out);
    line(&widths.map(|w| "-".repeat(w)), &mut out);
    for row in &rows {
        line(row, &mut out);
    }
    // A system that times groups of ops says so: its p99 is not one op's.
    for r in results.iter().filter(|r| r.latency_unit != "op") {
        let _ = writeln!(
            out,
            "* {}: p99 of one {}, not of one op",
            r.system.name(),
            r.latency_unit
        );
    }
    out
}

/// Each thread class's own figures, for mixed workloads: one line per system and class.
pub fn role_table(results: &[SystemResult]) -> String {
    let mut out = String::new();
    for r in results {
        for (name, st) in &r.roles {
            let _ = writeln!(
                out,
                "{:<28} {:<9} {:>12} ops/s  p50 {:>8.1} µs  p99 {:>8.1} µs  ({} threads)",
                r.system.name(),
                name,
                thousands(st.ops_per_sec),
                st.p50_us,
                st.p99_us,
                st.threads
            );
        }
    }
    out
}

/// ucache's own counters, the part of the story the table cannot tell: how often it hit.
pub fn cache_stats(results: &[SystemResult]) -> String {
    let mut out = String::new();
    for r in results.iter().filter(|r| !r.counters.is_empty()) {
        let get = |k: &str| r.counters.get(k).copied().unwrap_or(0);
        let (h, m, e) = (get("hits"), get("misses"), get("evictions"));
        let ratio = if h + m > 0 {
            100.0 * h as f64 / (h + m) as f64
        } else {
            0.0
        };
        let _ = writeln!(
            out,
            "{}: {} hits, {} misses ({ratio:.1}% hit), {} evictions during the measured interval of the median rep",
            r.system.name(),
            thousands(h as f64),
            thousands(m as f64),
            thousands(e as f64)
        );
        let faults = get("faults_timed");
        if faults > 0 && get("fault_ns") > 0 {
            // The paper's Table 4: where a transparent miss spends its time, averaged over
            // the sample of faults that were timed.
            let us = |k: &str| get(k) as f64 / faults as f64 / 1000.0;
            let (total, evict, io, install, books) = (
                us("fault_ns"),
                us("fault_evict_ns"),
                us("fault_io_ns"),
                us("fault_install_ns"),
                us("fault_bookkeeping_ns"),
            );
            let _ = writeln!(
                out,
                "  per fault: {total:.2} µs = eviction {evict:.2} + IO {io:.2} + install {install:.2} + bookkeeping {books:.2} + checks {:.2}",
                (total - evict - io - install - books).max(0.0)
            );
        }
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn run(sys: SystemKind, ops_per_sec: f64) -> RunResult {
        RunResult {
            system: SystemRow::plain(sys),
            workload: Workload::Lookup,
            threads: 2,
            buffer_size: 4096,
            data_bytes: 1 << 30,
            memory_bytes: 128 << 20,
            store: None,
            prefetch_depth: None,
            seconds: 3.0,
            ops: (ops_per_sec * 3.0) as u64,
            ops_per_sec,
            bytes_per_sec: ops_per_sec * 4096.0,
            cpu_us_per_op: 10.0,
            cpu_cores: 0.5,
            others_cpu_pct: 5.0,
            steal_pct: 0.0,
            latency_unit: "op".into(),
            latency: LatencySummary {
                samples: 10,
                p99_us: 100.0,
                ..Default::default()
            },
            mismatches: 0,
            first_mismatch: None,
            counters: [("hits".to_string(), 5u64)].into_iter().collect(),
            roles: BTreeMap::new(),
            cgroup: None,
            cgroup_peak_bytes: None,
            cgroup_limit_hits: None,
        }
    }

    pub(crate) fn rows(kinds: &[SystemKind]) -> Vec<SystemRow> {
        kinds.iter().map(|&k| SystemRow::plain(k)).collect()
    }

    #[test]
    fn policy_rows_and_roles_are_summarized_apart() {
        let mut a = run(SystemKind::UcacheExplicit, 10.0);
        a.system = SystemRow::new(SystemKind::UcacheExplicit, Some("clock".into()));
        let mut b = a.clone();
        b.system = SystemRow::new(SystemKind::UcacheExplicit, Some("get-scan".into()));
        b.ops_per_sec = 20.0;
        for (r, get) in [(&mut a, 100.0), (&mut b, 300.0)] {
            r.roles.insert(
                "get".into(),
                RoleStats {
                    threads: 1,
                    ops_per_sec: get,
                    p50_us: 1.0,
                    p99_us: 9.0,
                },
            );
        }
        let mut b2 = b.clone();
        b2.roles.get_mut("get").unwrap().ops_per_sec = 500.0;
        let order = [a.system.clone(), b.system.clone()];
        let res = summarize(&order, &[a, b, b2]);
        assert_eq!(res.len(), 2);
        assert_eq!(res[0].roles["get"].ops_per_sec, 100.0);
        assert_eq!(res[1].roles["get"].ops_per_sec, 400.0);
        assert_eq!(res[1].reps.len(), 2);
        let v = serde_json::to_value(&res[1]).unwrap();
        assert_eq!(v["system"], "ucache-explicit:get-scan");
        assert_eq!(v["policy"], "get-scan");
        assert_eq!(v["roles"]["get"]["ops_per_sec"], 400.0);
        assert_eq!(v["reps"][0]["system"], "ucache-explicit:get-scan");
        let back: SystemResult = serde_json::from_value(v).unwrap();
        assert_eq!(back.system, res[1].system);
        assert!(role_table(&res).contains("ucache-explicit:clock"));
    }

    #[test]
    fn medians() {
        assert_eq!(median([3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median([4.0, 1.0]), 2.5);
        assert_eq!(median([]), 0.0);
    }

    #[test]
    fn json_has_the_interface_keys() {
        let runs = vec![
            run(SystemKind::RawPsync, 20_000.0),
            run(SystemKind::Mmap, 10_000.0),
            run(SystemKind::RawPsync, 30_000.0),
            run(SystemKind::Mmap, 12_000.0),
        ];
        let results = summarize(&rows(&[SystemKind::Mmap, SystemKind::RawPsync]), &runs);
        let report = Report {
            config: serde_json::json!({"threads": 2}),
            results,
        };
        let v = serde_json::to_value(&report).unwrap();
        assert!(v["config"].is_object());
        let rs = v["results"].as_array().unwrap();
        assert_eq!(rs.len(), 2);
        for r in rs {
            for key in [
                "system",
                "workload",
                "threads",
                "buffer_size",
                "data_bytes",
                "memory_bytes",
                "ops_per_sec",
                "cpu_us_per_op",
                "p99_us",
                "reps",
                "others_cpu_pct",
            ] {
                assert!(r.get(key).is_some(), "missing {key} in {r}");
            }
            assert_eq!(r["reps"].as_array().unwrap().len(), 2);
            assert!(r["reps"][0]["p99_us"].is_number());
        }
        assert_eq!(rs[0]["system"], "mmap");
        assert_eq!(rs[0]["workload"], "lookup");
        assert_eq!(rs[0]["ops_per_sec"], 11_000.0);
        assert_eq!(rs[1]["ops_per_sec"], 25_000.0);
        assert!((rs[0]["vs_raw_psync"].as_f64().unwrap() - 0.44).abs() < 1e-9);
        assert_eq!(rs[1]["vs_mmap"].as_f64().unwrap(), 25_000.0 / 11_000.0);
        // And it reads back.
        let back: Report = serde_json::from_value(v).unwrap();
        assert_eq!(back.results[1].reps[1].ops, 90_000);
    }

    #[test]
    fn table_lists_every_system() {
        let runs = vec![
            run(SystemKind::RawPsync, 23_456.7),
            run(SystemKind::UcacheExplicit, 1_234_567.0),
        ];
        let t = table(&summarize(
            &rows(&[SystemKind::UcacheExplicit, SystemKind::RawPsync]),
            &runs,
        ));
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 4);
        assert!(lines[0].starts_with("system"));
        assert!(lines[2].starts_with("ucache-explicit") && lines[2].contains("1,234,567"));
        assert!(lines[2].contains("52.63x") && lines[3].contains("1.00x"));
        assert!(lines[3].contains("23,457"));
        assert!(cache_stats(&summarize(&rows(&[SystemKind::RawPsync]), &runs)).contains("5 hits"));
    }

    #[test]
    fn a_p99_of_groups_of_ops_is_marked() {
        let mut r = run(SystemKind::UcachePrefetch, 1000.0);
        r.latency_unit = "32 visits".into();
        let t = table(&summarize(&rows(&[SystemKind::UcachePrefetch]), &[r]));
        assert!(t.lines().nth(2).unwrap().contains('*'), "{t}");
        assert!(t.contains("* ucache-prefetch: p99 of one 32 visits"), "{t}");
    }
}
