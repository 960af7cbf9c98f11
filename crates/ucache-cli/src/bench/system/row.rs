//! One row of a benchmark: a system, and for ucache systems the eviction policy its mapping
//! was given (`--policies`). Comparing policies is comparing rows of one run, interleaved like
//! systems, so drift on the machine hits every policy alike.

use serde::{Deserialize, Serialize};

use super::SystemKind;

/// A system under one policy spec. The spec is a name of `ucache::policy::policy_by_name`, or
/// for `tenants` two joined by `+`: tenant A's policy, then tenant B's.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(into = "RowRepr", try_from = "RowRepr")]
pub struct SystemRow {
    pub kind: SystemKind,
    pub policy: Option<String>,
    /// `system` or `system:policy`, kept so tables and plots can borrow it.
    label: String,
}

/// The JSON form: `system` keeps being a string (now with `:policy` when one was given) and
/// `policy` says the policy on its own.
#[derive(Serialize, Deserialize)]
struct RowRepr {
    system: String,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    policy: Option<String>,
}

impl From<SystemRow> for RowRepr {
    fn from(r: SystemRow) -> Self {
        RowRepr {
            system: r.label,
            policy: r.policy,
        }
    }
}

impl TryFrom<RowRepr> for SystemRow {
    type Error = String;
    fn try_from(r: RowRepr) -> Result<Self, String> {
        let kind = r.system.split(':').next().unwrap_or_default();
        Ok(SystemRow::new(SystemKind::parse(kind)?, r.policy))
    }
}

impl SystemRow {
    pub fn new(kind: SystemKind, policy: Option<String>) -> SystemRow {
        let label = match &policy {
            Some(p) => format!("{}:{p}", kind.name()),
            None => kind.name().to_string(),
        };
        SystemRow {
            kind,
            policy,
            label,
        }
    }

    pub fn plain(kind: SystemKind) -> SystemRow {
        SystemRow::new(kind, None)
    }

    pub fn name(&self) -> &str {
        &self.label
    }

    /// The rows of a run: every ucache system once per policy spec (once, with the default
    /// policy, when there are none); other systems once.
    pub fn expand(systems: &[SystemKind], policies: &[String]) -> Vec<SystemRow> {
        let mut out = Vec::new();
        for &kind in systems {
            if kind.is_ucache() && !policies.is_empty() {
                out.extend(
                    policies
                        .iter()
                        .map(|p| SystemRow::new(kind, Some(p.clone()))),
                );
            } else {
                out.push(SystemRow::plain(kind));
            }
        }
        out
    }
}

/// Checks a `--policies` entry: one policy name, or `A+B` for the two tenants.
pub fn parse_policy_spec(s: &str) -> Result<String, String> {
    let s = s.trim();
    let parts: Vec<&str> = s.split('+').collect();
    if parts.len() > 2 {
        return Err(format!(
            "policy spec '{s}': at most two names joined by '+'"
        ));
    }
    for p in &parts {
        if ucache::policy::policy_by_name(p).is_none() {
            return Err(format!(
                "unknown policy '{p}' (choose from {})",
                ucache::policy::POLICY_NAMES.join(", ")
            ));
        }
    }
    Ok(s.to_string())
}

/// A spec's policy for tenant A and tenant B (the same name for both when only one is given).
pub fn split_policy_spec(spec: &str) -> (&str, &str) {
    match spec.split_once('+') {
        Some((a, b)) => (a, b),
        None => (spec, spec),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ucache_systems_get_a_row_per_policy() {
        let rows = SystemRow::expand(
            &[SystemKind::UcacheExplicit, SystemKind::Mmap],
            &["lru".into(), "lfu+mru".into()],
        );
        let names: Vec<&str> = rows.iter().map(|r| r.name()).collect();
        assert_eq!(
            names,
            ["ucache-explicit:lru", "ucache-explicit:lfu+mru", "mmap"]
        );
        let plain = SystemRow::expand(&[SystemKind::UcacheExplicit], &[]);
        assert_eq!(plain[0].name(), "ucache-explicit");
    }

    #[test]
    fn json_keeps_system_a_string_and_adds_policy() {
        let r = SystemRow::new(SystemKind::UcacheExplicit, Some("lru".into()));
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"system": "ucache-explicit:lru", "policy": "lru"})
        );
        assert_eq!(serde_json::from_value::<SystemRow>(v).unwrap(), r);
        let m = serde_json::to_value(SystemRow::plain(SystemKind::Mmap)).unwrap();
        assert_eq!(m, serde_json::json!({"system": "mmap"}));
    }

    #[test]
    fn policy_specs() {
        assert_eq!(parse_policy_spec(" lfu ").unwrap(), "lfu");
        assert_eq!(parse_policy_spec("lfu+mru").unwrap(), "lfu+mru");
        assert!(parse_policy_spec("nope").is_err());
        assert!(parse_policy_spec("lru+lru+lru").is_err());
        assert_eq!(split_policy_spec("lfu+mru"), ("lfu", "mru"));
        assert_eq!(split_policy_spec("lru"), ("lru", "lru"));
    }
}
