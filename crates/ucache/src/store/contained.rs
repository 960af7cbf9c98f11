//! An application store's panic, contained at the store boundary.
//!
//! The cache calls a store while it owns buffers in flight: claimed `Loading` buffers other
//! threads wait on, write-backs holding a pin, the SIGBUS handler's miss. A panic unwinding
//! through those frames would leave the words claimed for good (every later access hangs),
//! kill an IO thread, or abort the process from inside a signal handler. So every mapping
//! calls its object through [`Contained`], which turns a panic into an IO error
//! (`ErrorKind::Other`, "store panicked: ..."): the buffers go back to evicted, or stay dirty,
//! and the caller gets a typed error as for any failed IO.
//!
//! A store that panics must not leave requests running on the memory it was lent (io_uring
//! reads still in the kernel): the cache reuses that memory once the call has returned.

use std::any::Any;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::io;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use super::{IoBuf, Object};

/// An [`Object`] whose panics come back as IO errors.
pub(crate) struct Contained(pub(crate) Arc<dyn Object>);

pub(super) fn panicked(p: &(dyn Any + Send)) -> io::Error {
    let what = p
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| p.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)");
    io::Error::other(format!("store panicked: {what}"))
}

fn contain<T>(f: impl FnOnce() -> io::Result<T>) -> io::Result<T> {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|p| Err(panicked(&*p)))
}

/// Where an [`IoBuf`] was, to hand it back with an error after a panic took the original.
struct Lent {
    ptr: usize,
    len: usize,
    offset: u64,
}

impl Object for Contained {
    fn name(&self) -> &str {
        self.0.name()
    }
    fn len(&self) -> io::Result<u64> {
        contain(|| self.0.len())
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        contain(|| self.0.set_len(len))
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        contain(|| self.0.read_at(buf, offset))
    }
    /// A store that panics here is taken to need aligned memory, which every store accepts.
    fn accepts_unaligned(&self) -> bool {
        contain(|| Ok(self.0.accepts_unaligned())).unwrap_or(false)
    }
    fn reads_ahead(&self) -> bool {
        contain(|| Ok(self.0.reads_ahead())).unwrap_or(false)
    }
    fn page_cache_fd(&self) -> Option<std::os::fd::RawFd> {
        contain(|| Ok(self.0.page_cache_fd())).unwrap_or(None)
    }
    fn requests(&self) -> Option<super::StoreRequests> {
        contain(|| Ok(self.0.requests())).unwrap_or(None)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        contain(|| self.0.write_at(buf, offset))
    }
    fn sync(&self) -> io::Result<()> {
        contain(|| self.0.sync())
    }
    #[cfg(feature = "tokio")]
    fn read_owned(self: Arc<Self>, offset: u64, len: usize) -> super::ReadOwned {
        super::owned::contained(&self.0, offset, len)
    }

    fn read_batch(&self, reqs: &mut [IoBuf], out: &mut Vec<io::Result<usize>>) {
        if let Err(p) = catch_unwind(AssertUnwindSafe(|| self.0.read_batch(reqs, out))) {
            out.clear();
            out.extend(reqs.iter().map(|_| Err(panicked(&*p))));
        }
    }

    fn write_batch(&self, reqs: &[IoBuf], out: &mut Vec<io::Result<()>>) {
        if let Err(p) = catch_unwind(AssertUnwindSafe(|| self.0.write_batch(reqs, out))) {
            out.clear();
            out.extend(reqs.iter().map(|_| Err(panicked(&*p))));
        }
    }

    /// Every request the store pulled and has not handed back when it returns or panics is
    /// handed back failed, so the caller's accounting of what is in flight stays whole: a
    /// request dropped by the store would otherwise keep its buffer claimed for good. Only
    /// requests lent by this call are passed on to `done`.
    fn read_stream<'a>(
        &self,
        depth: usize,
        next: &mut dyn FnMut() -> Option<IoBuf<'a>>,
        done: &mut dyn FnMut(IoBuf<'a>, io::Result<usize>),
    ) {
        // Oldest first: completions come back mostly in order, so the search stays short.
        let lent: RefCell<VecDeque<Lent>> = RefCell::new(VecDeque::new());
        let mut pull = || {
            let r = next();
            if let Some(b) = &r {
                lent.borrow_mut().push_back(Lent {
                    ptr: b.ptr() as usize,
                    len: b.len(),
                    offset: b.offset(),
                });
            }
            r
        };
        let mut back = |b: IoBuf<'a>, got: io::Result<usize>| {
            let mut l = lent.borrow_mut();
            let found = l.iter().position(|x| {
                x.ptr == b.ptr() as usize && x.len == b.len() && x.offset == b.offset()
            });
            if let Some(k) = found {
                l.remove(k);
                drop(l);
                done(b, got);
            }
        };
        let r = catch_unwind(AssertUnwindSafe(|| {
            self.0.read_stream(depth, &mut pull, &mut back)
        }));
        let left = lent.take();
        if left.is_empty() {
            return;
        }
        let why = match &r {
            Err(p) => panicked(&**p),
            Ok(()) => io::Error::other("the store neither completed nor failed this request"),
        };
        for x in left {
            // SAFETY: the request was lent to the store, which has returned or unwound out of
            // the call, and could not keep it past the call (`IoBuf`'s lifetime) nor, by the
            // trait's contract, leave IO running on it; the loan goes back to its maker.
            let b = unsafe { IoBuf::new(x.ptr as *mut u8, x.len, x.offset) };
            done(b, Err(io::Error::new(why.kind(), why.to_string())));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{MemoryStore, OpenOptions, Store};

    /// Panics on every read at or past `from`, and in the middle of a stream.
    struct Panicky {
        inner: Arc<dyn Object>,
        from: u64,
    }

    impl Object for Panicky {
        fn name(&self) -> &str {
            "panicky"
        }
        fn len(&self) -> io::Result<u64> {
            self.inner.len()
        }
        fn set_len(&self, _: u64) -> io::Result<()> {
            panic!("no growing")
        }
        fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
            assert!(offset < self.from, "read at {offset}");
            self.inner.read_at(buf, offset)
        }
        fn write_at(&self, _: &[u8], _: u64) -> io::Result<()> {
            std::panic::panic_any(7u32)
        }
        fn sync(&self) -> io::Result<()> {
            Ok(())
        }
    }

    fn object(from: u64) -> Contained {
        let s = MemoryStore::new();
        s.insert("o", vec![3u8; 8 * 4096]);
        let inner = s.open("o", OpenOptions::read_only()).unwrap();
        Contained(Arc::new(Panicky { inner, from }))
    }

    #[test]
    fn single_calls_turn_panics_into_errors() {
        let o = object(4096);
        let mut buf = vec![0u8; 4096];
        assert_eq!(o.read_at(&mut buf, 0).unwrap(), 4096);
        let e = o.read_at(&mut buf, 4096).unwrap_err();
        assert!(e.to_string().contains("read at 4096"), "{e}");
        let e = o.set_len(1).unwrap_err();
        assert!(e.to_string().contains("no growing"), "{e}");
        let e = o.write_at(&buf, 0).unwrap_err();
        assert!(e.to_string().contains("no message"), "{e}");
    }

    #[test]
    fn a_batch_that_panics_answers_every_request() {
        let o = object(2 * 4096);
        let mut mem = vec![0u8; 4 * 4096];
        let mut reqs: Vec<IoBuf> = (0..4)
            // SAFETY: four disjoint 4 KiB pieces of `mem`, unused until the batch returns.
            .map(|k| unsafe { IoBuf::new(mem.as_mut_ptr().add(k * 4096), 4096, k as u64 * 4096) })
            .collect();
        let mut out = Vec::new();
        o.read_batch(&mut reqs, &mut out);
        assert_eq!(out.len(), 4);
        assert!(out.iter().all(|r| r.is_err()));
    }

    #[test]
    fn a_stream_that_panics_hands_back_what_it_pulled() {
        let o = object(5 * 4096);
        let mut mem = vec![0u8; 8 * 4096];
        let base = mem.as_mut_ptr();
        let mut k = 0u64;
        let mut next = || {
            (k < 8).then(|| {
                k += 1;
                // SAFETY: piece k-1 of `mem`, lent once.
                unsafe { IoBuf::new(base.add((k as usize - 1) * 4096), 4096, (k - 1) * 4096) }
            })
        };
        let mut answered = Vec::new();
        o.read_stream(3, &mut next, &mut |b, got| {
            answered.push((b.offset() / 4096, got.is_ok()))
        });
        answered.sort();
        // The first batch of three read; the second (3, 4, 5) panicked at 5 and came back
        // failed whole. Nothing pulled is missing.
        assert_eq!(k, 6);
        assert_eq!(answered.len(), 6);
        assert!(
            answered.iter().all(|&(i, ok)| ok == (i < 3)),
            "{answered:?}"
        );
    }
}
