//! Zipf-distributed ranks, for skewed lookups (YCSB's request distribution).
//!
//! Uses the closed-form approximation of Gray et al., "Quickly Generating Billion-Record
//! Synthetic Databases" (SIGMOD'94), as YCSB does: one uniform draw and one `powf` per sample,
//! after summing the generalized harmonic number once. Skew is what makes eviction policies
//! differ at all: under uniform lookups every policy has the same hit ratio.

use rand::Rng;

/// Ranks `0..n`, rank 0 the most popular, with P(rank k) ∝ 1 / (k+1)^theta.
#[derive(Clone, Debug)]
pub struct Zipf {
    n: u64,
    theta: f64,
    alpha: f64,
    zetan: f64,
    eta: f64,
}

impl Zipf {
    /// `theta` in (0, 1); YCSB's default is 0.99.
    pub fn new(n: u64, theta: f64) -> Zipf {
        assert!(n > 0 && theta > 0.0 && theta < 1.0);
        let zeta = |k: u64| (1..=k).map(|i| 1.0 / (i as f64).powf(theta)).sum::<f64>();
        let zetan = zeta(n);
        let zeta2 = zeta(2.min(n));
        let eta = (1.0 - (2.0 / n as f64).powf(1.0 - theta)) / (1.0 - zeta2 / zetan);
        Zipf {
            n,
            theta,
            alpha: 1.0 / (1.0 - theta),
            zetan,
            eta,
        }
    }

    /// The number of ranks.
    pub fn ranks(&self) -> u64 {
        self.n
    }

    /// The next rank.
    #[inline]
    pub fn sample(&self, rng: &mut impl Rng) -> u64 {
        let u: f64 = rng.gen();
        let uz = u * self.zetan;
        if uz < 1.0 {
            return 0;
        }
        if uz < 1.0 + 0.5f64.powf(self.theta) {
            return 1.min(self.n - 1);
        }
        let r = (self.n as f64 * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64;
        r.min(self.n - 1)
    }

    /// Where rank `r` lives: ranks are scattered over `0..n` so that hot buffers are not
    /// neighbours (readahead would otherwise turn skew into sequential luck). An odd
    /// multiplier modulo a power of two is a bijection; for other `n` a few ranks share a slot.
    #[inline]
    pub fn scatter(&self, r: u64) -> u64 {
        r.wrapping_mul(0x9E37_79B9_7F4A_7C15) % self.n
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::SmallRng;
    use rand::SeedableRng;

    #[test]
    fn skewed_towards_low_ranks_and_in_range() {
        let z = Zipf::new(10_000, 0.99);
        let mut rng = SmallRng::seed_from_u64(7);
        let mut counts = vec![0u64; 10_000];
        for _ in 0..200_000 {
            counts[z.sample(&mut rng) as usize] += 1;
        }
        // P(rank 0) = 1/zeta(10^4, 0.99) ≈ 0.10; the top 1% of ranks take about half.
        let p0 = counts[0] as f64 / 200_000.0;
        assert!((0.08..0.13).contains(&p0), "p0 {p0}");
        let top: u64 = counts[..100].iter().sum();
        assert!(top > 80_000, "top 1% got {top}");
        assert!(counts[0] > counts[1] && counts[1] > counts[50]);
    }

    #[test]
    fn scatter_is_a_bijection_for_powers_of_two() {
        let z = Zipf::new(1024, 0.99);
        let mut seen = vec![false; 1024];
        for r in 0..1024 {
            seen[z.scatter(r) as usize] = true;
        }
        assert!(seen.iter().all(|&s| s));
    }
}
