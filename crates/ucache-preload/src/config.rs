//! The environment: which files, how much memory, which policy.

use glob::Pattern;

/// Default budget when `UCACHE_MEMORY` is not set.
pub(crate) const DEFAULT_MEMORY: u64 = 256 << 20;
/// Default buffer size: a page, so every `mmap` offset (page aligned) is a buffer boundary and
/// the file's end falls where the kernel puts it.
pub(crate) const DEFAULT_BUFFER: usize = 4096;

#[derive(Debug)]
pub(crate) struct Config {
    pub globs: Vec<Pattern>,
    pub memory: u64,
    /// `None`: ucache's default (CLOCK with sequential readahead).
    pub policy: Option<String>,
    pub buffer_size: usize,
    pub stats: bool,
    /// 0: faults served on the faulting thread (SIGBUS); n: n handler threads.
    pub fault_threads: usize,
    /// Read the file with `O_DIRECT` where a read is aligned (see `store.rs`).
    pub direct: bool,
    /// Read mode (`UCACHE_READS=1`): `pread` of matched files served from the cache.
    pub reads: bool,
    /// Readahead windows read by the thread that serves the fault (`UCACHE_READAHEAD_INLINE`,
    /// [`ucache::MapOptions::readahead_inline`]).
    pub readahead_inline: bool,
    /// Read-only mappings become views of their files (`UCACHE_FILE_VIEW`,
    /// [`ucache::MapOptions::file_view`]).
    pub file_view: bool,
}

/// Parses `256MiB`, `16KiB`, `1G`, `4096`: binary units, case-insensitive.
pub(crate) fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: u64 = num.parse().ok()?;
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => return None,
    };
    n.checked_mul(1u64 << shift)
}

impl Config {
    /// Reads the configuration from `get` (the environment). `Ok(None)`: `UCACHE_FILES` is
    /// not set, so nothing is to be cached. `Err`: one message saying what was wrong.
    pub(crate) fn from_env(get: impl Fn(&str) -> Option<String>) -> Result<Option<Config>, String> {
        let Some(files) = get("UCACHE_FILES") else {
            return Ok(None);
        };
        let mut globs = Vec::new();
        for g in files.split(':') {
            if g.is_empty() {
                return Err(format!(
                    "UCACHE_FILES='{files}' has an empty pattern (colon-separated globs, \
                     e.g. '*.db:/data/*')"
                ));
            }
            globs.push(
                Pattern::new(g)
                    .map_err(|e| format!("UCACHE_FILES pattern '{g}' is not a glob: {e}"))?,
            );
        }
        let memory = match get("UCACHE_MEMORY") {
            None => DEFAULT_MEMORY,
            Some(m) => parse_size(&m)
                .filter(|&m| m > 0)
                .ok_or_else(|| format!("UCACHE_MEMORY='{m}' is not a size (e.g. 256MiB, 1GiB)"))?,
        };
        let buffer_size = match get("UCACHE_BUFFER_SIZE") {
            None => DEFAULT_BUFFER,
            Some(b) => parse_size(&b)
                .and_then(|b| usize::try_from(b).ok())
                .filter(|b| b.is_power_of_two() && (4096..=(2 << 20)).contains(b))
                .ok_or_else(|| {
                    format!("UCACHE_BUFFER_SIZE='{b}' is not a power of two from 4KiB to 2MiB")
                })?,
        };
        let policy = match get("UCACHE_POLICY") {
            None => None,
            Some(p) if ucache::policy::policy_by_name(&p).is_some() => Some(p),
            Some(p) => {
                return Err(format!(
                    "UCACHE_POLICY='{p}' is not a policy; one of: {}",
                    ucache::policy::POLICY_NAMES.join(", ")
                ))
            }
        };
        let stats = match get("UCACHE_STATS").as_deref() {
            None | Some("") | Some("0") => false,
            Some("1") => true,
            Some(s) => return Err(format!("UCACHE_STATS='{s}' must be 0 or 1")),
        };
        let fault_threads = match get("UCACHE_FAULT_THREADS") {
            None => 0,
            Some(n) => n
                .trim()
                .parse::<usize>()
                .ok()
                .filter(|&n| n <= 64)
                .ok_or_else(|| format!("UCACHE_FAULT_THREADS='{n}' must be 0 to 64"))?,
        };
        let flag = |name: &str, default: bool| match get(name).as_deref() {
            None | Some("") => Ok(default),
            Some("0") => Ok(false),
            Some("1") => Ok(true),
            Some(s) => Err(format!("{name}='{s}' must be 0 or 1")),
        };
        let direct = flag("UCACHE_DIRECT", true)?;
        let reads = flag("UCACHE_READS", false)?;
        let readahead_inline = flag("UCACHE_READAHEAD_INLINE", false)?;
        let file_view = flag("UCACHE_FILE_VIEW", false)?;
        Ok(Some(Config {
            readahead_inline,
            file_view,
            direct,
            globs,
            memory,
            policy,
            buffer_size,
            stats,
            fault_threads,
            reads,
        }))
    }

    /// Whether the file at `path` (canonical) is to be cached.
    pub(crate) fn matches(&self, path: &str) -> bool {
        self.globs.iter().any(|g| g.matches(path))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("256MiB"), Some(256 << 20));
        assert_eq!(parse_size("16KiB"), Some(16 << 10));
        assert_eq!(parse_size("1g"), Some(1 << 30));
        assert_eq!(parse_size("4096"), Some(4096));
        assert_eq!(parse_size("abc"), None);
        assert_eq!(parse_size("12XB"), None);
        assert_eq!(parse_size(""), None);
    }

    #[test]
    fn config_from_env() {
        assert!(Config::from_env(env(&[])).unwrap().is_none());
        let c = Config::from_env(env(&[
            ("UCACHE_FILES", "*.db:/data/*"),
            ("UCACHE_MEMORY", "64MiB"),
            ("UCACHE_POLICY", "s3fifo"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(c.memory, 64 << 20);
        assert!(c.direct, "direct reads are the default");
        let off = Config::from_env(env(&[("UCACHE_FILES", "*"), ("UCACHE_DIRECT", "0")]));
        assert!(!off.unwrap().unwrap().direct);
        assert!(!c.readahead_inline, "the IO threads read ahead by default");
        let inline = Config::from_env(env(&[
            ("UCACHE_FILES", "*"),
            ("UCACHE_READAHEAD_INLINE", "1"),
        ]));
        assert!(inline.unwrap().unwrap().readahead_inline);
        assert!(!c.file_view, "file views are asked for");
        let view = Config::from_env(env(&[("UCACHE_FILES", "*"), ("UCACHE_FILE_VIEW", "1")]));
        assert!(view.unwrap().unwrap().file_view);
        assert!(c.matches("/tmp/x/test.db"));
        assert!(c.matches("/data/a/b"));
        assert!(!c.matches("/tmp/x/test.txt"));
        for bad in [
            vec![("UCACHE_FILES", "")],
            vec![("UCACHE_FILES", "a::b")],
            vec![("UCACHE_FILES", "*"), ("UCACHE_MEMORY", "lots")],
            vec![("UCACHE_FILES", "*"), ("UCACHE_POLICY", "nope")],
            vec![("UCACHE_FILES", "*"), ("UCACHE_BUFFER_SIZE", "3000")],
            vec![("UCACHE_FILES", "*"), ("UCACHE_DIRECT", "yes")],
            vec![("UCACHE_FILES", "*"), ("UCACHE_READS", "yes")],
            vec![("UCACHE_FILES", "*"), ("UCACHE_READAHEAD_INLINE", "on")],
            vec![("UCACHE_FILES", "*"), ("UCACHE_FILE_VIEW", "yes")],
        ] {
            let e = Config::from_env(env(&bad)).unwrap_err();
            assert!(e.contains("UCACHE_"), "{e}");
        }
    }
}
