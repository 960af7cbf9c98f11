//! Pairs any eviction policy with any prefetcher.
//!
//! Every [`Policy`] hook is forwarded to the wrapped policy except the two prefetch hooks,
//! which the prefetcher answers (together with the policy's own prefetching, if it has any).
//! A hook added to `Policy` later must be forwarded here too, or the wrapper would silently
//! fall back to its default and disable that hook for every wrapped policy; a test reads the
//! trait's source and fails until it is.

use super::super::{Buffers, Layout, Policy};
use super::Prefetcher;

pub struct WithPrefetch<P, F> {
    policy: P,
    prefetcher: F,
    name: String,
    policy_prefetches: bool,
}

impl<P: Policy, F: Prefetcher> WithPrefetch<P, F> {
    pub fn new(policy: P, prefetcher: F) -> Self {
        let name = format!("{}+{}", policy.name(), prefetcher.name());
        WithPrefetch {
            policy,
            prefetcher,
            name,
            policy_prefetches: false,
        }
    }

    pub fn policy(&self) -> &P {
        &self.policy
    }

    pub fn prefetcher(&self) -> &F {
        &self.prefetcher
    }
}

impl<P: Policy, F: Prefetcher> Policy for WithPrefetch<P, F> {
    fn name(&self) -> &str {
        &self.name
    }

    fn attach(&mut self, layout: Layout) {
        self.policy.attach(layout);
        self.prefetcher.attach(layout);
        self.policy_prefetches = self.policy.has_prefetching();
    }

    fn choose_eviction_buffers(&self, buffers: &Buffers<'_>, want: usize, out: &mut Vec<u64>) {
        self.policy.choose_eviction_buffers(buffers, want, out);
    }

    fn is_evictable(&self, index: u64) -> bool {
        self.policy.is_evictable(index)
    }

    fn has_prefetching(&self) -> bool {
        self.prefetcher.is_active() || self.policy_prefetches
    }

    fn choose_prefetch_buffers(&self, index: u64, out: &mut Vec<u64>) {
        if self.policy_prefetches {
            self.policy.choose_prefetch_buffers(index, out);
        }
        self.prefetcher.on_miss(index, out);
    }

    fn wants_hits(&self) -> bool {
        self.policy.wants_hits()
    }

    fn on_miss(&self, index: u64) {
        self.policy.on_miss(index);
    }

    fn admit(&self, index: u64) -> bool {
        self.policy.admit(index)
    }

    fn on_hit(&self, index: u64) {
        self.policy.on_hit(index);
    }

    fn on_insert(&self, index: u64) {
        self.policy.on_insert(index);
    }

    fn on_evict(&self, index: u64) {
        self.policy.on_evict(index);
    }
}

#[cfg(test)]
mod tests {
    use super::super::{NoPrefetch, ReadAhead};
    use super::*;
    use crate::state::BufferState;
    use parking_lot::Mutex;
    use std::sync::Arc;

    /// The hooks `trait Policy` declares, read from its source.
    fn policy_hooks() -> Vec<String> {
        let src = include_str!("../mod.rs");
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

    #[test]
    fn forwards_every_policy_hook() {
        let hooks = policy_hooks();
        assert!(hooks.len() >= 11, "parsed {hooks:?}");
        let src = include_str!("with_prefetch.rs");
        let imp = &src[src
            .find("impl<P: Policy, F: Prefetcher> Policy for")
            .unwrap()..];
        for h in &hooks {
            assert!(
                imp.contains(&format!("fn {h}(")),
                "WithPrefetch does not forward Policy::{h}"
            );
        }
    }

    /// Records every hook call, so forwarding is checked by behaviour too.
    struct Recorder(Arc<Mutex<Vec<String>>>);
    impl Recorder {
        fn log(&self, s: String) {
            self.0.lock().push(s);
        }
    }
    impl Policy for Recorder {
        fn name(&self) -> &str {
            "rec"
        }
        fn attach(&mut self, layout: Layout) {
            self.log(format!("attach {}", layout.buffers));
        }
        fn choose_eviction_buffers(&self, _: &Buffers<'_>, want: usize, out: &mut Vec<u64>) {
            self.log(format!("choose {want}"));
            out.push(7);
        }
        fn is_evictable(&self, index: u64) -> bool {
            self.log(format!("evictable {index}"));
            index != 3
        }
        fn has_prefetching(&self) -> bool {
            true
        }
        fn choose_prefetch_buffers(&self, index: u64, out: &mut Vec<u64>) {
            out.push(index + 100);
        }
        fn wants_hits(&self) -> bool {
            self.log("wants_hits".into());
            true
        }
        fn on_hit(&self, index: u64) {
            self.log(format!("hit {index}"));
        }
        fn on_miss(&self, index: u64) {
            self.log(format!("miss {index}"));
        }
        fn on_insert(&self, index: u64) {
            self.log(format!("insert {index}"));
        }
        fn on_evict(&self, index: u64) {
            self.log(format!("evict {index}"));
        }
    }

    #[test]
    fn forwards_calls_and_answers_prefetch() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let mut p = WithPrefetch::new(Recorder(log.clone()), ReadAhead::new(2, 4));
        assert_eq!(p.name(), "rec+readahead");
        p.attach(Layout {
            buffers: 50,
            capacity: 10,
            buffer_size: 4096,
        });
        let states: Vec<BufferState> = (0..50).map(|_| BufferState::new()).collect();
        let mut out = Vec::new();
        p.choose_eviction_buffers(&Buffers::new(&states), 2, &mut out);
        assert_eq!(out, vec![7]);
        assert!(!p.is_evictable(3));
        assert!(p.wants_hits());
        p.on_hit(1);
        p.on_miss(2);
        p.on_insert(2);
        p.on_evict(1);
        assert!(p.has_prefetching());
        let mut pre = Vec::new();
        p.choose_prefetch_buffers(0, &mut pre);
        assert_eq!(
            pre,
            vec![100, 1, 2],
            "the policy's own, then the readahead window"
        );
        assert_eq!(
            *log.lock(),
            vec![
                "attach 50",
                "choose 2",
                "evictable 3",
                "wants_hits",
                "hit 1",
                "miss 2",
                "insert 2",
                "evict 1"
            ]
        );
    }

    #[test]
    fn no_prefetch_turns_prefetching_off() {
        let mut p = WithPrefetch::new(crate::policy::Clock::new(), NoPrefetch);
        p.attach(Layout {
            buffers: 8,
            capacity: 4,
            buffer_size: 4096,
        });
        assert!(!p.has_prefetching());
    }
}
