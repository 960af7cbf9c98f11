//! Forwarding [`Policy`] hooks to a wrapped policy, written once.
//!
//! Wrappers ([`super::Veto`], [`super::prefetch::WithPrefetch`], `Box<dyn Policy>`) change one
//! or two hooks and must pass every other to the policy they wrap. Most hooks have a default, so
//! a hook a wrapper forgets does not fail to compile: it silently falls back to the default and
//! switches that hook off for every wrapped policy. Each forwarded hook is therefore spelled
//! once, in [`forward_policy_hooks!`], and a test reads the trait's source and fails until every
//! hook is forwarded by the macro and, in each wrapper, either forwarded or written by hand.

use super::Policy;

/// A policy that wraps another: where [`forward_policy_hooks!`] sends the hooks it forwards.
pub(crate) trait Wraps {
    type Inner: Policy + ?Sized;
    fn wrapped(&self) -> &Self::Inner;
    fn wrapped_mut(&mut self) -> &mut Self::Inner;
}

/// Inside an `impl Policy for W` where `W: Wraps`, defines each named hook as a call of the same
/// hook on `W::wrapped()`; `all` names every hook.
macro_rules! forward_policy_hooks {
    (all) => {
        $crate::policy::forward::forward_policy_hooks!(
            name,
            attach,
            choose_eviction_buffers,
            is_evictable,
            admit,
            has_prefetching,
            choose_prefetch_buffers,
            wants_hits,
            on_miss,
            on_hit,
            on_insert,
            on_evict
        );
    };
    ($($hook:ident),+ $(,)?) => {
        $($crate::policy::forward::forward_policy_hooks!(@ $hook);)+
    };
    (@ name) => {
        fn name(&self) -> &str {
            $crate::policy::forward::Wraps::wrapped(self).name()
        }
    };
    (@ attach) => {
        fn attach(&mut self, layout: $crate::policy::Layout) {
            $crate::policy::forward::Wraps::wrapped_mut(self).attach(layout)
        }
    };
    (@ choose_eviction_buffers) => {
        fn choose_eviction_buffers(
            &self,
            buffers: &$crate::policy::Buffers<'_>,
            want: usize,
            out: &mut Vec<u64>,
        ) {
            $crate::policy::forward::Wraps::wrapped(self).choose_eviction_buffers(buffers, want, out)
        }
    };
    (@ choose_prefetch_buffers) => {
        fn choose_prefetch_buffers(&self, index: u64, out: &mut Vec<u64>) {
            $crate::policy::forward::Wraps::wrapped(self).choose_prefetch_buffers(index, out)
        }
    };
    (@ is_evictable) => {
        fn is_evictable(&self, index: u64) -> bool {
            $crate::policy::forward::Wraps::wrapped(self).is_evictable(index)
        }
    };
    (@ admit) => {
        fn admit(&self, index: u64) -> bool {
            $crate::policy::forward::Wraps::wrapped(self).admit(index)
        }
    };
    (@ has_prefetching) => {
        fn has_prefetching(&self) -> bool {
            $crate::policy::forward::Wraps::wrapped(self).has_prefetching()
        }
    };
    (@ wants_hits) => {
        fn wants_hits(&self) -> bool {
            $crate::policy::forward::Wraps::wrapped(self).wants_hits()
        }
    };
    (@ on_miss) => {
        fn on_miss(&self, index: u64) {
            $crate::policy::forward::Wraps::wrapped(self).on_miss(index)
        }
    };
    (@ on_hit) => {
        fn on_hit(&self, index: u64) {
            $crate::policy::forward::Wraps::wrapped(self).on_hit(index)
        }
    };
    (@ on_insert) => {
        fn on_insert(&self, index: u64) {
            $crate::policy::forward::Wraps::wrapped(self).on_insert(index)
        }
    };
    (@ on_evict) => {
        fn on_evict(&self, index: u64) {
            $crate::policy::forward::Wraps::wrapped(self).on_evict(index)
        }
    };
}
pub(crate) use forward_policy_hooks;

/// A boxed policy is a policy, so wrappers such as [`super::Veto`] take one chosen by name
/// ([`super::policy_by_name`]) as readily as a concrete type.
impl Wraps for Box<dyn Policy> {
    type Inner = dyn Policy;
    fn wrapped(&self) -> &dyn Policy {
        &**self
    }
    fn wrapped_mut(&mut self) -> &mut dyn Policy {
        &mut **self
    }
}

impl Policy for Box<dyn Policy> {
    forward_policy_hooks!(all);
}

#[cfg(test)]
mod tests {
    /// The hooks `trait Policy` declares, read from its source.
    fn policy_hooks() -> Vec<String> {
        let src = include_str!("mod.rs");
        let start = src
            .find("pub trait Policy")
            .expect("trait Policy in policy/mod.rs");
        let body = &src[start..];
        let body = &body[..body.find("\n}\n").expect("end of trait Policy")];
        body.lines()
            .filter_map(|l| l.strip_prefix("    fn "))
            .map(|l| l[..l.find(['(', '<']).unwrap()].to_string())
            .collect()
    }

    /// The text from `start` to the end of its block (a line `}` at column 0).
    fn block<'a>(src: &'a str, start: &str) -> &'a str {
        let at = &src[src
            .find(start)
            .unwrap_or_else(|| panic!("{start:?} not found"))..];
        &at[..at.find("\n}\n").expect("end of block")]
    }

    /// A hook added to the trait later must be added to the macro, and each wrapper must
    /// forward it or define it, or the wrapped policy would silently lose it.
    #[test]
    fn every_wrapper_forwards_or_defines_every_hook() {
        let hooks = policy_hooks();
        assert!(hooks.len() >= 12, "parsed {hooks:?}");
        let macro_src = block(
            include_str!("forward.rs"),
            "macro_rules! forward_policy_hooks",
        );
        let all = &macro_src[macro_src.find("(all)").unwrap()..];
        let all = &all[..all.find(");").unwrap()];
        for h in &hooks {
            assert!(
                macro_src.contains(&format!("(@ {h})")),
                "the macro cannot forward {h}"
            );
            assert!(
                all.contains(&format!("{h},")) || all.contains(&format!("{h}\n")),
                "`all` misses {h}"
            );
        }
        let wrappers = [
            (include_str!("veto.rs"), "Policy for Veto<P, F>"),
            (
                include_str!("prefetch/with_prefetch.rs"),
                "Policy for WithPrefetch<P, F>",
            ),
            (
                include_str!("forward.rs"),
                "impl Policy for Box<dyn Policy>",
            ),
        ];
        for (src, imp) in wrappers {
            let body = block(src, imp);
            let forwarded = body
                .find("forward_policy_hooks!(")
                .map(|at| &body[at..at + body[at..].find(");").unwrap()]);
            for h in &hooks {
                let defined = body.contains(&format!("fn {h}("));
                let fwd = forwarded.is_some_and(|f| {
                    f.contains("(all")
                        || f.split(|c: char| !(c.is_alphanumeric() || c == '_'))
                            .any(|w| w == h)
                });
                assert!(
                    defined ^ fwd,
                    "{imp}: {h} must be either forwarded or defined, once"
                );
            }
        }
    }
}
