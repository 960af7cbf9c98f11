//! Policies by name, for command lines, configuration files and the simulator.
//!
//! A plain `match` rather than a registration mechanism: the set is known at compile time, and
//! adding a policy is one arm in [`config_by_name`] and one entry in [`POLICY_NAMES`]. A name
//! may carry parameters and presets (`s3fifo:libcachesim,small_size_ratio=0.2`, see
//! [`super::config`]).

use super::config::{policy_from_spec, PlainConfig, PolicyConfig, PolicyConfigError};
use super::{
    ArcPolicy, ClockConfig, Fifo, GetScan, LfuConfig, Lhd, LirsConfig, Lru, Mglru, Mru, Policy,
    Priority, S3FifoConfig, Sieve, TwoQConfig, WTinyLfuConfig,
};

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

/// A fresh, unattached policy called `name` (case-sensitive; parameters allowed, as
/// [`super::policy_from_spec`] takes them), or `None`. Use [`super::policy_from_spec`] to learn
/// why a spec was refused.
pub fn policy_by_name(name: &str) -> Option<Box<dyn Policy>> {
    policy_from_spec(name).ok()
}

/// The default configuration of the policy called `name` (case-sensitive, no parameters).
pub fn config_by_name(name: &str) -> Result<Box<dyn PolicyConfig>, PolicyConfigError> {
    fn plain(n: &'static str, make: fn() -> Box<dyn Policy>, lcs: bool) -> Box<dyn PolicyConfig> {
        Box::new(PlainConfig::new(n, make, lcs))
    }
    Ok(match name {
        "clock" => Box::new(ClockConfig::default()),
        "fifo" => plain("fifo", || Box::new(Fifo::new()), true),
        "lru" => plain("lru", || Box::new(Lru::new()), true),
        "mru" => plain("mru", || Box::new(Mru::new()), true),
        "lfu" => Box::new(LfuConfig::default()),
        "sieve" => plain("sieve", || Box::new(Sieve::new()), true),
        "s3fifo" => Box::new(S3FifoConfig::default()),
        "2q" => Box::new(TwoQConfig::default()),
        "arc" => plain("arc", || Box::new(ArcPolicy::new()), true),
        "lirs" => Box::new(LirsConfig::default()),
        "w-tinylfu" => Box::new(WTinyLfuConfig::default()),
        "lhd" => plain("lhd", || Box::new(Lhd::new()), false),
        "mglru" => plain("mglru", || Box::new(Mglru::new()), false),
        "get-scan" => plain("get-scan", || Box::new(GetScan::new()), false),
        // By name there is no handle to protect with, so only `Hint::PRIORITY` loads are
        // protected; applications construct `Priority` themselves to get a handle.
        "priority" => plain("priority", || Box::new(Priority::new()), false),
        _ => {
            return Err(PolicyConfigError::UnknownPolicy {
                name: name.to_string(),
                known: POLICY_NAMES.join(", "),
            })
        }
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
