//! The results of `ucache sim`: a table for people and JSON for scripts.
//!
//! The JSON shape is fixed (scripts and the docs' result files depend on it):
//! `{"trace": {"requests": N, "unique": U}, "results": [{"policy", "cache_size", "requests",
//! "misses", "miss_ratio", "requests_per_sec"}]}`.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use super::runner::Outcome;

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct TraceInfo {
    pub requests: u64,
    pub unique: u64,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Row {
    pub policy: String,
    pub cache_size: u64,
    pub requests: u64,
    pub misses: u64,
    pub miss_ratio: f64,
    pub requests_per_sec: f64,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Report {
    pub trace: TraceInfo,
    pub results: Vec<Row>,
}

impl Report {
    pub fn new(requests: u64, unique: u64, outcomes: &[Outcome]) -> Report {
        Report {
            trace: TraceInfo { requests, unique },
            results: outcomes
                .iter()
                .map(|o| Row {
                    policy: o.policy.clone(),
                    cache_size: o.cache_size,
                    requests: o.requests,
                    misses: o.misses,
                    miss_ratio: o.miss_ratio(),
                    requests_per_sec: o.requests_per_sec(),
                })
                .collect(),
        }
    }

    /// One line per replay, grouped by cache size so policies compare down a column.
    pub fn table(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "trace: {} requests, {} distinct ids",
            self.trace.requests, self.trace.unique
        );
        // The policy column fits the longest spec (`s3fifo:libcachesim,...`).
        let w = self
            .results
            .iter()
            .map(|r| r.policy.len())
            .max()
            .unwrap_or(0)
            .max(10);
        let _ = writeln!(
            s,
            "{:>12} {:>7}  {:<w$} {:>12} {:>10} {:>12}",
            "cache_size", "% ids", "policy", "misses", "miss_ratio", "Mreq/s (cpu)"
        );
        let mut rows: Vec<&Row> = self.results.iter().collect();
        rows.sort_by_key(|r| r.cache_size);
        let mut last = None;
        for r in rows {
            if last.is_some() && last != Some(r.cache_size) {
                s.push('\n');
            }
            last = Some(r.cache_size);
            let pct = 100.0 * r.cache_size as f64 / self.trace.unique.max(1) as f64;
            let _ = writeln!(
                s,
                "{:>12} {:>6.2}%  {:<w$} {:>12} {:>10.4} {:>12.2}",
                r.cache_size,
                pct,
                r.policy,
                r.misses,
                r.miss_ratio,
                r.requests_per_sec / 1e6
            );
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn json_has_exactly_the_documented_shape() {
        let o = Outcome {
            policy: "lru".into(),
            cache_size: 10,
            requests: 100,
            misses: 25,
            cpu: Duration::from_millis(1),
        };
        let r = Report::new(100, 40, &[o]);
        let v = serde_json::to_value(&r).unwrap();
        let expect = serde_json::json!({
            "trace": {"requests": 100, "unique": 40},
            "results": [{"policy": "lru", "cache_size": 10, "requests": 100, "misses": 25,
                         "miss_ratio": 0.25, "requests_per_sec": 100000.0}]
        });
        assert_eq!(v, expect);
        assert!(r.table().contains("lru"));
    }
}
