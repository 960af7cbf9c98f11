//! A memory cgroup that holds the kernel baselines to the same budget as ucache.
//!
//! Without it, mmap and pread would cache the whole data file in the page cache and the
//! comparison would be against a system with unlimited memory. ucache enforces its own budget
//! and the raw O_DIRECT systems cache nothing, so only mmap and pread run inside.
//!
//! The parent creates the group; the worker joins it itself, before it touches the data, so
//! that every page it faults in is charged to the group. Both cgroup v1 (this machine kind:
//! /sys/fs/cgroup/memory) and the v2 unified hierarchy are handled.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

const V1_ROOT: &str = "/sys/fs/cgroup/memory";
const V2_ROOT: &str = "/sys/fs/cgroup";
const PREFIX: &str = "ucache-bench-";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Version {
    V1,
    V2,
}

#[derive(Debug)]
pub struct MemCgroup {
    dir: PathBuf,
    version: Version,
    limit: u64,
}

fn detect() -> Result<Version, String> {
    if Path::new(V1_ROOT).join("memory.limit_in_bytes").exists() {
        return Ok(Version::V1);
    }
    match fs::read_to_string(Path::new(V2_ROOT).join("cgroup.controllers")) {
        Ok(c) if c.split_whitespace().any(|x| x == "memory") => Ok(Version::V2),
        Ok(_) => Err("cgroup v2 without the memory controller".into()),
        Err(_) => Err("no memory cgroup hierarchy mounted".into()),
    }
}

fn write(path: &Path, value: &str) -> io::Result<()> {
    fs::write(path, value).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("writing '{value}' to {}: {e}", path.display()),
        )
    })
}

impl MemCgroup {
    /// Creates `ucache-bench-<pid>` limited to `limit` bytes. The error says why not, in words
    /// fit for the report ("permission denied creating ...").
    pub fn create(limit: u64) -> Result<MemCgroup, String> {
        let version = detect()?;
        remove_stale(version);
        let root = match version {
            Version::V1 => V1_ROOT,
            Version::V2 => V2_ROOT,
        };
        let dir = Path::new(root).join(format!("{PREFIX}{}", std::process::id()));
        if version == Version::V2 {
            // The memory controller must be enabled for the root's children; harmless if it is.
            let _ = write(
                &Path::new(V2_ROOT).join("cgroup.subtree_control"),
                "+memory",
            );
        }
        match fs::create_dir(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(format!("creating {}: {e}", dir.display())),
        }
        let cg = MemCgroup {
            dir,
            version,
            limit,
        };
        let set = match version {
            Version::V1 => write(&cg.dir.join("memory.limit_in_bytes"), &limit.to_string()),
            Version::V2 => write(&cg.dir.join("memory.max"), &limit.to_string())
                .and_then(|()| write(&cg.dir.join("memory.swap.max"), "0").or(Ok(()))),
        };
        if let Err(e) = set {
            cg.remove();
            return Err(e.to_string());
        }
        Ok(cg)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Clears the high-water mark so each run reports its own. Best effort: v2 kernels before
    /// 6.12 cannot reset memory.peak.
    pub fn reset_peak(&self) {
        let _ = match self.version {
            Version::V1 => write(&self.dir.join("memory.max_usage_in_bytes"), "0"),
            Version::V2 => write(&self.dir.join("memory.peak"), "0"),
        };
        if self.version == Version::V1 {
            let _ = write(&self.dir.join("memory.failcnt"), "0");
        }
    }

    /// The most memory the group held since the last reset, in bytes.
    pub fn peak(&self) -> Option<u64> {
        let file = match self.version {
            Version::V1 => "memory.max_usage_in_bytes",
            Version::V2 => "memory.peak",
        };
        fs::read_to_string(self.dir.join(file))
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    /// How often the limit was hit (v1) or reclaim was forced by it (v2's `max` event).
    pub fn limit_hits(&self) -> Option<u64> {
        limit_hits(&self.dir)
    }

    pub fn describe(&self) -> String {
        let v = match self.version {
            Version::V1 => "v1",
            Version::V2 => "v2",
        };
        format!("{v} {} limit={}", self.dir.display(), self.limit)
    }

    /// Removes the group. It must have no processes left; page cache still charged to it is
    /// handed to the parent group by the kernel.
    pub fn remove(&self) {
        let _ = fs::remove_dir(&self.dir);
    }
}

impl Drop for MemCgroup {
    fn drop(&mut self) {
        self.remove();
    }
}

/// Removes groups left by earlier runs that were killed before cleaning up (their pid is gone).
fn remove_stale(version: Version) {
    let root = match version {
        Version::V1 => V1_ROOT,
        Version::V2 => V2_ROOT,
    };
    let Ok(entries) = fs::read_dir(root) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix(PREFIX)
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = fs::remove_dir(e.path());
        }
    }
}

/// Memory the group at `dir` holds now, in bytes.
pub fn usage(dir: &Path) -> Option<u64> {
    ["memory.usage_in_bytes", "memory.current"]
        .iter()
        .find_map(|f| fs::read_to_string(dir.join(f)).ok())?
        .trim()
        .parse()
        .ok()
}

/// Bytes of anonymous memory and of file pages (the page cache) charged to the group at `dir`
/// now: v1's `rss` and `cache` lines of `memory.stat`, or v2's `anon` and `file`. What a run
/// used its memory for: a cache of its own, or the kernel's.
pub fn anon_and_file(dir: &Path) -> Option<(u64, u64)> {
    let text = fs::read_to_string(dir.join("memory.stat")).ok()?;
    let field = |names: [&str; 2]| {
        text.lines().find_map(|l| {
            let (k, v) = l.split_once(' ')?;
            names.contains(&k).then(|| v.trim().parse().ok())?
        })
    };
    Some((field(["rss", "anon"])?, field(["cache", "file"])?))
}

/// How often the group at `dir` hit its limit: v1's `memory.failcnt`, or v2's `max` event.
pub fn limit_hits(dir: &Path) -> Option<u64> {
    if let Ok(t) = fs::read_to_string(dir.join("memory.failcnt")) {
        return t.trim().parse().ok();
    }
    fs::read_to_string(dir.join("memory.events"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("max "))
        .and_then(|v| v.trim().parse().ok())
}

/// How many processes the group at `dir` had killed for want of memory: the `oom_kill` line of
/// v1's `memory.oom_control` or of v2's `memory.events`.
pub fn oom_kills(dir: &Path) -> Option<u64> {
    ["memory.oom_control", "memory.events"]
        .iter()
        .find_map(|f| fs::read_to_string(dir.join(f)).ok())?
        .lines()
        .find_map(|l| l.strip_prefix("oom_kill "))
        .and_then(|v| v.trim().parse().ok())
}

/// Moves the calling process (all its threads) into the group at `dir`.
pub fn join(dir: &Path) -> io::Result<()> {
    write(&dir.join("cgroup.procs"), &std::process::id().to_string())
}

/// Which memory cgroup the calling process is in, from /proc/self/cgroup, to prove the join.
pub fn current_memory_cgroup() -> Option<String> {
    let text = fs::read_to_string("/proc/self/cgroup").ok()?;
    text.lines().find_map(|l| {
        let mut parts = l.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        (controllers.split(',').any(|c| c == "memory") || controllers.is_empty())
            .then(|| path.to_string())
    })
}
