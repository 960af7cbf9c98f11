//! Synthetic traces: `--generate zipf:N:U[:ALPHA]`.
//!
//! A Zipf trace is the standard stand-in for skewed key-value and block workloads (YCSB's
//! default is α = 0.99) and needs no download, so throughput figures can be reproduced
//! anywhere from the command line alone. Sampling inverts the exact CDF by binary search:
//! exact for any α, and fast enough (10⁷ samples in about a second).

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::trace::{Remapper, Trace};

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Zipf {
    pub requests: u64,
    pub universe: u64,
    pub alpha: f64,
}

/// Parses `zipf:N:U` or `zipf:N:U:ALPHA` (α defaults to 0.99).
pub fn parse_generator(s: &str) -> Result<Zipf, String> {
    let parts: Vec<&str> = s.split(':').collect();
    let usage =
        || format!("'{s}': expected zipf:REQUESTS:IDS[:ALPHA], e.g. zipf:10000000:1000000:0.99");
    if parts.len() < 3 || parts.len() > 4 || parts[0] != "zipf" {
        return Err(usage());
    }
    let requests = parts[1].parse().map_err(|_| usage())?;
    let universe: u64 = parts[2].parse().map_err(|_| usage())?;
    let alpha = match parts.get(3) {
        Some(a) => a.parse().map_err(|_| usage())?,
        None => 0.99,
    };
    if universe == 0 || universe > u32::MAX as u64 / 2 || !(0.0..10.0).contains(&alpha) {
        return Err(usage());
    }
    Ok(Zipf {
        requests,
        universe,
        alpha,
    })
}

impl Zipf {
    /// The trace, with ranks scattered over the 64-bit id space (an odd multiplier is a
    /// bijection) so that nothing downstream can rely on popular ids being small.
    pub fn generate(&self, seed: u64) -> Result<Trace, String> {
        let mut cdf = Vec::with_capacity(self.universe as usize);
        let mut sum = 0.0f64;
        for k in 1..=self.universe {
            sum += (k as f64).powf(-self.alpha);
            cdf.push(sum);
        }
        let mut rng = SmallRng::seed_from_u64(seed);
        let mut map = Remapper::new();
        for _ in 0..self.requests {
            let u = rng.gen::<f64>() * sum;
            let rank = cdf.partition_point(|&c| c < u) as u64;
            map.push(rank.wrapping_mul(0x9E37_79B9_7F4A_7C15))?;
        }
        Ok(map.finish())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_generates_a_skewed_trace() {
        assert!(parse_generator("zipf:10:5:0.5:1").is_err());
        assert!(parse_generator("uniform:10:5").is_err());
        let z = parse_generator("zipf:20000:1000").unwrap();
        assert_eq!(z.alpha, 0.99);
        let t = z.generate(1).unwrap();
        assert_eq!(t.requests.len(), 20000);
        assert!(t.unique <= 1000 && t.unique > 300);
        // The most popular id takes about 1/H(1000, 0.99) ≈ 13% of requests.
        let mut counts = vec![0u32; t.unique as usize];
        t.requests.iter().for_each(|&i| counts[i as usize] += 1);
        let top = *counts.iter().max().unwrap() as f64 / 20000.0;
        assert!((0.10..0.17).contains(&top), "{top}");
    }
}
