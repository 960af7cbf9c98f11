//! Policies by name, for command lines, configuration files and the simulator.
//!
//! A plain `match` rather than a registration mechanism: the set is known at compile time, and
//! adding a policy is one arm here (or in `advanced.rs`) and one entry in [`POLICY_NAMES`].

use super::{advanced_policy_by_name, Clock, Fifo, Lfu, Lru, Mru, Policy, S3Fifo, Sieve};

/// Every name [`policy_by_name`] knows, default first.
pub const POLICY_NAMES: &[&str] = &[
    "clock",
    "fifo",
    "lru",
    "mru",
    "lfu",
    "sieve",
    "s3fifo",
    "2q",
    "arc",
    "lirs",
    "w-tinylfu",
    "lhd",
    "mglru",
    "get-scan",
    "priority",
];

/// A fresh, unattached policy called `name` (case-sensitive), or `None`.
pub fn policy_by_name(name: &str) -> Option<Box<dyn Policy>> {
    Some(match name {
        "clock" => Box::new(Clock::new()),
        "fifo" => Box::new(Fifo::new()),
        "lru" => Box::new(Lru::new()),
        "mru" => Box::new(Mru::new()),
        "lfu" => Box::new(Lfu::new()),
        "sieve" => Box::new(Sieve::new()),
        "s3fifo" => Box::new(S3Fifo::new()),
        other => return advanced_policy_by_name(other),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_builds_a_policy_of_that_name() {
        for &n in POLICY_NAMES {
            let p = policy_by_name(n).unwrap_or_else(|| panic!("{n} not registered"));
            assert_eq!(p.name(), n);
        }
        assert!(policy_by_name("nope").is_none());
        for &n in super::super::ADVANCED_POLICY_NAMES {
            assert!(POLICY_NAMES.contains(&n), "{n} missing from POLICY_NAMES");
        }
    }
}
