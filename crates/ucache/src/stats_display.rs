//! A summary of [`StatsSnapshot`] a person can read: four lines with the numbers that answer
//! "is the cache working" (hit ratio, misses and their latency, eviction, write-back, waits
//! for memory), where `Debug` prints every counter. `{:#}` adds the rest that is non-zero.

use std::fmt;

use crate::stats::StatsSnapshot;

/// `ns` in the unit that keeps it short: "812 ns", "65.5 µs", "1.05 ms", "2.15 s".
fn duration(ns: u64) -> String {
    match ns {
        0..=999 => format!("{ns} ns"),
        1_000..=999_999 => format!("{:.1} µs", ns as f64 / 1e3),
        1_000_000..=999_999_999 => format!("{:.2} ms", ns as f64 / 1e6),
        _ => format!("{:.2} s", ns as f64 / 1e9),
    }
}

/// `b` bytes in binary units: "512 B", "1.5 KiB", "3.0 GiB".
fn bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if b < 1024 {
        return format!("{b} B");
    }
    let mut v = b as f64 / 1024.0;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    format!("{v:.1} {}", UNITS[u])
}

impl fmt::Display for StatsSnapshot {
    /// ```
    /// let mut s = ucache::StatsSnapshot::default();
    /// s.hits = 900;
    /// s.misses = 100;
    /// println!("{s}");
    /// assert!(s.to_string().starts_with("hit ratio 90.0%: 900 hits, 100 misses"));
    /// ```
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let q = |p| {
            self.miss_latency_quantile(p)
                .map_or("-".to_string(), |d| duration(d.as_nanos() as u64))
        };
        writeln!(
            f,
            "hit ratio {:.1}%: {} hits, {} misses (miss latency p50 {}, p99 {}), {} waits for \
             another thread's load",
            self.hit_ratio() * 100.0,
            self.hits,
            self.misses,
            q(0.5),
            q(0.99),
            self.waits
        )?;
        writeln!(
            f,
            "evictions {} ({} ahead by the background evictor, {} candidates skipped); \
             prefetched {} ({} used, {} wasted)",
            self.evictions,
            self.evictions_ahead,
            self.eviction_cancels,
            self.prefetches,
            self.prefetch_used,
            self.prefetch_wasted
        )?;
        writeln!(
            f,
            "write-backs {} ({} failed), read failures {}, read {}, written {}",
            self.writebacks,
            self.writeback_failures,
            self.read_failures,
            bytes(self.bytes_read),
            bytes(self.bytes_written)
        )?;
        write!(
            f,
            "budget stalls {} (loads that waited for memory with nothing evictable; after \
             CacheOptions::budget_wait they fail with BudgetExhausted)",
            self.budget_stalls
        )?;
        if f.alternate() {
            let rest = [
                ("bypasses", self.bypasses),
                ("KiB read past the cache", self.bytes_read_past_cache >> 10),
                ("faults", self.faults),
                ("write faults", self.write_faults),
                ("set aside", self.set_aside),
                ("restores", self.restores),
                ("installs", self.installs),
                ("installed KiB", self.installed_bytes >> 10),
                ("store reads", self.store_reads),
                ("overlapped", self.store_reads_overlapped),
                ("marker hits", self.marker_hits),
            ];
            let rest: Vec<String> = rest
                .iter()
                .filter(|(_, n)| *n > 0)
                .map(|(name, n)| format!("{name} {n}"))
                .collect();
            if !rest.is_empty() {
                write!(f, "\n{}", rest.join(", "))?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units() {
        assert_eq!(duration(812), "812 ns");
        assert_eq!(duration(65_536), "65.5 µs");
        assert_eq!(duration(1_048_576), "1.05 ms");
        assert_eq!(duration(2_147_483_648), "2.15 s");
        assert_eq!(bytes(0), "0 B");
        assert_eq!(bytes(1023), "1023 B");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(bytes(3 << 30), "3.0 GiB");
        assert_eq!(bytes(u64::MAX), "16384.0 PiB");
    }

    #[test]
    fn a_summary_of_four_lines() {
        let mut s = StatsSnapshot {
            miss_latency: vec![0; crate::stats::LATENCY_BUCKETS],
            ..Default::default()
        };
        s.hits = 957;
        s.misses = 43;
        s.waits = 2;
        s.miss_latency[15] = 40; // [32.8 µs, 65.5 µs)
        s.miss_latency[20] = 3; // [1.05 ms, 2.1 ms)
        s.evictions = 40;
        s.evictions_ahead = 12;
        s.eviction_cancels = 3;
        s.prefetches = 10;
        s.prefetch_used = 4;
        s.writebacks = 30;
        s.writeback_failures = 2;
        s.bytes_read = 43 * 4096;
        s.bytes_written = 30 * 4096;
        s.budget_stalls = 1;
        s.faults = 5;
        let want = "hit ratio 95.7%: 957 hits, 43 misses (miss latency p50 65.5 µs, p99 2.10 ms), \
                    2 waits for another thread's load\n\
                    evictions 40 (12 ahead by the background evictor, 3 candidates skipped); \
                    prefetched 10 (4 used, 0 wasted)\n\
                    write-backs 30 (2 failed), read failures 0, read 172.0 KiB, written 120.0 KiB\n\
                    budget stalls 1 (loads that waited for memory with nothing evictable; after \
                    CacheOptions::budget_wait they fail with BudgetExhausted)";
        assert_eq!(s.to_string(), want);
        assert_eq!(format!("{s:#}"), format!("{want}\nfaults 5"));
        // Debug still lists every field.
        assert!(format!("{s:?}").contains("fault_install_ns"));
    }

    #[test]
    fn no_misses_print_no_latency() {
        let s = StatsSnapshot::default();
        assert!(s
            .to_string()
            .starts_with("hit ratio 0.0%: 0 hits, 0 misses (miss latency p50 -, p99 -)"));
    }
}
