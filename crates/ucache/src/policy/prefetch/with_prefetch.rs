//! Pairs any eviction policy with any prefetcher.
//!
//! Every [`Policy`] hook is forwarded to the wrapped policy except the two prefetch hooks,
//! which the prefetcher answers (together with the policy's own prefetching, if it has any).
//! The forwarded hooks are spelled once, in `policy/forward.rs`, whose test fails until a hook
//! added to `Policy` later is forwarded here or answered here.

use super::super::forward::{forward_policy_hooks, Wraps};
use super::super::{Layout, Policy};
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

impl<P, F> Wraps for WithPrefetch<P, F>
where
    P: Policy,
{
    type Inner = P;
    fn wrapped(&self) -> &P {
        &self.policy
    }
    fn wrapped_mut(&mut self) -> &mut P {
        &mut self.policy
    }
}

impl<P: Policy, F: Prefetcher> Policy for WithPrefetch<P, F> {
    forward_policy_hooks!(
        choose_eviction_buffers,
        is_evictable,
        admit,
        wants_hits,
        on_miss,
        on_hit,
        on_insert,
        on_evict,
    );

    fn name(&self) -> &str {
        &self.name
    }

    fn attach(&mut self, layout: Layout) {
        self.policy.attach(layout);
        self.prefetcher.attach(layout);
        self.policy_prefetches = self.policy.has_prefetching();
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
}

#[cfg(test)]
mod tests {
    use super::super::{NoPrefetch, ReadAhead};
    use super::*;
    use crate::policy::Buffers;
    use crate::state::BufferState;
    use parking_lot::Mutex;
    use std::sync::Arc;

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
