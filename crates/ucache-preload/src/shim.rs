//! What the interposed calls do once they know a call concerns a shim mapping or its file.
//! Every function here runs with the thread's reentrancy flag raised (see [`enter`]), so
//! whatever ucache or std call in turn goes straight to the kernel.

use std::cell::Cell;
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering::SeqCst};
use std::sync::{Arc, OnceLock};

use ucache::policy::prefetch::{ReadAhead, WithPrefetch};
use ucache::policy::{Buffers, Layout, Policy};
use ucache::{Cache, CacheOptions, FaultHandling, MapOptions};

use crate::config::Config;
use crate::readahead::{readahead, WithinFile};
use crate::real::{self, say};
use crate::store::{FileObject, OneObject, RawFile};
use crate::table::{self, Entry};

/// Set by the constructor when the configuration is good; cleared in a forked child.
pub(crate) static ENABLED: AtomicBool = AtomicBool::new(false);
static CONFIG: OnceLock<Config> = OnceLock::new();
static CACHE: OnceLock<Option<Cache>> = OnceLock::new();
static MAPPED: AtomicU64 = AtomicU64::new(0);
static REFUSED: AtomicU64 = AtomicU64::new(0);

const PAGE: usize = 4096;
/// Smallest buffer of a view (`UCACHE_FILE_VIEW=1`). Each load and eviction of a view's run
/// changes its protection under the address space's lock, which the program's other threads'
/// faults wait for: `rg --mmap -j2` on zram ran at 0.62-0.83× plain with 256 KiB buffers and
/// 0.89-1.0× with 1 MiB ones, inline readahead on (docs/results/2026-11-27-guard).
const VIEW_BUFFER: usize = 1 << 20;
/// Largest piece of a transfer whose buffer lies in a shim mapping made resident at once: a
/// sixteenth of the budget, so that the piece stays resident until the kernel has copied it.
const CHUNK: usize = 256 << 10;

fn chunk() -> usize {
    let budget = CONFIG.get().map_or(CHUNK as u64, |c| c.memory);
    ((budget / 16) as usize).clamp(PAGE, CHUNK) & !(PAGE - 1)
}

thread_local! {
    static IN_SHIM: Cell<bool> = const { Cell::new(false) };
}

/// The thread is inside the shim until this is dropped.
pub(crate) struct Inside;

impl Drop for Inside {
    fn drop(&mut self) {
        let _ = IN_SHIM.try_with(|f| f.set(false));
    }
}

/// Raises the reentrancy flag, or `None` if the thread is inside the shim already (a call
/// made by ucache, std or the allocator on the shim's behalf: it goes to the kernel).
pub(crate) fn enter() -> Option<Inside> {
    IN_SHIM
        .try_with(|f| (!f.replace(true)).then_some(Inside))
        .ok()
        .flatten()
}

/// Whether the thread is inside the shim (so a thread it starts is the cache's).
pub(crate) fn in_shim() -> bool {
    IN_SHIM.try_with(|f| f.get()).unwrap_or(false)
}

/// Whether calls on fds and addresses may concern a shim mapping.
#[inline]
pub(crate) fn active() -> bool {
    ENABLED.load(SeqCst) && table::live()
}

/// The constructor: looks the real functions up and reads the environment.
pub(crate) fn init() {
    real::resolve();
    // SAFETY: getauxval has no preconditions.
    if unsafe { libc::getauxval(libc::AT_SECURE) } != 0 {
        // setuid/setgid or file capabilities: the shim does nothing.
        return;
    }
    let Some(_in) = enter() else { return };
    match Config::from_env(|k| std::env::var(k).ok()) {
        Ok(None) => {}
        Ok(Some(c)) => {
            let _ = CONFIG.set(c);
            ENABLED.store(true, SeqCst);
        }
        Err(msg) => say(&format!(
            "{msg}; the shim is off and every mapping goes to the kernel"
        )),
    }
}

/// The destructor: writes back what shared writable mappings hold (the page cache would
/// keep it past exit), and prints the statistics.
pub(crate) fn fini() {
    if !ENABLED.load(SeqCst) {
        return;
    }
    let Some(_in) = enter() else { return };
    flush_all();
    if CONFIG.get().is_some_and(|c| c.stats) {
        let mapped = MAPPED.load(SeqCst);
        let refused = REFUSED.load(SeqCst);
        match CACHE.get().and_then(|c| c.as_ref()) {
            Some(c) => {
                let s = c.stats();
                say(&format!(
                    "stats: mappings {mapped}, refused {refused}, budget {} bytes, used {} \
                     bytes, hit ratio {:.4}, direct-read bytes {}; {s:?}",
                    c.budget(),
                    c.used(),
                    s.hit_ratio(),
                    crate::store::DIRECT_BYTES.load(SeqCst)
                ));
            }
            None => say(&format!(
                "stats: mappings {mapped}, refused {refused}, no cache made"
            )),
        }
        if CONFIG.get().is_some_and(|c| c.reads) {
            say(&crate::reads::stats());
        }
    }
}

fn flush_all() {
    for (_, e) in table::all(|e| e.writable) {
        if let Err(err) = e.map.msync(0, e.len as u64) {
            say(&format!("write-back of {} failed: {err}", e.path));
        }
    }
}

extern "C" fn fork_prepare() {
    if !ENABLED.load(SeqCst) || !table::live() {
        return;
    }
    let Some(_in) = enter() else { return };
    // The child gets kernel mappings of the file: it must find there what the parent wrote.
    let _ = std::panic::catch_unwind(flush_all);
}

extern "C" fn fork_child() {
    if !ENABLED.swap(false, SeqCst) {
        return;
    }
    // The child has none of ucache's threads and its userfaultfd registrations did not
    // follow it: its copies of the regions would read as zeros where nothing was resident.
    // Each becomes the kernel mapping it stands for, at the same address; the cache's
    // memory is left as it is (the shim is off in the child). No allocation here.
    table::for_each(|e| {
        // SAFETY: MAP_FIXED over the child's copy of the region, with the shim's own fd.
        let p = unsafe {
            real::mmap(
                e.start as *mut c_void,
                e.len,
                e.prot,
                e.kind | libc::MAP_FIXED,
                e.file.fd,
                e.offset as libc::off_t,
            )
        };
        if p == libc::MAP_FAILED {
            say("fork: a mapping could not be replaced by a kernel mapping in the child");
        }
    });
}

/// The configuration, once the constructor has read a good one.
pub(crate) fn config() -> Option<&'static Config> {
    CONFIG.get()
}

/// IO threads of the shim's cache. With `O_DIRECT` reads each thread has one read of 1 MiB in
/// flight, so this is the device's queue depth for a readahead window; the kernel's own
/// readahead (8 MiB on the virtio disk here) keeps several requests in flight. With 2 threads a
/// sqlite scan on virtio ran at 0.40-0.61x plain mmap, with 4 and 8 MiB windows at 0.77-0.96x
/// (docs/results/2026-11-26-preload-scans, section 5); 4 threads with 1 MiB windows did not
/// help (one window is one job).
pub(crate) const IO_THREADS: usize = 4;

pub(crate) fn cache() -> Option<&'static Cache> {
    CACHE
        .get_or_init(|| {
            let c = CONFIG.get()?;
            match Cache::new(CacheOptions::new(c.memory).io_threads(IO_THREADS)) {
                Ok(cache) => {
                    // Registered after the cache, whose own fork handler (it fences a
                    // child's copies of its regions) thereby runs first in a child: ours
                    // then replaces each fenced region with the kernel mapping it stands for.
                    // SAFETY: registers two extern "C" functions with no arguments.
                    unsafe { libc::pthread_atfork(Some(fork_prepare), None, Some(fork_child)) };
                    Some(cache)
                }
                Err(e) => {
                    say(&format!(
                        "cannot make a cache of {} bytes: {e}; mappings go to the kernel",
                        c.memory
                    ));
                    None
                }
            }
        })
        .as_ref()
}

/// A policy from the registry, as a sized type so it can take readahead.
struct Named(Box<dyn Policy>);

impl Policy for Named {
    fn name(&self) -> &str {
        self.0.name()
    }
    fn attach(&mut self, layout: Layout) {
        self.0.attach(layout)
    }
    fn choose_eviction_buffers(&self, b: &Buffers<'_>, want: usize, out: &mut Vec<u64>) {
        self.0.choose_eviction_buffers(b, want, out)
    }
    fn is_evictable(&self, i: u64) -> bool {
        self.0.is_evictable(i)
    }
    fn admit(&self, i: u64) -> bool {
        self.0.admit(i)
    }
    fn has_prefetching(&self) -> bool {
        self.0.has_prefetching()
    }
    fn choose_prefetch_buffers(&self, i: u64, out: &mut Vec<u64>) {
        self.0.choose_prefetch_buffers(i, out)
    }
    fn wants_hits(&self) -> bool {
        self.0.wants_hits()
    }
    fn on_miss(&self, i: u64) {
        self.0.on_miss(i)
    }
    fn on_hit(&self, i: u64) {
        self.0.on_hit(i)
    }
    fn on_insert(&self, i: u64) {
        self.0.on_insert(i)
    }
    fn on_evict(&self, i: u64) {
        self.0.on_evict(i)
    }
}

/// `o` with `UCACHE_POLICY`'s policy (and readahead) when one is named; ucache's default
/// otherwise. `None` only for a name the registry lost since the configuration was checked.
pub(crate) fn with_policy(cfg: &Config, o: MapOptions) -> Option<MapOptions> {
    let Some(name) = &cfg.policy else {
        return Some(o);
    };
    let p = ucache::policy::policy_by_name(name)?;
    Some(o.policy(Box::new(WithPrefetch::new(
        Named(p),
        ReadAhead::transparent_default(cfg.buffer_size),
    ))))
}

fn round_up(n: usize) -> usize {
    n.div_ceil(PAGE) * PAGE
}

/// `mmap` of a file: a shim mapping if the file matches and the mapping is one ucache can
/// serve; `None` sends the call to the kernel.
pub(crate) fn map_fd(len: usize, prot: i32, flags: i32, fd: i32, off: i64) -> Option<*mut c_void> {
    let cfg = CONFIG.get()?;
    let kind = flags & 0x0f;
    if kind != libc::MAP_SHARED && kind != libc::MAP_PRIVATE {
        return None;
    }
    let allowed = libc::MAP_SHARED
        | libc::MAP_PRIVATE
        | libc::MAP_NORESERVE
        | libc::MAP_POPULATE
        | libc::MAP_NONBLOCK;
    if flags & !allowed != 0 {
        return None; // MAP_FIXED, MAP_LOCKED, MAP_HUGETLB, ...: the kernel's.
    }
    if prot & !(libc::PROT_READ | libc::PROT_WRITE) != 0 || prot & libc::PROT_READ == 0 {
        return None; // PROT_EXEC, PROT_NONE, write-only.
    }
    let writable = prot & libc::PROT_WRITE != 0;
    if writable && kind == libc::MAP_PRIVATE {
        return None; // Copy-on-write: the kernel's (README).
    }
    if len == 0 || off < 0 || !(off as usize).is_multiple_of(PAGE) {
        return None; // The kernel's error.
    }
    let st = real::fstat(fd)?;
    if st.st_mode & libc::S_IFMT != libc::S_IFREG {
        return None;
    }
    let path = real::fd_path(fd)?;
    if !cfg.matches(&path) {
        return None;
    }
    let acc = real::getfl(fd)? & libc::O_ACCMODE;
    if acc == libc::O_WRONLY || (writable && acc != libc::O_RDWR) {
        return None; // EACCES, from the kernel.
    }
    let Some(nfd) = real::reopen(fd, acc == libc::O_RDWR) else {
        say(&format!(
            "cannot reopen {path} through /proc/self/fd ({}); it gets a kernel mapping",
            std::io::Error::last_os_error()
        ));
        return None;
    };
    let file = Arc::new(RawFile::new(nfd, cfg.direct));
    match real::fstat(nfd) {
        Some(s) if s.st_dev == st.st_dev && s.st_ino == st.st_ino => {}
        _ => return None,
    }
    let spec = Spec {
        file,
        path,
        dev: st.st_dev,
        ino: st.st_ino,
        offset: off as u64,
        len: round_up(len),
        prot,
        kind,
        writable,
    };
    let p = new_mapping(spec)?;
    if flags & libc::MAP_POPULATE != 0 {
        if let Some((_, e)) = table::find_addr(p as usize, 1) {
            let _ = e.map.prefetch(0, e.len as u64);
        }
    }
    Some(p)
}

/// The buffer size of a view under `cfg`, if read-only mappings are to be views: at least
/// [`VIEW_BUFFER`] where the budget holds eight of those, else the largest size it holds
/// eight of, down to ucache's smallest for a view (64 KiB); none below that, nor with
/// handler threads, which a view cannot have.
fn view_buffer(cfg: &Config) -> Option<usize> {
    const MIN: usize = 64 << 10;
    if !cfg.file_view || cfg.fault_threads > 0 {
        return None;
    }
    let eighth = usize::try_from(cfg.memory / 8).unwrap_or(usize::MAX);
    let fits = 1usize << eighth.max(1).ilog2();
    let bs = cfg.buffer_size.max(VIEW_BUFFER).min(fits);
    (bs >= MIN).then_some(bs)
}

struct Spec {
    file: Arc<RawFile>,
    path: String,
    dev: u64,
    ino: u64,
    offset: u64,
    len: usize,
    prot: i32,
    kind: i32,
    writable: bool,
}

fn new_mapping(s: Spec) -> Option<*mut c_void> {
    let cfg = CONFIG.get()?;
    let cache = cache()?;
    let view_bs = view_buffer(cfg).filter(|_| !s.writable);
    let view = view_bs.is_some();
    let bs = view_bs.unwrap_or(cfg.buffer_size);
    let obj = Arc::new(FileObject {
        file: s.file.clone(),
        name: s.path.clone(),
        min_len: s.offset + s.len as u64,
    });
    let mut o = MapOptions::new()
        .transparent(true)
        .writable(s.writable)
        .offset(s.offset)
        .len(s.len as u64)
        .buffer_size(bs)
        .readahead_inline(cfg.readahead_inline)
        .file_view(view);
    let p = match &cfg.policy {
        Some(name) => ucache::policy::policy_by_name(name)?,
        None => Box::new(ucache::policy::Clock::new()),
    };
    let ahead = WithinFile::new(readahead(bs), s.file.clone(), s.offset, bs);
    o = o.policy(Box::new(WithPrefetch::new(Named(p), ahead)));
    if cfg.fault_threads > 0 {
        o = o.fault_handling(FaultHandling::HandlerThreads(cfg.fault_threads));
    }
    let map = match cache.map(Arc::new(OneObject(obj)), &s.path, o) {
        Ok(m) => m,
        Err(e) => {
            REFUSED.fetch_add(1, SeqCst);
            say(&format!(
                "mapping of {} refused by ucache ({e}); it gets a kernel mapping",
                s.path
            ));
            return None;
        }
    };
    let start = map.as_ptr() as usize;
    if !s.writable && !view {
        // Stores into a read-only mapping fault as with the kernel (SIGSEGV), not in ucache.
        // The whole region, to its last buffer's end: a buffer is installed with one
        // UFFDIO_COPY, which must not straddle two areas of different protections.
        let whole = s.len.div_ceil(bs) * bs;
        // SAFETY: the region is ours; UFFDIO_COPY still installs pages under PROT_READ.
        unsafe { real::mprotect(start as *mut c_void, whole, libc::PROT_READ) };
    }
    let e = Arc::new(Entry {
        map,
        start,
        len: s.len,
        file: s.file,
        path: s.path,
        dev: s.dev,
        ino: s.ino,
        offset: s.offset,
        prot: s.prot,
        kind: s.kind,
        writable: s.writable,
    });
    if let Err(e) = table::insert(e) {
        REFUSED.fetch_add(1, SeqCst);
        say(&format!(
            "more than 1024 shim mappings at once: {} gets a kernel mapping",
            e.path
        ));
        release(e);
        return None;
    }
    MAPPED.fetch_add(1, SeqCst);
    Some(start as *mut c_void)
}

/// Unmaps a mapping that left the table: writes back, frees the memory and the address
/// range. Waits for calls still using it (they are short).
fn release(mut e: Arc<Entry>) {
    for _ in 0..1_000_000 {
        match Arc::try_unwrap(e) {
            Ok(entry) => {
                if let Err(err) = entry.map.unmap() {
                    say(&format!("unmap of {}: {}", entry.path, err.error));
                }
                return;
            }
            Err(back) => {
                e = back;
                std::thread::yield_now();
            }
        }
    }
    // Still in use: the last user's drop releases it.
}

/// Replaces a shim mapping by the kernel mapping it stands for, at the same address, after
/// writing it back: for what the shim does not serve itself (a partial munmap, mremap in
/// place, mprotect adding write or exec).
fn demote(k: usize, e: Arc<Entry>) {
    if !table::remove(k, &e) {
        return;
    }
    let (start, len, prot, kind, off) = (e.start, e.len, e.prot, e.kind, e.offset);
    let file = e.file.clone();
    release(e);
    // SAFETY: the range was just released by the shim; NOREPLACE leaves anything that took
    // it meanwhile alone.
    let p = unsafe {
        real::mmap(
            start as *mut c_void,
            len,
            prot,
            kind | libc::MAP_FIXED_NOREPLACE,
            file.fd,
            off as libc::off_t,
        )
    };
    if p != start as *mut c_void {
        say("could not put a kernel mapping in place of a shim mapping");
    }
}

/// `munmap`: `Some(result)` when the shim did all of it.
pub(crate) fn unmap_range(addr: usize, len: usize) -> Option<i32> {
    let ents = table::find_all_addr(addr, len);
    if ents.is_empty() {
        return None;
    }
    // The kernel unmaps whole pages: a length that ends inside a page (a file's exact size,
    // as programs map it) covers that page too. Compared unrounded, such a call was taken for
    // a partial one and left the whole mapping behind as a kernel mapping.
    let end = addr.saturating_add(round_up(len));
    let exact =
        ents.len() == 1 && ents[0].1.start == addr && ents[0].1.start + ents[0].1.len == end;
    for (k, e) in ents {
        if addr <= e.start && end >= e.start + e.len {
            if table::remove(k, &e) {
                release(e);
            }
        } else {
            demote(k, e);
        }
    }
    exact.then_some(0)
}

/// `mremap` of a whole shim mapping that may move: a new shim mapping of the new length.
/// `None`: the kernel does it (after the shim mapping became a kernel one).
pub(crate) fn remap(old: usize, old_len: usize, new_len: usize, flags: i32) -> Option<*mut c_void> {
    let (k, e) = table::find_addr(old, old_len.max(1))?;
    let whole = e.start == old && e.len == round_up(old_len);
    if !(whole && flags == libc::MREMAP_MAYMOVE && new_len > 0) {
        demote(k, e);
        return None;
    }
    if e.writable {
        // The new mapping reads the file: it must hold what the old one wrote.
        let _ = e.map.evict(0, e.len as u64);
    }
    let spec = Spec {
        file: e.file.clone(),
        path: e.path.clone(),
        dev: e.dev,
        ino: e.ino,
        offset: e.offset,
        len: round_up(new_len),
        prot: e.prot,
        kind: e.kind,
        writable: e.writable,
    };
    match new_mapping(spec) {
        Some(p) => {
            if table::remove(k, &e) {
                release(e);
            }
            Some(p)
        }
        None => {
            demote(k, e);
            None
        }
    }
}

/// `madvise` on a shim mapping: `None` sends it to the kernel (ucache's own eviction).
pub(crate) fn advise(addr: usize, len: usize, advice: i32) -> Option<i32> {
    let (_, e) = table::find_addr(addr, len)?;
    if e.phase_at(addr.max(e.start)) == Some(ucache::Phase::Evicting) {
        return None;
    }
    if advice == libc::MADV_WILLNEED {
        let lo = addr.max(e.start) - e.start;
        let hi = (addr + len).min(e.start + e.len) - e.start;
        if hi > lo {
            let _ = e.map.prefetch(lo as u64, (hi - lo) as u64);
        }
    }
    // Dropping pages of a shared file mapping loses nothing (they come back from the file),
    // and a private read-only one is the same: ucache keeps its buffers. Other advice is a
    // hint the cache's policy stands in for.
    Some(0)
}

/// `mprotect`: a change ucache cannot serve makes the mapping a kernel one first. A view's
/// protections are ucache's record of which buffers are loaded, so any change demotes it.
pub(crate) fn protect(addr: usize, len: usize, prot: i32) {
    for (k, e) in table::find_all_addr(addr, len) {
        let adds_write = prot & libc::PROT_WRITE != 0 && !e.writable;
        if adds_write || prot & libc::PROT_EXEC != 0 || e.map.is_file_view() {
            demote(k, e);
        }
    }
}

/// `msync`: writes the shim mappings' dirty buffers in the range back and makes them
/// durable. `Some(result)` when the range touched a shim mapping.
pub(crate) fn sync_range(addr: usize, len: usize) -> Option<i32> {
    let ents = table::find_all_addr(addr, len);
    if ents.is_empty() {
        return None;
    }
    let mut rc = 0;
    for (_, e) in ents {
        if !e.writable {
            continue;
        }
        let lo = addr.max(e.start) - e.start;
        let hi = addr.saturating_add(len).min(e.start + e.len) - e.start;
        if let Err(err) = e.map.msync(lo as u64, (hi - lo) as u64) {
            say(&format!("msync of {}: {err}", e.path));
            real::set_errno(libc::EIO);
            rc = -1;
        }
        let (a, b) = (e.offset + lo as u64, e.offset + hi as u64);
        for (_, s) in table::find_inode(e.dev, e.ino) {
            if !Arc::ptr_eq(&s, &e) {
                evict_one(&s, a, b);
            }
        }
    }
    Some(rc)
}

/// Drops what mapping `e` holds of the file's `[a, b)`, after the file changed there around
/// it. A view holds nothing of its own: its bytes are the file's page cache, already new.
fn evict_one(e: &Entry, a: u64, b: u64) {
    if e.map.is_file_view() {
        return;
    }
    let Some((o, l)) = e.rel(a, b) else { return };
    // A buffer that is loading (a readahead on an IO thread, a fault on another thread) may
    // be reading the bytes from before the write, and eviction skips it. So first wait until
    // no buffer of the range is loading, then evict: every load that could have read the old
    // bytes claimed its buffer before the write, so it has landed by then and is evicted
    // here, while a load that claims after the check reads the new bytes. (Evicting first
    // and checking after left a window: a load that landed between the two stayed cached.)
    let (first, last) = (e.map.buffer_of(o), e.map.buffer_of(o + l - 1));
    let loading = || {
        (first..=last).any(|i| {
            e.map
                .state(i)
                .is_ok_and(|w| w.phase() == ucache::Phase::Loading)
        })
    };
    for _ in 0..100_000 {
        if !loading() {
            break;
        }
        std::thread::yield_now();
    }
    let _ = e.map.evict(o, l);
}

/// The shim mappings of the file behind `fd`, with its size; `None` if there are none.
pub(crate) struct FileView {
    pub size: u64,
    pub ents: Vec<(usize, Arc<Entry>)>,
}

pub(crate) fn file_view(fd: i32) -> Option<FileView> {
    let st = real::fstat(fd)?;
    if st.st_mode & libc::S_IFMT != libc::S_IFREG {
        return None;
    }
    let ents = table::find_inode(st.st_dev, st.st_ino);
    (!ents.is_empty()).then_some(FileView {
        size: st.st_size as u64,
        ents,
    })
}

impl FileView {
    /// Before the kernel reads or writes the file at `[a, b)`: what writable mappings hold
    /// there goes to the file first (evicting a dirty buffer writes it back).
    pub fn before(&self, a: u64, b: u64) {
        for (_, e) in &self.ents {
            if e.writable {
                evict_one(e, a, b);
            }
        }
    }
    /// After the kernel wrote `[a, b)` of the file: every mapping drops its copy, and loads
    /// the new bytes on the next access.
    pub fn after_write(&self, a: u64, b: u64) {
        for (_, e) in &self.ents {
            evict_one(e, a, b);
        }
    }
    /// Writes back and syncs every writable mapping (`fsync` on the file).
    pub fn sync(&self) -> bool {
        let mut ok = true;
        for (_, e) in &self.ents {
            if e.writable {
                if let Err(err) = e.map.msync(0, e.len as u64) {
                    say(&format!("fsync of {}: {err}", e.path));
                    ok = false;
                }
            }
        }
        ok
    }
}

/// Makes the pages of `[p, p+n)` that lie in shim mappings resident, so that the kernel can
/// reach them (a kernel-mode access to a missing page fails with `EFAULT`: the `SIGBUS` that
/// serves user faults cannot be delivered there). `write`: the kernel will store into them.
fn touch(p: usize, n: usize, write: bool) {
    for (_, e) in table::find_all_addr(p, n) {
        if write && !e.writable {
            continue; // The kernel's EFAULT, as for any read-only memory.
        }
        let lo = p.max(e.start) & !(PAGE - 1);
        let hi = (p + n).min(e.start + e.len);
        let mut a = lo.max(p);
        while a < hi {
            if write {
                // SAFETY: `a` lies in a live writable shim mapping (the table holds it while
                // `e` is alive). A compare-exchange of a byte with itself is a write access
                // (it faults the page in for writing) that cannot undo another thread's
                // store; an idempotent `fetch_or(0)` would be compiled to a plain load.
                let b = unsafe { &*(a as *const AtomicU8) };
                let cur = b.load(SeqCst);
                let _ = b.compare_exchange(cur, cur, SeqCst, SeqCst);
            } else {
                // SAFETY: as above, a readable mapping.
                unsafe { std::ptr::read_volatile(a as *const u8) };
            }
            a = (a & !(PAGE - 1)) + PAGE;
        }
    }
}

/// Runs a transfer whose buffer `[buf, buf+len)` may lie in shim mappings: piece by piece,
/// each made resident first and retried on `EFAULT` (a page evicted in between). `f(ptr,
/// n, done)` does one piece; its result as the system call's.
pub(crate) fn transfer(
    buf: usize,
    len: usize,
    write_to_buf: bool,
    mut f: impl FnMut(usize, usize, usize) -> isize,
) -> isize {
    if table::find_addr(buf, len).is_none() {
        return f(buf, len, 0);
    }
    let mut done = 0usize;
    let piece = chunk();
    loop {
        let mut n = (len - done).min(piece);
        let p = buf + done;
        let mut tries = 0;
        let r = loop {
            // Shared pins keep the piece resident until the kernel has copied it (eviction
            // and readahead run meanwhile); stores are not excluded by them.
            let ents = table::find_all_addr(p, n);
            let mut pins = Vec::new();
            for (_, e) in &ents {
                let lo = p.max(e.start) - e.start;
                let hi = (p + n).min(e.start + e.len) - e.start;
                for i in e.map.buffer_of(lo as u64)..=e.map.buffer_of(hi as u64 - 1) {
                    if let Ok(g) = e.map.pin_shared(i) {
                        pins.push(g);
                    }
                }
            }
            touch(p, n, write_to_buf);
            let r = f(p, n, done);
            drop(pins);
            if r < 0 && real::errno() == libc::EFAULT && tries < 16 {
                // Evicted before the kernel got there: again, a page at a time.
                tries += 1;
                n = n.min(PAGE - p % PAGE);
                continue;
            }
            break r;
        };
        if r < 0 {
            return if done > 0 { done as isize } else { r };
        }
        done += r as usize;
        if (r as usize) < n || done >= len {
            return done as isize;
        }
    }
}

/// Makes every buffer of an iovec array that lies in a shim mapping resident.
pub(crate) fn touch_iov(iov: *const libc::iovec, cnt: i32, write_to_buf: bool) {
    if iov.is_null() || cnt <= 0 {
        return;
    }
    // SAFETY: the program passes `cnt` iovecs; the kernel would read them the same way.
    let v = unsafe { std::slice::from_raw_parts(iov, cnt as usize) };
    for i in v {
        touch(i.iov_base as usize, i.iov_len, write_to_buf);
    }
}

pub(crate) fn iov_len(iov: *const libc::iovec, cnt: i32) -> usize {
    if iov.is_null() || cnt <= 0 {
        return 0;
    }
    // SAFETY: as in touch_iov.
    let v = unsafe { std::slice::from_raw_parts(iov, cnt as usize) };
    v.iter()
        .map(|i| i.iov_len)
        .fold(0usize, usize::saturating_add)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(pairs: &[(&str, &str)]) -> Config {
        let get = |k: &str| {
            pairs
                .iter()
                .chain(&[("UCACHE_FILES", "*")])
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        };
        Config::from_env(get).unwrap().unwrap()
    }

    #[test]
    fn a_view_has_large_buffers_that_the_budget_holds_eight_of() {
        let view = |m: &str, more: &[(&str, &str)]| {
            let mut p = vec![("UCACHE_FILE_VIEW", "1"), ("UCACHE_MEMORY", m)];
            p.extend_from_slice(more);
            view_buffer(&cfg(&p))
        };
        assert_eq!(view("128MiB", &[]), Some(1 << 20));
        assert_eq!(
            view("1GiB", &[("UCACHE_BUFFER_SIZE", "2MiB")]),
            Some(2 << 20)
        );
        assert_eq!(view("2MiB", &[]), Some(256 << 10));
        assert_eq!(view("700KiB", &[]), Some(64 << 10));
        assert_eq!(view("256KiB", &[]), None, "a budget too small for views");
        assert_eq!(view("128MiB", &[("UCACHE_FAULT_THREADS", "2")]), None);
        assert_eq!(
            view_buffer(&cfg(&[("UCACHE_MEMORY", "128MiB")])),
            None,
            "asked for"
        );
    }
}
