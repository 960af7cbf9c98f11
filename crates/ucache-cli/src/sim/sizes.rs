//! Cache sizes on the `ucache sim` command line: `1%,10%,5000`.
//!
//! A miss-ratio curve is usually drawn against the fraction of the trace's footprint that
//! fits, which makes traces of different sizes comparable, so a size is either a percentage
//! of the distinct ids or an absolute count of buffers.

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum CacheSize {
    /// Percent of the distinct ids in the trace.
    Percent(f64),
    /// Buffers.
    Buffers(u64),
}

impl CacheSize {
    /// Buffers for a trace of `unique` distinct ids: at least 1, at most `unique` (a larger
    /// cache behaves the same).
    pub fn resolve(self, unique: u64) -> u64 {
        let n = match self {
            CacheSize::Percent(p) => (unique as f64 * p / 100.0).round() as u64,
            CacheSize::Buffers(n) => n,
        };
        n.clamp(1, unique.max(1))
    }
}

/// Parses a comma-separated list of sizes.
pub fn parse_sizes(s: &str) -> Result<Vec<CacheSize>, String> {
    s.split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(|t| {
            if let Some(p) = t.strip_suffix('%') {
                let v: f64 = p
                    .trim()
                    .parse()
                    .map_err(|_| format!("'{t}' is not a percentage"))?;
                if !(v > 0.0 && v <= 100.0) {
                    return Err(format!("'{t}': a percentage must be in (0, 100]"));
                }
                Ok(CacheSize::Percent(v))
            } else {
                match t.parse::<u64>() {
                    Ok(n) if n > 0 => Ok(CacheSize::Buffers(n)),
                    _ => Err(format!(
                        "'{t}' is not a size: use a percentage of the distinct ids (10%) or a \
                         number of buffers (5000)"
                    )),
                }
            }
        })
        .collect::<Result<Vec<_>, _>>()
        .and_then(|v| {
            if v.is_empty() {
                Err("no sizes given".into())
            } else {
                Ok(v)
            }
        })
}

/// Resolves every size against the trace, dropping duplicates, smallest first.
pub fn resolve_all(sizes: &[CacheSize], unique: u64) -> Vec<u64> {
    let mut v: Vec<u64> = sizes.iter().map(|s| s.resolve(unique)).collect();
    v.sort_unstable();
    v.dedup();
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_percentages_and_counts() {
        let v = parse_sizes("1%, 10%,5000,0.5%").unwrap();
        assert_eq!(
            v,
            vec![
                CacheSize::Percent(1.0),
                CacheSize::Percent(10.0),
                CacheSize::Buffers(5000),
                CacheSize::Percent(0.5)
            ]
        );
        assert_eq!(resolve_all(&v, 1000), vec![5, 10, 100, 1000]);
        assert_eq!(CacheSize::Percent(0.01).resolve(10), 1);
    }

    #[test]
    fn rejects_garbage() {
        for bad in ["", "0", "x", "10%%", "0%", "150%", "-5", "1.5"] {
            assert!(parse_sizes(bad).is_err(), "{bad}");
        }
    }
}
