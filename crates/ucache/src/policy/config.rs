//! Policies as values: one typed configuration per policy, behind one trait.
//!
//! Each policy's file holds its own configuration struct (`S3FifoConfig` in `s3fifo.rs`, ...)
//! with the parameters that used to be constants there; its [`Default`] is the policy as it
//! ran before it had parameters, so `S3FifoConfig::default().build()` and `S3Fifo::new()` are
//! the same policy. A program builds one in code (`S3FifoConfig { small_size_ratio: 0.2,
//! ..Default::default() }.build()?`); command lines, Python and C spell the same thing as a
//! string, parsed by [`parse_policy`]:
//!
//! ```text
//! name[:item[,item...]]     item = key=value | preset
//! s3fifo                     the defaults
//! s3fifo:small_size_ratio=0.2,move_to_main_threshold=2
//! s3fifo:libcachesim         libCacheSim 0.3.5's defaults for its policy of that name
//! ```
//!
//! Parameter names are libCacheSim's where libCacheSim has the parameter (`small_size_ratio`,
//! `n_bit_counter`, `a_in_size_ratio`, ...), so a researcher comparing the two uses one
//! vocabulary. Items apply left to right: a preset, then overrides.
//!
//! Every value is validated before a policy is built, with a [`PolicyConfigError`] that names
//! the policy, the parameter, the value and what was expected: a typo never silently falls
//! back to a default.

use std::fmt::Debug;

use super::Policy;

/// Why a policy configuration was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PolicyConfigError {
    /// The spec names no known policy.
    #[error("unknown policy '{name}' (known: {known})")]
    UnknownPolicy { name: String, known: String },
    /// The policy has no parameter of this name.
    #[error("policy '{policy}' has no parameter '{key}' (its parameters: {known})")]
    UnknownParameter {
        policy: &'static str,
        key: String,
        known: String,
    },
    /// The policy has no preset of this name.
    #[error("policy '{policy}' has no preset '{preset}' (its presets: {known})")]
    UnknownPreset {
        policy: &'static str,
        preset: String,
        known: String,
    },
    /// A value that does not parse, or lies outside the parameter's range.
    #[error("policy '{policy}': {key}={value} is invalid: {expected}")]
    InvalidValue {
        policy: &'static str,
        key: &'static str,
        value: String,
        expected: String,
    },
    /// A spec that is not `name[:item,...]`.
    #[error("bad policy spec '{0}': expected name[:key=value|preset,...]")]
    BadSpec(String),
}

/// A policy's typed configuration. Implemented once per policy, next to the policy.
pub trait PolicyConfig: Debug + Send + Sync {
    /// The registry name of the policy this builds.
    fn policy_name(&self) -> &'static str;

    /// The parameters and their current values, in a stable order (names as `set` takes them).
    fn params(&self) -> Vec<(&'static str, String)> {
        Vec::new()
    }

    /// Sets one parameter from its text form. The value is checked here for its type and
    /// again by [`PolicyConfig::validate`] for its range (a field set in code skips this).
    fn set(&mut self, key: &str, value: &str) -> Result<(), PolicyConfigError> {
        let _ = value;
        Err(self.unknown_parameter(key))
    }

    /// The presets this policy knows, besides `default`.
    fn presets(&self) -> &'static [&'static str] {
        &[]
    }

    /// Applies one of the policy's own presets ([`parse_policy`] handles `default`, which every
    /// policy has).
    fn preset(&mut self, name: &str) -> Result<(), PolicyConfigError> {
        Err(unknown_preset(self, name))
    }

    /// Checks every parameter's range.
    fn validate(&self) -> Result<(), PolicyConfigError> {
        Ok(())
    }

    /// The policy, from a configuration that [`PolicyConfig::validate`] accepted.
    fn build_unchecked(&self) -> Box<dyn Policy>;

    /// Validates, then builds the policy.
    fn build(&self) -> Result<Box<dyn Policy>, PolicyConfigError> {
        self.validate()?;
        Ok(self.build_unchecked())
    }

    /// The spec string that [`parse_policy`] turns back into this configuration.
    fn spec(&self) -> String {
        let p = self.params();
        if p.is_empty() {
            return self.policy_name().to_string();
        }
        let items: Vec<String> = p.iter().map(|(k, v)| format!("{k}={v}")).collect();
        format!("{}:{}", self.policy_name(), items.join(","))
    }

    #[doc(hidden)]
    fn unknown_parameter(&self, key: &str) -> PolicyConfigError {
        let names: Vec<&str> = self.params().iter().map(|(k, _)| *k).collect();
        PolicyConfigError::UnknownParameter {
            policy: self.policy_name(),
            key: key.to_string(),
            known: if names.is_empty() {
                "none".to_string()
            } else {
                names.join(", ")
            },
        }
    }
}

/// The error for a preset that `config` does not know.
/// [`PolicyConfig::preset`] for a configuration whose one preset besides `default` is
/// libCacheSim's parameters.
pub(crate) fn default_or_libcachesim<C: PolicyConfig + Default>(
    config: &mut C,
    name: &str,
    libcachesim: fn() -> C,
) -> Result<(), PolicyConfigError> {
    *config = match name {
        "default" => C::default(),
        "libcachesim" => libcachesim(),
        _ => return Err(unknown_preset(config, name)),
    };
    Ok(())
}

pub(crate) fn unknown_preset<C: PolicyConfig + ?Sized>(
    config: &C,
    name: &str,
) -> PolicyConfigError {
    PolicyConfigError::UnknownPreset {
        policy: config.policy_name(),
        preset: name.to_string(),
        known: known(std::iter::once("default").chain(config.presets().iter().copied())),
    }
}

fn known<'a>(names: impl Iterator<Item = &'a str>) -> String {
    names.collect::<Vec<_>>().join(", ")
}

/// A value of parameter `key` of `policy`, parsed from text.
pub(crate) fn parse_value<T: std::str::FromStr>(
    policy: &'static str,
    key: &'static str,
    value: &str,
    expected: &str,
) -> Result<T, PolicyConfigError> {
    value
        .trim()
        .parse()
        .map_err(|_| PolicyConfigError::InvalidValue {
            policy,
            key,
            value: value.to_string(),
            expected: expected.to_string(),
        })
}

/// Checks that `value` lies in `lo..=hi` (or `lo < value` with `open_low`).
pub(crate) fn check_ratio(
    policy: &'static str,
    key: &'static str,
    value: f64,
    open_low: bool,
    hi: f64,
) -> Result<(), PolicyConfigError> {
    let ok = value.is_finite() && value <= hi && if open_low { value > 0.0 } else { value >= 0.0 };
    if ok {
        return Ok(());
    }
    Err(PolicyConfigError::InvalidValue {
        policy,
        key,
        value: value.to_string(),
        expected: format!("a number in {}0, {hi}]", if open_low { "(" } else { "[" }),
    })
}

/// Checks that `value` is a share of the capacity that leaves some of it to `rest` (the
/// open interval (0, 1)): a small queue, a window.
pub(crate) fn check_share(
    policy: &'static str,
    key: &'static str,
    value: f64,
    rest: &str,
) -> Result<(), PolicyConfigError> {
    if value.is_finite() && value > 0.0 && value < 1.0 {
        return Ok(());
    }
    Err(PolicyConfigError::InvalidValue {
        policy,
        key,
        value: value.to_string(),
        expected: format!("a number in (0, 1): {rest} needs the rest"),
    })
}

/// Checks that an integer parameter lies in `lo..=hi`.
pub(crate) fn check_range(
    policy: &'static str,
    key: &'static str,
    value: u64,
    lo: u64,
    hi: u64,
) -> Result<(), PolicyConfigError> {
    if (lo..=hi).contains(&value) {
        return Ok(());
    }
    Err(PolicyConfigError::InvalidValue {
        policy,
        key,
        value: value.to_string(),
        expected: format!("an integer from {lo} to {hi}"),
    })
}

/// `floor(capacity × ratio)`, at least 1: how libCacheSim sizes a policy's queues, in buffers.
pub(crate) fn share(capacity: u64, ratio: f64) -> u64 {
    ((capacity as f64 * ratio) as u64).max(1)
}

/// The configuration of a policy that has no parameters (LRU, FIFO, ARC, ...): it only names
/// the policy. Its only preset is `default`, plus `libcachesim` where libCacheSim's policy of
/// that name is the same algorithm (so the spelling works for every shared policy).
#[derive(Clone, Copy)]
pub struct PlainConfig {
    name: &'static str,
    make: fn() -> Box<dyn Policy>,
    libcachesim: bool,
}

impl Debug for PlainConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlainConfig")
            .field("name", &self.name)
            .finish()
    }
}

impl PlainConfig {
    pub(crate) const fn new(
        name: &'static str,
        make: fn() -> Box<dyn Policy>,
        libcachesim: bool,
    ) -> Self {
        PlainConfig {
            name,
            make,
            libcachesim,
        }
    }
}

impl PolicyConfig for PlainConfig {
    fn policy_name(&self) -> &'static str {
        self.name
    }
    fn presets(&self) -> &'static [&'static str] {
        if self.libcachesim {
            &["libcachesim"]
        } else {
            &[]
        }
    }
    fn preset(&mut self, name: &str) -> Result<(), PolicyConfigError> {
        if name == "default" || (self.libcachesim && name == "libcachesim") {
            return Ok(());
        }
        Err(unknown_preset(self, name))
    }
    fn build_unchecked(&self) -> Box<dyn Policy> {
        (self.make)()
    }
}

/// Parses a policy spec (`name[:key=value|preset,...]`, see the module docs) into its typed
/// configuration, validated.
pub fn parse_policy(spec: &str) -> Result<Box<dyn PolicyConfig>, PolicyConfigError> {
    let spec = spec.trim();
    let (name, items) = match spec.split_once(':') {
        Some((n, rest)) => (n.trim(), Some(rest)),
        None => (spec, None),
    };
    let mut cfg = super::registry::config_by_name(name)?;
    if let Some(items) = items {
        for item in items.split(',') {
            let item = item.trim();
            if item.is_empty() {
                return Err(PolicyConfigError::BadSpec(spec.to_string()));
            }
            match item.split_once('=') {
                Some((k, v)) => cfg.set(k.trim(), v.trim())?,
                // Every policy's defaults, whatever presets it has of its own.
                None if item == "default" => cfg = super::registry::config_by_name(name)?,
                None => cfg.preset(item)?,
            }
        }
    }
    cfg.validate()?;
    Ok(cfg)
}

/// Splits a comma-separated list of specs (`clock,s3fifo:libcachesim,small_size_ratio=0.2,lru`)
/// into specs. An item joins the spec before it when it is a `key=value` or, after a spec with
/// parameters, anything that is not a policy name (a preset): preset names and policy names
/// never coincide, so the split is unambiguous.
pub fn split_policy_list(list: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for item in list.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let name = item.split(':').next().unwrap_or(item);
        let joins = match out.last() {
            // A ':' starts a spec (parameter names never hold one).
            Some(prev) if prev.contains(':') && !item.contains(':') => {
                item.contains('=') || !super::POLICY_NAMES.contains(&name)
            }
            _ => false,
        };
        match out.last_mut() {
            Some(prev) if joins => {
                prev.push(',');
                prev.push_str(item);
            }
            _ => out.push(item.to_string()),
        }
    }
    out
}

/// The policy a spec describes: [`parse_policy`], then [`PolicyConfig::build`].
pub fn policy_from_spec(spec: &str) -> Result<Box<dyn Policy>, PolicyConfigError> {
    parse_policy(spec)?.build()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{S3FifoConfig, POLICY_NAMES};

    #[test]
    fn every_policy_parses_by_name_and_round_trips_its_spec() {
        for &n in POLICY_NAMES {
            let c = parse_policy(n).unwrap();
            assert_eq!(c.policy_name(), n);
            let again = parse_policy(&c.spec()).unwrap();
            assert_eq!(again.params(), c.params(), "{n}");
            assert_eq!(c.build().unwrap().name(), n);
            // `default` is every policy's preset.
            parse_policy(&format!("{n}:default")).unwrap();
        }
    }

    #[test]
    fn parameters_and_presets_apply_left_to_right() {
        let c = parse_policy("s3fifo:libcachesim,small_size_ratio=0.2").unwrap();
        let p = c.params();
        assert!(p.contains(&("small_size_ratio", "0.2".into())), "{p:?}");
        assert!(p.contains(&("move_to_main_threshold", "2".into())), "{p:?}");
        let d = S3FifoConfig::default();
        assert_eq!(parse_policy("s3fifo").unwrap().params(), d.params());
    }

    #[test]
    fn policy_lists_split_between_specs() {
        assert_eq!(
            split_policy_list(
                "clock, s3fifo:libcachesim,small_size_ratio=0.2,lru,2q:a_in_size_ratio=0.3"
            ),
            vec![
                "clock",
                "s3fifo:libcachesim,small_size_ratio=0.2",
                "lru",
                "2q:a_in_size_ratio=0.3"
            ]
        );
        // Without a ':' nothing joins: the unknown name is refused later, not swallowed.
        assert_eq!(split_policy_list("lru,x=1"), vec!["lru", "x=1"]);
    }

    #[test]
    fn bad_specs_are_typed_errors_that_name_what_is_wrong() {
        let e = |s: &str| parse_policy(s).unwrap_err();
        assert!(matches!(e("nope"), PolicyConfigError::UnknownPolicy { .. }));
        assert!(e("nope").to_string().contains("known: clock"));
        let u = e("s3fifo:smal_size_ratio=0.1");
        assert!(
            matches!(u, PolicyConfigError::UnknownParameter { .. }),
            "{u}"
        );
        assert!(u.to_string().contains("small_size_ratio"), "{u}");
        assert!(matches!(
            e("lru:k=2"),
            PolicyConfigError::UnknownParameter { .. }
        ));
        assert!(matches!(
            e("s3fifo:fast"),
            PolicyConfigError::UnknownPreset { .. }
        ));
        for bad in [
            "s3fifo:small_size_ratio=abc",
            "s3fifo:small_size_ratio=0",
            "s3fifo:small_size_ratio=1.5",
            "s3fifo:small_size_ratio=NaN",
            "s3fifo:move_to_main_threshold=0",
            "s3fifo:move_to_main_threshold=-1",
            "clock:n_bit_counter=0",
            "clock:n_bit_counter=9",
            "clock:init_freq=4",
            "2q:a_in_size_ratio=1",
            "lfu:samples=0",
            "w-tinylfu:window_size=1",
            "lirs:hir_ratio=0.9",
        ] {
            let err = e(bad);
            assert!(
                matches!(err, PolicyConfigError::InvalidValue { .. }),
                "{bad}: {err}"
            );
        }
        let whole = e("s3fifo:small_size_ratio=1").to_string();
        assert!(whole.contains("the main queue needs the rest"), "{whole}");
        assert!(matches!(e("s3fifo:"), PolicyConfigError::BadSpec(_)));
        assert!(matches!(
            e("s3fifo:a=1,,"),
            PolicyConfigError::UnknownParameter { .. } | PolicyConfigError::BadSpec(_)
        ));
        // A range error set in code is caught by build, not only by the parser.
        let c = S3FifoConfig {
            small_size_ratio: 0.0,
            ..Default::default()
        };
        assert!(c.build().is_err());
    }
}
