//! Application stores in tests: each wraps a real object and changes one or two of its calls.
//! What they pass through unchanged is written once here, so a test's store is only what it
//! does differently.

// Not every test binary that shares this module uses all of it.
#![allow(dead_code, unused_imports, unused_macros)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use ucache::store::{FileStore, Object, OpenOptions, Store, UringOptions, UringStore};

/// A store that opens each object through `inner` and hands it to `wrap`, which returns the
/// test's own object around it.
pub struct WrapStore<F> {
    inner: Arc<dyn Store>,
    wrap: F,
}

impl<F> WrapStore<F>
where
    F: Fn(Arc<dyn Object>) -> Arc<dyn Object> + Send + Sync + 'static,
{
    pub fn new(inner: Arc<dyn Store>, wrap: F) -> Self {
        WrapStore { inner, wrap }
    }
}

impl<F> Store for WrapStore<F>
where
    F: Fn(Arc<dyn Object>) -> Arc<dyn Object> + Send + Sync + 'static,
{
    fn open(&self, object: &str, options: OpenOptions) -> ucache::Result<Arc<dyn Object>> {
        Ok((self.wrap)(self.inner.open(object, options)?))
    }
}

/// Inside `impl Object for W`, defines each named method (`name`, `len`, `set_len`, `read_at`,
/// `write_at`, `sync`) as the same call on the field `self.$inner`. Bring it into scope with
/// `use common::store::forward_object;` (it names itself to expand each method).
macro_rules! forward_object {
    ($inner:ident: $($method:ident),+ $(,)?) => {
        $(forward_object!(@ $inner $method);)+
    };
    (@ $inner:ident name) => {
        fn name(&self) -> &str {
            self.$inner.name()
        }
    };
    (@ $inner:ident len) => {
        fn len(&self) -> std::io::Result<u64> {
            self.$inner.len()
        }
    };
    (@ $inner:ident set_len) => {
        fn set_len(&self, len: u64) -> std::io::Result<()> {
            self.$inner.set_len(len)
        }
    };
    (@ $inner:ident read_at) => {
        fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
            self.$inner.read_at(buf, offset)
        }
    };
    (@ $inner:ident write_at) => {
        fn write_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
            self.$inner.write_at(buf, offset)
        }
    };
    (@ $inner:ident sync) => {
        fn sync(&self) -> std::io::Result<()> {
            self.$inner.sync()
        }
    };
}
pub(crate) use forward_object;

/// The local stores this machine has for the file at `path` (pread, `O_DIRECT` pread, io_uring
/// `O_DIRECT`): a file system without `O_DIRECT`, or a kernel without io_uring, leaves its
/// store out (and says so).
pub fn local_stores(path: &std::path::Path) -> Vec<(&'static str, Arc<dyn Store>)> {
    let mut v: Vec<(&str, Arc<dyn Store>)> = vec![("pread", Arc::new(FileStore::new()))];
    match FileStore::direct().open(path.to_str().unwrap(), Default::default()) {
        Ok(_) => v.push(("pread-direct", Arc::new(FileStore::direct()))),
        Err(e) => eprintln!("O_DIRECT unavailable here, skipping it: {e}"),
    }
    match UringStore::new(UringOptions::default()) {
        Ok(u) => v.push(("uring", Arc::new(u))),
        Err(e) => eprintln!("io_uring unavailable, skipping it: {e}"),
    }
    v
}

/// An object that counts the bytes read on the cache's IO threads and elsewhere, and says
/// whether it reads ahead as it is told.
pub struct Tally {
    inner: Arc<dyn Object>,
    reads_ahead: bool,
    counts: Arc<Counts>,
}

/// What a `Tally` counted.
#[derive(Default)]
pub struct Counts {
    /// Bytes read on the cache's IO threads.
    pub io: AtomicU64,
    /// Bytes read on other threads (the callers').
    pub caller: AtomicU64,
    /// The furthest end of a read on the IO threads.
    pub io_end: AtomicU64,
}

impl Counts {
    pub fn get(&self) -> (u64, u64) {
        (
            self.io.load(Ordering::SeqCst),
            self.caller.load(Ordering::SeqCst),
        )
    }
}

impl Object for Tally {
    forward_object!(inner: name, len, set_len, write_at, sync);
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
        let n = self.inner.read_at(buf, offset)?;
        let io = std::thread::current()
            .name()
            .is_some_and(|t| t.starts_with("ucache-io"));
        if io {
            self.counts.io.fetch_add(n as u64, Ordering::SeqCst);
            self.counts
                .io_end
                .fetch_max(offset + n as u64, Ordering::SeqCst);
        } else {
            self.counts.caller.fetch_add(n as u64, Ordering::SeqCst);
        }
        Ok(n)
    }
    fn accepts_unaligned(&self) -> bool {
        self.inner.accepts_unaligned()
    }
    fn reads_ahead(&self) -> bool {
        self.reads_ahead
    }
}

/// A `Tally` store over `inner`, and what it counts.
pub fn tally(inner: Arc<dyn Store>, reads_ahead: bool) -> (Arc<dyn Store>, Arc<Counts>) {
    let counts = Arc::new(Counts::default());
    let c = counts.clone();
    let store = WrapStore::new(inner, move |obj| {
        Arc::new(Tally {
            inner: obj,
            reads_ahead,
            counts: c.clone(),
        }) as Arc<dyn Object>
    });
    (Arc::new(store), counts)
}
