//! Stores: the built-in ones by name, and stores written in C as a table of functions.

use std::ffi::{c_char, c_int, c_void, CString};
use std::io;
use std::sync::Arc;

use ucache_core::store::{
    FileStore, MemoryStore, Object, OpenOptions, Store, UringOptions, UringStore,
};
use ucache_core::{Error, Result};

use crate::handle::{arg, c_str, slice, slice_mut, Out, Registry};
use crate::status::{call, ucache_status, Fail};

/// A store: where mappings' bytes come from and go to. Opaque; created by `ucache_store_new`
/// or `ucache_store_from_ops`, released by `ucache_store_free`.
pub struct ucache_store {
    _private: (),
}

pub(crate) struct StoreEntry {
    pub(crate) store: Arc<dyn Store>,
    /// The same store, for a memory store (`ucache_memory_store_*`).
    memory: Option<MemoryStore>,
}

pub(crate) static STORES: Registry<StoreEntry> =
    Registry::new(2, "ucache_store", ucache_status::UCACHE_ERR_BAD_HANDLE);

/// Creates a built-in store by kind and stores its handle in `*out`:
/// - `"file"`: files by path, through the kernel's page cache;
/// - `"file-direct"`: files by path, `O_DIRECT` (the cache is the only copy in memory);
/// - `"uring"`: files by path, `O_DIRECT`, batched through io_uring;
/// - `"uring-buffered"`: the same without `O_DIRECT`;
/// - `"memory"`: named byte arrays in memory (`ucache_memory_store_insert`, `_get`).
///
/// Ownership: `kind` is only read. The handle belongs to the caller (`ucache_store_free`).
/// Thread safety: any thread; a store may be used by many mappings and threads at once.
#[no_mangle]
pub extern "C" fn ucache_store_new(
    kind: *const c_char,
    out: *mut *mut ucache_store,
) -> ucache_status {
    call(|| {
        let out = Out::new(out, "out")?;
        let uring = |direct| -> Result<Arc<dyn Store>> {
            Ok(Arc::new(UringStore::new(UringOptions {
                direct,
                ..UringOptions::default()
            })?))
        };
        let mut memory = None;
        let store: Arc<dyn Store> = match c_str(kind, "kind")? {
            "file" => Arc::new(FileStore::new()),
            "file-direct" => Arc::new(FileStore::direct()),
            "uring" => uring(true)?,
            "uring-buffered" => uring(false)?,
            "memory" => {
                let m = MemoryStore::new();
                memory = Some(m.clone());
                Arc::new(m)
            }
            other => {
                return Err(Fail::bad(format!(
                "unknown store kind '{other}' (file, file-direct, uring, uring-buffered, memory)"
            )))
            }
        };
        out.set(STORES.insert(StoreEntry { store, memory }) as *mut ucache_store);
        Ok(())
    })
}

/// Releases a store handle. Mappings of the store keep it alive until they are unmapped.
///
/// Ownership: consumes the handle. Thread safety: any thread.
#[no_mangle]
pub extern "C" fn ucache_store_free(store: *mut ucache_store) -> ucache_status {
    call(|| STORES.remove(store as usize).map(drop))
}

fn memory_store(store: *const ucache_store) -> Result<MemoryStore, Fail> {
    STORES
        .get(store as usize)?
        .memory
        .clone()
        .ok_or_else(|| Fail::bad("not a memory store"))
}

/// Adds or replaces the object `name` of a memory store with a copy of `data[0..len]`.
///
/// Ownership: `name` and `data` are only read (`data` may be NULL when `len` is 0).
/// Thread safety: any thread. Mappings already open on an object keep its old bytes.
#[no_mangle]
pub extern "C" fn ucache_memory_store_insert(
    store: *const ucache_store,
    name: *const c_char,
    data: *const u8,
    len: usize,
) -> ucache_status {
    call(|| {
        let m = memory_store(store)?;
        let name = c_str(name, "name")?;
        m.insert(name, slice(data, len, "data")?.to_vec());
        Ok(())
    })
}

/// Copies up to `cap` bytes of the object `name` of a memory store into `buf`, and its
/// length into `*len` (which may exceed `cap`: call again with a larger buffer).
///
/// Ownership: all buffers are the caller's. Thread safety: any thread.
#[no_mangle]
pub extern "C" fn ucache_memory_store_get(
    store: *const ucache_store,
    name: *const c_char,
    buf: *mut u8,
    cap: usize,
    len: *mut usize,
) -> ucache_status {
    call(|| {
        let len = Out::new(len, "len")?;
        let m = memory_store(store)?;
        let name = c_str(name, "name")?;
        let buf = slice_mut(buf, cap, "buf")?;
        let data = m.get(name).ok_or_else(|| {
            Fail::from(Error::NotFound {
                object: name.to_string(),
            })
        })?;
        let n = data.len().min(cap);
        buf[..n].copy_from_slice(&data[..n]);
        len.set(data.len());
        Ok(())
    })
}

/// A store written in C: a table of functions, called from ucache's threads.
///
/// Every function returns 0 on success or a positive `errno` value (`ENOENT` from `open`
/// means the object does not exist). `store` is the `user` pointer given to
/// `ucache_store_from_ops`; `object` is what `open` stored in `*object`.
///
/// Contract: the functions are called concurrently from any thread (the calling thread, IO
/// threads, and for transparent mappings the faulting thread inside a `SIGBUS` handler, so
/// there they must not touch the mapping's memory, and should be async-signal-safe enough
/// for the program: no locks the interrupted code may hold). They must not unwind (no C++
/// exceptions, no `longjmp` out). Buffers passed to them are valid only during the call.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ucache_store_ops {
    /// Required. Opens `name`; `write`: for writing too; `create`: create it if missing.
    pub open: Option<
        unsafe extern "C" fn(
            store: *mut c_void,
            name: *const c_char,
            write: bool,
            create: bool,
            object: *mut *mut c_void,
        ) -> c_int,
    >,
    /// Required. The object's length in bytes.
    pub len: Option<unsafe extern "C" fn(object: *mut c_void, len: *mut u64) -> c_int>,
    /// Optional (NULL: `ENOTSUP`). Grows or shrinks the object.
    pub set_len: Option<unsafe extern "C" fn(object: *mut c_void, len: u64) -> c_int>,
    /// Required. Reads up to `len` bytes at `offset` into `buf` and stores the count in
    /// `*got`: fewer than `len` only at the end of the object.
    pub read: Option<
        unsafe extern "C" fn(
            object: *mut c_void,
            buf: *mut u8,
            len: usize,
            offset: u64,
            got: *mut usize,
        ) -> c_int,
    >,
    /// Optional (NULL: the store is read-only, `EROFS`). Writes all `len` bytes of `buf` at
    /// `offset`.
    pub write: Option<
        unsafe extern "C" fn(object: *mut c_void, buf: *const u8, len: usize, offset: u64) -> c_int,
    >,
    /// Optional (NULL: nothing to do). Makes completed writes durable.
    pub sync: Option<unsafe extern "C" fn(object: *mut c_void) -> c_int>,
    /// Optional. Called once when ucache no longer uses `object`.
    pub close: Option<unsafe extern "C" fn(object: *mut c_void)>,
    /// Optional. Called once when ucache no longer uses the store (its handle is freed and
    /// every mapping of it is gone), after every `close`.
    pub destroy: Option<unsafe extern "C" fn(store: *mut c_void)>,
}

/// The C store's functions and its user pointer.
struct CStore {
    ops: ucache_store_ops,
    user: *mut c_void,
}

// SAFETY: `ucache_store_from_ops` documents that the functions may be called from any thread,
// concurrently, with this user pointer: the C code promises that the data behind it is
// thread-safe.
unsafe impl Send for CStore {}
// SAFETY: as above.
unsafe impl Sync for CStore {}

impl Drop for CStore {
    fn drop(&mut self) {
        if let Some(destroy) = self.ops.destroy {
            // SAFETY: a function of the table, called once, after every object (which hold
            // this store through an `Arc`) was closed; the contract of `ucache_store_ops`.
            unsafe { destroy(self.user) }
        }
    }
}

struct CObject {
    store: Arc<CStore>,
    user: *mut c_void,
    name: String,
}

// SAFETY: as for `CStore`: the table's functions take the object pointer from any thread.
unsafe impl Send for CObject {}
// SAFETY: as above.
unsafe impl Sync for CObject {}

/// An `errno` from a C function as an IO error (0 is success).
fn errno(rc: c_int) -> io::Result<()> {
    match rc {
        0 => Ok(()),
        e if e > 0 => Err(io::Error::from_raw_os_error(e)),
        e => Err(io::Error::other(format!(
            "C store returned {e}, not an errno"
        ))),
    }
}

fn unsupported(what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::Unsupported,
        format!("the C store has no {what}"),
    )
}

/// What a mapping holds of a C store; the objects it opens hold the same `CStore`.
struct CStoreRef(Arc<CStore>);

impl Store for CStoreRef {
    fn open(&self, name: &str, options: OpenOptions) -> Result<Arc<dyn Object>> {
        let c_name = CString::new(name)
            .map_err(|_| Error::BadArgument(format!("object name '{name}' contains NUL")))?;
        let store = &self.0;
        let open = store.ops.open.expect("checked by ucache_store_from_ops");
        let mut user = std::ptr::null_mut();
        // SAFETY: a function of the table with the store's user pointer, a NUL-terminated
        // name and a valid out-pointer; the contract of `ucache_store_ops`.
        let rc = unsafe {
            open(
                store.user,
                c_name.as_ptr(),
                options.write,
                options.create,
                &mut user,
            )
        };
        errno(rc).map_err(|e| Error::io("open", name, 0, e))?;
        Ok(Arc::new(CObject {
            store: store.clone(),
            user,
            name: name.to_string(),
        }))
    }
}

impl Drop for CObject {
    fn drop(&mut self) {
        if let Some(close) = self.store.ops.close {
            // SAFETY: the object pointer `open` gave, closed once.
            unsafe { close(self.user) }
        }
    }
}

impl Object for CObject {
    fn name(&self) -> &str {
        &self.name
    }

    fn len(&self) -> io::Result<u64> {
        let f = self
            .store
            .ops
            .len
            .expect("checked by ucache_store_from_ops");
        let mut len = 0;
        // SAFETY: a function of the table with this object's pointer and a valid out-pointer.
        errno(unsafe { f(self.user, &mut len) })?;
        Ok(len)
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        let f = self
            .store
            .ops
            .set_len
            .ok_or_else(|| unsupported("set_len"))?;
        // SAFETY: a function of the table with this object's pointer.
        errno(unsafe { f(self.user, len) })
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let f = self
            .store
            .ops
            .read
            .expect("checked by ucache_store_from_ops");
        let mut got = 0;
        // SAFETY: a function of the table with this object's pointer, a buffer valid for
        // writes of `buf.len()` bytes and a valid out-pointer.
        errno(unsafe { f(self.user, buf.as_mut_ptr(), buf.len(), offset, &mut got) })?;
        if got > buf.len() {
            return Err(io::Error::other(format!(
                "the C store read {got} bytes into a buffer of {}",
                buf.len()
            )));
        }
        Ok(got)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        let Some(f) = self.store.ops.write else {
            return Err(io::Error::from_raw_os_error(libc::EROFS));
        };
        // SAFETY: a function of the table with this object's pointer and a buffer valid for
        // reads of `buf.len()` bytes.
        errno(unsafe { f(self.user, buf.as_ptr(), buf.len(), offset) })
    }

    fn sync(&self) -> io::Result<()> {
        match self.store.ops.sync {
            // SAFETY: a function of the table with this object's pointer.
            Some(f) => errno(unsafe { f(self.user) }),
            None => Ok(()),
        }
    }
}

/// Creates a store whose objects are served by C functions (see `ucache_store_ops`) and
/// stores its handle in `*out`.
///
/// Ownership: the table is copied; `user` is passed to the functions and handed to
/// `ops->destroy` once ucache is done with the store (its handle freed and its last mapping
/// gone). On failure nothing is kept and `destroy` is not called. The handle belongs to the
/// caller (`ucache_store_free`). Thread safety: any thread; see `ucache_store_ops` for the
/// threads the functions are called on.
#[no_mangle]
pub extern "C" fn ucache_store_from_ops(
    ops: *const ucache_store_ops,
    user: *mut c_void,
    out: *mut *mut ucache_store,
) -> ucache_status {
    call(|| {
        let out = Out::new(out, "out")?;
        let ops = *arg(ops, "ops")?;
        if ops.open.is_none() || ops.len.is_none() || ops.read.is_none() {
            return Err(Fail::null(
                "ops->open, ops->len and ops->read are required: one",
            ));
        }
        let store: Arc<dyn Store> = Arc::new(CStoreRef(Arc::new(CStore { ops, user })));
        out.set(STORES.insert(StoreEntry {
            store,
            memory: None,
        }) as *mut ucache_store);
        Ok(())
    })
}
