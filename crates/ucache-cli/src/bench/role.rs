//! What one thread of a mixed workload does: `getscan` and `tenants` (cache_ext §6) give half
//! the threads point lookups and the other half scans, and the interesting numbers are each
//! half's own throughput and tail latency, not their sum (a policy that starves the scan
//! may double GET throughput and still lose on the total).

use serde::{Deserialize, Serialize};
use ucache::policy::Hint;

use super::workload::Workload;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    /// The only kind of thread of a single-class workload.
    All,
    /// `getscan`: Zipf point lookups.
    Get,
    /// `getscan`: sequential passes over the whole mapping, tagged [`Hint::SCAN`].
    Scan,
    /// `tenants`: Zipf lookups on the first mapping.
    TenantA,
    /// `tenants`: sequential passes over the second mapping, tagged [`Hint::SCAN`].
    TenantB,
}

impl Role {
    /// The role of thread `thread` of `threads`: the first half (rounded up, so one thread
    /// still does lookups) take the lookup role.
    pub fn of(workload: Workload, thread: usize, threads: usize) -> Role {
        let lookup = thread < threads.div_ceil(2);
        match workload {
            Workload::Getscan if lookup => Role::Get,
            Workload::Getscan => Role::Scan,
            Workload::Tenants if lookup => Role::TenantA,
            Workload::Tenants => Role::TenantB,
            _ => Role::All,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Role::All => "all",
            Role::Get => "get",
            Role::Scan => "scan",
            Role::TenantA => "tenant-a",
            Role::TenantB => "tenant-b",
        }
    }

    /// Reads every page of the buffer, as a scan does, rather than one word.
    pub fn scans(self) -> bool {
        matches!(self, Role::Scan | Role::TenantB)
    }

    /// The thread's hint for the whole run: the policy learns which loads are a scan's.
    pub fn hint(self) -> Hint {
        match self {
            Role::Scan | Role::TenantB => Hint::SCAN,
            Role::Get | Role::TenantA => Hint::POINT,
            Role::All => Hint::NONE,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn half_the_threads_look_up_and_at_least_one() {
        let roles = |w, n| (0..n).map(|t| Role::of(w, t, n)).collect::<Vec<_>>();
        assert_eq!(roles(Workload::Getscan, 1), [Role::Get]);
        assert_eq!(
            roles(Workload::Getscan, 3),
            [Role::Get, Role::Get, Role::Scan]
        );
        assert_eq!(roles(Workload::Tenants, 2), [Role::TenantA, Role::TenantB]);
        assert_eq!(roles(Workload::YcsbA, 2), [Role::All, Role::All]);
        assert!(Role::Scan.scans() && !Role::Get.scans());
        assert_eq!(Role::TenantB.hint(), Hint::SCAN);
    }
}
