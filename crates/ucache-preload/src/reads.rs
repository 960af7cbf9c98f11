//! Read mode (`UCACHE_READS=1`): `pread`/`pread64` of a matched regular file is served from an
//! explicit ucache mapping of that file, for programs that read their files with `pread`
//! instead of mapping them. DuckDB's Parquet reader is one: it opens each file per query and
//! reads its column chunks with `pread64`, so the mmap mode never sees its IO.
//!
//! Each file (device and inode) gets one read-only, explicit mapping in the shim's cache, made
//! at its first `pread` through the shim's own descriptor (reopened through `/proc/self/fd`),
//! and kept while the file stays the same: the program may open and close the file as often
//! as it likes, and every descriptor of the file shares the cached buffers. A served `pread`
//! copies out of the cache (a miss loads the buffers first) and returns what the kernel would:
//! the bytes up to the end of the file, 0 at or past it.
//!
//! Correctness rests on checks per call, not on tracking descriptors: every `pread` looks at
//! the descriptor (`fstat`, `F_GETFL`), so a descriptor closed, reused or duplicated behind the
//! shim's back (`fclose`, `dup2`, `close_range`) can never be served another file's bytes.
//! A file whose size, modification or change time differs from its mapping's is mapped anew;
//! a write, `writev` or `ftruncate` through any descriptor of this process drops the file's
//! mapping at once (the times alone may not move within one clock tick). Not seen: stores
//! through a writable mapping of the file, and another process's writes within one tick of
//! the times the mapping was made under (as with any cache validated by timestamps).
//!
//! What goes to the kernel as before: `read` and `readv` (the file position), descriptors that
//! are write-only, `O_PATH` or `O_DIRECT`, files that do not match `UCACHE_FILES`, and every
//! `pread` while the process has mmap-mode mappings (its buffer could lie in one: the copy
//! would fault inside the shim). An error of the cache (a failed load) sends the call to the
//! kernel, which gives the program its own error.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, OnceLock, RwLock};

use libc::{off_t, size_t, ssize_t};
use ucache::{MapOptions, Placement};

use crate::config::Config;
use crate::real::{self, say};
use crate::shim::{self, enter};
use crate::store::{FileObject, OneObject, RawFile};
use crate::table;

/// A file, as the kernel names it.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct Ident {
    dev: u64,
    ino: u64,
}

/// What a mapping of a file is valid for: the file's size and times when it was made.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Version {
    size: i64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Version {
    fn of(st: &libc::stat) -> Version {
        Version {
            size: st.st_size,
            mtime: (st.st_mtime, st.st_mtime_nsec),
            ctime: (st.st_ctime, st.st_ctime_nsec),
        }
    }
}

/// A file served from the cache.
struct ReadFile {
    map: ucache::Mapping,
    size: u64,
}

/// What the shim knows of a file at one version: served (`Some`) or not (`None`: it does not
/// match, or the cache refused it).
struct Known {
    version: Version,
    file: Option<Arc<ReadFile>>,
}

/// Entries for files the shim does not serve are dropped, all at once, past this many (they
/// cost a `readlink` to learn again): a program reading many other files keeps a bounded table.
const MAX_UNSERVED: usize = 4096;

/// Whether any file was ever looked at: lets writes skip the table while read mode is idle.
static USED: AtomicBool = AtomicBool::new(false);
/// `pread` calls served, and mappings made, for `UCACHE_STATS`.
static SERVED: AtomicU64 = AtomicU64::new(0);
static MAPPED: AtomicU64 = AtomicU64::new(0);

/// The `UCACHE_STATS` line of read mode.
pub(crate) fn stats() -> String {
    format!(
        "read mode: {} preads served, {} file mappings made",
        SERVED.load(Relaxed),
        MAPPED.load(Relaxed)
    )
}

fn files() -> &'static RwLock<HashMap<Ident, Known>> {
    static FILES: OnceLock<RwLock<HashMap<Ident, Known>>> = OnceLock::new();
    FILES.get_or_init(|| RwLock::new(HashMap::new()))
}

/// The weight of a file's mapping: its size in 64 KiB units, so that the files share the
/// budget as one data set (with equal weights, the cache's proportional-share eviction would
/// make a large file evict its own buffers while small files keep stale ones).
fn weight(size: u64) -> u32 {
    (size.div_ceil(64 << 10)).clamp(1, u32::MAX as u64) as u32
}

/// The largest range one batch of loads brings in: a quarter of the budget, so that a large
/// `pread` streams through the cache instead of evicting its own first part.
fn chunk(cfg: &Config, bs: usize) -> usize {
    ((cfg.memory / 4) as usize).max(bs)
}

/// `pread(fd, buf, n, off)` served from the cache, or `None`: the kernel does it.
///
/// # Safety
/// As `pread(2)`: `buf` is valid for writes of `n` bytes.
pub(crate) unsafe fn pread(
    fd: i32,
    buf: *mut libc::c_void,
    n: size_t,
    off: off_t,
) -> Option<ssize_t> {
    let cfg = shim::config().filter(|c| c.reads)?;
    if !shim::ENABLED.load(Relaxed) || off < 0 || table::live() {
        return None;
    }
    let _in = enter()?;
    let st = real::fstat(fd)?;
    if st.st_mode & libc::S_IFMT != libc::S_IFREG {
        return None;
    }
    let fl = real::getfl(fd)?;
    if fl & libc::O_ACCMODE == libc::O_WRONLY || fl & (libc::O_PATH | libc::O_DIRECT) != 0 {
        return None;
    }
    let file = lookup(fd, &st, cfg)?;
    SERVED.fetch_add(1, Relaxed);
    let off = off as u64;
    if off >= file.size || n == 0 {
        return Some(0);
    }
    let k = n.min((file.size - off) as usize);
    // SAFETY: pread's contract: `buf` is valid for writes of `n >= k` bytes, and not null
    // (k > 0).
    let out = unsafe { std::slice::from_raw_parts_mut(buf as *mut u8, k) };
    let step = chunk(cfg, file.map.buffer_size());
    let mut done = 0;
    while done < k {
        let m = (k - done).min(step);
        let at = off + done as u64;
        let r = file
            .map
            .ensure_cached(at, m as u64)
            .and_then(|()| file.map.read(at, &mut out[done..done + m]));
        if r.is_err() {
            // The kernel reads the whole range again and reports its own error, if any.
            SERVED.fetch_sub(1, Relaxed);
            return None;
        }
        done += m;
    }
    Some(k as ssize_t)
}

/// The served file behind `fd` (whose `fstat` is `st`), mapping it on first use or anew
/// after it changed; `None` for a file not served.
fn lookup(fd: i32, st: &libc::stat, cfg: &Config) -> Option<Arc<ReadFile>> {
    let id = Ident {
        dev: st.st_dev,
        ino: st.st_ino,
    };
    let version = Version::of(st);
    USED.store(true, Relaxed);
    if let Some(k) = files().read().ok()?.get(&id) {
        if k.version == version {
            return k.file.clone();
        }
    }
    // New, or changed since its mapping was made: (re)map outside the lock.
    let file = map_file(fd, st, cfg).map(Arc::new);
    let mut g = files().write().ok()?;
    if let Some(k) = g.get(&id) {
        if k.version == version {
            return k.file.clone(); // Another thread was first: ours is dropped (unmapped).
        }
    }
    if file.is_none() && g.len() > MAX_UNSERVED {
        g.retain(|_, k| k.file.is_some());
    }
    g.insert(
        id,
        Known {
            version,
            file: file.clone(),
        },
    );
    file
}

/// A mapping of the file behind `fd`, if it matches `UCACHE_FILES` and ucache takes it.
fn map_file(fd: i32, st: &libc::stat, cfg: &Config) -> Option<ReadFile> {
    let path = real::fd_path(fd)?;
    if !cfg.matches(&path) || st.st_size <= 0 {
        return None;
    }
    let nfd = real::reopen(fd, false)?;
    let file = Arc::new(RawFile::new(nfd, cfg.direct));
    match real::fstat(nfd) {
        Some(s) if s.st_dev == st.st_dev && s.st_ino == st.st_ino => {}
        _ => return None, // Renamed over meanwhile: the kernel serves it.
    }
    let size = st.st_size as u64;
    let obj = Arc::new(FileObject {
        file,
        name: path.clone(),
        min_len: 0,
    });
    let options = |placement| {
        let o = MapOptions::new()
            .len(size)
            .buffer_size(cfg.buffer_size)
            .weight(weight(size))
            .placement(placement)
            // Each pread loads its range into the cache first (`ensure_cached`, so that the
            // file stays cached for the next process too): a scan never finds anything absent
            // to read past the cache, and its ring would only read the file twice.
            .scan_bypass(false);
        shim::with_policy(cfg, o)
    };
    let cache = shim::cache()?;
    let store = Arc::new(OneObject(obj));
    // Pool placement: an eviction puts the frame on a free list and the next miss reads into
    // it, where in place a miss faults in fresh zeroed pages and an eviction hands them back
    // to the kernel (read mode needs no address per buffer). A budget under one pool chunk
    // (2 MiB) refuses it: in place then.
    let made = match cache.map(store.clone(), &path, options(Placement::Pool)?) {
        Err(ucache::Error::BudgetTooSmall { .. }) => {
            cache.map(store, &path, options(Placement::InPlace)?)
        }
        other => other,
    };
    match made {
        Ok(map) => {
            MAPPED.fetch_add(1, Relaxed);
            Some(ReadFile { map, size })
        }
        Err(e) => {
            say(&format!(
                "read mode: {path} refused by ucache ({e}); the kernel serves its reads"
            ));
            None
        }
    }
}

/// After a write, `writev` or `ftruncate` through `fd`: the file's mapping, if it has one, is
/// dropped (its buffers may hold bytes that are no longer the file's). Keeps `errno`.
pub(crate) fn after_write(fd: i32) {
    if !USED.load(Relaxed) {
        return;
    }
    let Some(_in) = enter() else { return };
    real::keeping_errno(|| {
        let Some(st) = real::fstat(fd) else { return };
        let id = Ident {
            dev: st.st_dev,
            ino: st.st_ino,
        };
        let gone = match files().write() {
            Ok(mut g) => g.remove(&id),
            Err(_) => None,
        };
        drop(gone); // Unmaps once the reads in flight are done with it.
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weights_count_64k_units() {
        assert_eq!(weight(0), 1);
        assert_eq!(weight(1), 1);
        assert_eq!(weight(64 << 10), 1);
        assert_eq!(weight((64 << 10) + 1), 2);
        assert_eq!(weight(u64::MAX), u32::MAX);
    }
}
