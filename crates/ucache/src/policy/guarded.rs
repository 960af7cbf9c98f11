//! The manager's side of the policy contract: every hook call goes through here.
//!
//! cache_ext lets untrusted eBPF policies run inside the kernel because the kernel validates
//! what they propose and falls back to its own policy; ucache gives application policies the
//! same footing. A policy's proposals are topped up by the [`Fallback`] sweep when they are too
//! few, and a policy that panics is switched off for the rest of the mapping's life (its own
//! structures may be half-updated) while the cache goes on with the fallback. A panic therefore
//! never unwinds through the buffer protocol, where it could strand a buffer mid-transition.
//! This relies on unwinding: under `panic = "abort"` a policy panic aborts the process.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};

use std::sync::Arc;

use super::{Buffers, Fallback, GlobalPolicy, Layout, MappingUsage, Policy, ProportionalGlobal};

/// Runs a policy hook: its panic is caught, and for its duration the thread is marked as
/// inside a hook, so that a call the hook makes back into the mapping refuses to wait for a
/// buffer in transition ([`crate::held::in_hook`]): the thread running the hook may be the one
/// that holds it (a load or an eviction the hook is part of).
fn hook<R>(f: AssertUnwindSafe<impl FnOnce() -> R>) -> std::thread::Result<R> {
    let _inside = crate::held::InHook::enter();
    std::panic::catch_unwind(f)
}

pub(crate) struct Guarded {
    policy: Box<dyn Policy>,
    broken: AtomicBool,
    fallback: Fallback,
    wants_hits: bool,
    has_prefetching: bool,
}

impl Guarded {
    /// Attaches `policy` to a mapping of this layout.
    pub fn new(mut policy: Box<dyn Policy>, layout: Layout) -> Self {
        let attached = hook(AssertUnwindSafe(|| {
            policy.attach(layout);
            (policy.wants_hits(), policy.has_prefetching())
        }));
        let (wants_hits, has_prefetching, broken) = match attached {
            Ok((h, p)) => (h, p, false),
            Err(_) => (false, false, true),
        };
        Guarded {
            policy,
            broken: AtomicBool::new(broken),
            fallback: Fallback::new(),
            wants_hits,
            has_prefetching,
        }
    }

    #[inline]
    fn call<R>(&self, default: R, f: impl FnOnce(&dyn Policy) -> R) -> R {
        if self.broken.load(Ordering::Relaxed) {
            return default;
        }
        match hook(AssertUnwindSafe(|| f(&*self.policy))) {
            Ok(r) => r,
            Err(_) => {
                self.broken.store(true, Ordering::Relaxed);
                default
            }
        }
    }

    /// The policy's name; "fallback" once it has been switched off.
    pub fn name(&self) -> &str {
        if self.is_broken() {
            "fallback"
        } else {
            self.policy.name()
        }
    }

    /// Whether the policy panicked and the manager is running on its fallback.
    pub fn is_broken(&self) -> bool {
        self.broken.load(Ordering::Relaxed)
    }

    /// The policy itself (for callers that downcast to a known policy through their own
    /// handle; the manager only uses the hooks).
    pub fn policy(&self) -> &dyn Policy {
        &*self.policy
    }

    /// Fills `out` with up to `want` victims: the policy's proposals, topped up by the fallback
    /// when it proposes fewer. Candidates are still only candidates; the caller validates them.
    /// Returns how many of the appended candidates (the first ones) came from the policy.
    pub fn choose_eviction_buffers(
        &self,
        buffers: &Buffers<'_>,
        want: usize,
        out: &mut Vec<u64>,
    ) -> usize {
        let start = out.len();
        self.call((), |p| p.choose_eviction_buffers(buffers, want, out));
        if self.is_broken() {
            out.truncate(start);
        }
        out.retain(|&i| i < buffers.len());
        let got = out.len() - start;
        if got < want {
            self.fallback.victims(buffers, want - got, out);
        }
        got
    }

    /// The fallback alone: for when none of the proposals validated.
    pub fn fallback_victims(&self, buffers: &Buffers<'_>, want: usize, out: &mut Vec<u64>) {
        self.fallback.victims(buffers, want, out);
    }

    /// Whether the buffer may be evicted now. This is the check that ties the cache to the
    /// application's own invariants (a page whose log records are not durable yet), so it
    /// outlives a panic in any other hook: it is still asked once the rest of the policy is
    /// switched off, and a panic in it answers "not now" rather than "yes".
    #[inline]
    pub fn is_evictable(&self, index: u64) -> bool {
        match hook(AssertUnwindSafe(|| self.policy.is_evictable(index))) {
            Ok(yes) => yes,
            Err(_) => {
                self.broken.store(true, Ordering::Relaxed);
                false
            }
        }
    }

    /// The policy's admission decision; a broken policy admits everything, as the cache
    /// without a policy would.
    #[inline]
    pub fn admit(&self, index: u64) -> bool {
        self.call(true, |p| p.admit(index))
    }

    #[inline]
    pub fn wants_hits(&self) -> bool {
        self.wants_hits
    }

    #[inline]
    pub fn has_prefetching(&self) -> bool {
        self.has_prefetching
    }

    pub fn choose_prefetch_buffers(&self, index: u64, out: &mut Vec<u64>) {
        let start = out.len();
        self.call((), |p| p.choose_prefetch_buffers(index, out));
        if self.is_broken() {
            out.truncate(start);
        }
    }

    #[inline]
    pub fn on_hit(&self, index: u64) {
        self.call((), |p| p.on_hit(index));
    }

    #[inline]
    pub fn on_miss(&self, index: u64) {
        self.call((), |p| p.on_miss(index));
    }

    #[inline]
    pub fn on_insert(&self, index: u64) {
        self.call((), |p| p.on_insert(index));
    }

    #[inline]
    pub fn on_evict(&self, index: u64) {
        self.call((), |p| p.on_evict(index));
    }
}

/// The cache's side of the global policy contract, as [`Guarded`] is a mapping's: a global
/// policy that panics is switched off for the rest of the cache's life, and the cache goes on
/// with [`ProportionalGlobal`] and the plain budget test. Its hooks run inside `reserve`, while
/// the caller holds a buffer it claimed for loading: an unwind there would strand it.
pub(crate) struct GuardedGlobal {
    policy: Arc<dyn GlobalPolicy>,
    broken: AtomicBool,
}

impl GuardedGlobal {
    pub fn new(policy: Arc<dyn GlobalPolicy>) -> Self {
        GuardedGlobal {
            policy,
            broken: AtomicBool::new(false),
        }
    }

    /// Whether the policy panicked and the cache runs on the default.
    pub fn is_broken(&self) -> bool {
        self.broken.load(Ordering::Relaxed)
    }

    /// A policy may ask to evict early, never late: the budget is a bound (policies size their
    /// bookkeeping from it, and the stress tests hold the cache to it).
    #[inline]
    pub fn need_to_evict(&self, used: u64, want: u64, budget: u64) -> bool {
        if !self.is_broken() {
            match hook(AssertUnwindSafe(|| {
                self.policy.need_to_evict(used, want, budget)
            })) {
                Ok(r) => return r || used + want > budget,
                Err(_) => self.broken.store(true, Ordering::Relaxed),
            }
        }
        used + want > budget
    }

    /// The policy's order, then every mapping it left out: a global policy proposes where to
    /// evict first, and one that names too few mappings must not stop the cache from freeing
    /// memory that the others hold.
    pub fn choose_eviction_mappings(&self, usage: &[MappingUsage], out: &mut Vec<usize>) {
        let start = out.len();
        if !self.is_broken() {
            let r = hook(AssertUnwindSafe(|| {
                self.policy.choose_eviction_mappings(usage, out)
            }));
            if r.is_err() {
                self.broken.store(true, Ordering::Relaxed);
                out.truncate(start);
            }
        }
        if self.is_broken() {
            ProportionalGlobal.choose_eviction_mappings(usage, out);
        }
        let mut named = vec![false; usage.len()];
        out.retain(|&k| k < usage.len() && !std::mem::replace(&mut named[k], true));
        out.extend((0..usage.len()).filter(|&k| !named[k]));
    }
}
