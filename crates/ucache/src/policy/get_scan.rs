//! GET-SCAN: the application-informed policy of cache_ext (Zussman et al., SOSP'25, §5.5),
//! which keeps a key-value store's point lookups (GETs) cached through its range scans.
//!
//! Buffers loaded by an access tagged [`Hint::SCAN`] go to a scan list that is evicted first;
//! everything else lives in a main LRU. A later untagged hit on a scanned buffer promotes it
//! to the main list (a point lookup wants it), while a scan touching a main-list buffer leaves
//! its recency alone, so scans never push point-lookup data out. Suits any program that can
//! tell its scans from its lookups (LSM compaction and range queries versus GETs, analytics
//! versus index probes) and sets the thread's hint around them ([`Hint::scoped`]).
//!
//! Prefetched buffers are loaded by the IO worker, which carries no hint, so they join the
//! main list; pair GET-SCAN with prefetching for point lookups only.
//!
//! Concurrency: two lists behind one mutex; every hook is O(1) under it.

use parking_lot::{Mutex, MutexGuard};

use super::advanced::idle;
use super::{Buffers, Hint, IndexList, Layout, Policy};

struct Lists {
    main: IndexList,
    scan: IndexList,
}

#[derive(Default)]
pub struct GetScan {
    lists: Option<Mutex<Lists>>,
}

impl GetScan {
    pub fn new() -> Self {
        Self::default()
    }

    fn lists(&self) -> MutexGuard<'_, Lists> {
        self.lists
            .as_ref()
            .expect("GetScan used before attach")
            .lock()
    }
}

impl Policy for GetScan {
    fn name(&self) -> &str {
        "get-scan"
    }

    fn attach(&mut self, layout: Layout) {
        self.lists = Some(Mutex::new(Lists {
            main: IndexList::new(layout.buffers),
            scan: IndexList::new(layout.buffers),
        }));
    }

    fn choose_eviction_buffers(&self, buffers: &Buffers<'_>, want: usize, out: &mut Vec<u64>) {
        let l = self.lists();
        let start = out.len();
        let mut next = l.scan.back();
        let mut in_scan = true;
        while out.len() - start < want {
            let Some(i) = next.or_else(|| {
                std::mem::replace(&mut in_scan, false)
                    .then(|| l.main.back())
                    .flatten()
            }) else {
                break;
            };
            next = if l.scan.contains(i) {
                l.scan.towards_front(i)
            } else {
                in_scan = false;
                l.main.towards_front(i)
            };
            if idle(buffers, i) {
                out.push(i);
            }
        }
    }

    fn wants_hits(&self) -> bool {
        true
    }

    fn on_hit(&self, x: u64) {
        let scan = Hint::current() == Hint::SCAN;
        let Some(mut l) = self.lists.as_ref().and_then(|m| m.try_lock()) else {
            return; // contended: a lossy hit (see advanced.rs)
        };
        if l.scan.contains(x) {
            if scan {
                l.scan.move_to_front(x);
            } else {
                l.scan.remove(x);
                l.main.push_front(x);
            }
        } else if !scan && l.main.contains(x) {
            l.main.move_to_front(x);
        }
    }

    fn on_insert(&self, x: u64) {
        let scan = Hint::current() == Hint::SCAN;
        let mut l = self.lists();
        if scan {
            l.scan.push_front(x);
        } else {
            l.main.push_front(x);
        }
    }

    fn on_evict(&self, x: u64) {
        let mut l = self.lists();
        if !l.scan.remove(x) {
            l.main.remove(x);
        }
    }
}

#[cfg(test)]
impl super::advanced::Audit for GetScan {
    fn tracked(&self) -> Vec<u64> {
        let l = self.lists();
        l.scan
            .iter_from_back()
            .chain(l.main.iter_from_back())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Simulator;

    #[test]
    fn scanned_buffers_go_first() {
        let mut sim = Simulator::new(Box::new(GetScan::new()), 1000, 10);
        for id in 0..6 {
            sim.access(id); // point lookups
        }
        Hint::SCAN.scoped(|| {
            for id in 100..400 {
                sim.access(id);
            }
        });
        for id in 0..6 {
            assert!(sim.is_resident(id), "GET buffer {id} survived the scan");
        }
        // The scan kept only its own tail.
        assert_eq!((396..400).filter(|&i| sim.is_resident(i)).count(), 4);
        // A GET on a scanned buffer promotes it: the next scan evicts the others first.
        assert!(sim.access(396));
        Hint::SCAN.scoped(|| {
            for id in 500..510 {
                sim.access(id);
            }
        });
        assert!(sim.is_resident(396));
        for id in 0..6 {
            assert!(sim.is_resident(id));
        }
        // Untagged misses evict from main (LRU) only once the scan list is empty.
        for id in 600..610 {
            sim.access(id);
        }
        assert!(!sim.is_resident(0));
        assert!((500..510).all(|i| !sim.is_resident(i)));
    }
}
