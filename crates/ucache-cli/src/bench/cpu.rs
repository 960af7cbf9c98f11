//! CPU accounting: our own (getrusage) and the whole machine's (/proc/stat).
//!
//! The machine is shared and noisy, so a figure means little without knowing how much CPU
//! other processes took while it was measured. The worker samples both at the edges of the
//! measured interval; the difference is what everyone else used.

use std::fs;
use std::time::Duration;

/// CPU time (user + system) the calling process has used, all threads included.
pub fn self_cpu() -> Duration {
    // SAFETY: getrusage only writes the struct we pass.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer to a rusage.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    if rc != 0 {
        return Duration::ZERO;
    }
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// One reading of the machine-wide counters in /proc/stat's first line.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MachineCpu {
    /// user + nice + system + irq + softirq, in clock ticks: time some process (or the kernel
    /// on its behalf) ran. Guest time is already inside user.
    pub busy: u64,
    /// Time the hypervisor gave our vCPUs to someone else: not another process of ours, but
    /// worth reporting because it slows everything the same way.
    pub steal: u64,
}

impl MachineCpu {
    pub fn read() -> MachineCpu {
        fs::read_to_string("/proc/stat")
            .ok()
            .and_then(|s| parse_proc_stat(&s))
            .unwrap_or_default()
    }
}

pub fn parse_proc_stat(text: &str) -> Option<MachineCpu> {
    let line = text.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    let get = |i: usize| v.get(i).copied().unwrap_or(0);
    // user nice system idle iowait irq softirq steal guest guest_nice
    Some(MachineCpu {
        busy: get(0) + get(1) + get(2) + get(5) + get(6),
        steal: get(7),
    })
}

pub fn ticks_per_second() -> f64 {
    // SAFETY: sysconf has no memory-safety preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if hz > 0 {
        hz as f64
    } else {
        100.0
    }
}

/// What others used during an interval, in percent of one core (200 = both cores of this
/// machine), given the machine counters at both ends, our own CPU over it, and its length.
/// /proc/stat has tick (10 ms) resolution, so a few percent either way is noise; negative
/// results from that rounding are clamped to zero.
pub fn others_cpu_pct(
    before: MachineCpu,
    after: MachineCpu,
    own: Duration,
    wall: Duration,
) -> (f64, f64) {
    let hz = ticks_per_second();
    let wall = wall.as_secs_f64().max(1e-9);
    let busy = after.busy.saturating_sub(before.busy) as f64 / hz;
    let steal = after.steal.saturating_sub(before.steal) as f64 / hz;
    let others = (busy - own.as_secs_f64()).max(0.0);
    (others / wall * 100.0, steal / wall * 100.0)
}

/// The facts about the machine that make two result files comparable or not.
pub fn nproc() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

pub fn kernel_release() -> String {
    fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

pub fn cpu_model() -> String {
    fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_first_cpu_line() {
        let s = "cpu  100 5 50 1000 7 3 2 9 0 0\ncpu0 50 2 25 500 3 1 1 4 0 0\nintr 1\n";
        assert_eq!(
            parse_proc_stat(s),
            Some(MachineCpu {
                busy: 160,
                steal: 9
            })
        );
        assert_eq!(parse_proc_stat("intr 1\n"), None);
    }

    #[test]
    fn others_excludes_own_time() {
        let hz = ticks_per_second();
        let before = MachineCpu { busy: 0, steal: 0 };
        // 1.5 core-seconds busy over 1 s, of which 1 s was ours.
        let after = MachineCpu {
            busy: (1.5 * hz) as u64,
            steal: 0,
        };
        let (others, steal) = others_cpu_pct(
            before,
            after,
            Duration::from_secs(1),
            Duration::from_secs(1),
        );
        assert!((others - 50.0).abs() < 1e-6);
        assert_eq!(steal, 0.0);
        let (others, _) = others_cpu_pct(
            before,
            after,
            Duration::from_secs(3),
            Duration::from_secs(1),
        );
        assert_eq!(others, 0.0);
    }

    #[test]
    fn self_cpu_advances() {
        let a = self_cpu();
        let mut x = 0u64;
        for i in 0..20_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        assert!(self_cpu() >= a);
    }
}
