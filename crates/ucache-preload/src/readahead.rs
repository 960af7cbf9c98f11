//! The shim's readahead, kept within the file.
//!
//! A shim mapping may reach past the end of its file, as a kernel mapping may (LMDB maps its
//! whole map size over a shorter file), so the object reports the mapping's end as its length
//! and the mapping clamps readahead to that, not to the file. A window past the file's end
//! would claim buffers, read 0 bytes for each and count each as a failed read: 2048 per
//! `mdb_dump` run of the benchmark. [`WithinFile`] drops proposals that start at or past the
//! file's end before they reach the mapping.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use ucache::policy::prefetch::{Prefetcher, ReadAhead};
use ucache::policy::Layout;

use crate::store::RawFile;

/// The shim's readahead: ucache's transparent default with windows up to 8 MiB, read as 8
/// jobs of 1 MiB by the IO threads at once (see `shim::IO_THREADS`).
pub(crate) fn readahead(bs: usize) -> ReadAhead {
    let bs = bs.max(1) as u64;
    ReadAhead::new((16 << 10) / bs, ((8 << 20) / bs).max(4))
        .asynchronous()
        .start_window((1 << 20) / bs)
}

/// A prefetcher whose proposals are cut at the end of the file behind the mapping.
pub(crate) struct WithinFile<P> {
    inner: P,
    file: Arc<RawFile>,
    /// The file offset of the mapping's buffer 0.
    offset: u64,
    buffer_size: u64,
    /// Buffers that started before the file's end when it was last looked at. The file is
    /// looked at again (`fstat`) only when a proposal reaches this far, so a window well inside
    /// the file costs no system call, and a file that grew since is seen when it matters.
    known: AtomicU64,
}

impl<P: Prefetcher> WithinFile<P> {
    pub(crate) fn new(inner: P, file: Arc<RawFile>, offset: u64, buffer_size: usize) -> Self {
        WithinFile {
            inner,
            file,
            offset,
            buffer_size: buffer_size.max(1) as u64,
            known: AtomicU64::new(0),
        }
    }

    /// Buffers that start before the file's end now; `None` if the file cannot be looked at
    /// (then nothing is cut: the reads themselves will tell).
    fn buffers_in_file(&self) -> Option<u64> {
        let size = self.file.size().ok()?;
        let n = size.saturating_sub(self.offset).div_ceil(self.buffer_size);
        self.known.store(n, Relaxed);
        Some(n)
    }
}

impl<P: Prefetcher> Prefetcher for WithinFile<P> {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn attach(&mut self, layout: Layout) {
        self.inner.attach(layout)
    }

    fn is_active(&self) -> bool {
        self.inner.is_active()
    }

    fn on_miss(&self, index: u64, out: &mut Vec<u64>) {
        let from = out.len();
        self.inner.on_miss(index, out);
        let known = self.known.load(Relaxed);
        if out[from..].iter().all(|&i| i < known) {
            return;
        }
        let Some(n) = self.buffers_in_file() else {
            return;
        };
        let mut kept = from;
        for j in from..out.len() {
            if out[j] < n {
                out[kept] = out[j];
                kept += 1;
            }
        }
        out.truncate(kept);
    }
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsRawFd;

    use super::*;

    const BS: usize = 4096;

    /// A file of `buffers` buffers and a half, and the wrapper over sequential readahead of a
    /// mapping of 64 buffers from `offset`.
    fn setup(
        dir: &std::path::Path,
        buffers: usize,
        offset: u64,
    ) -> (std::fs::File, WithinFile<ReadAhead>) {
        let path = dir.join("f");
        std::fs::write(&path, vec![7u8; buffers * BS + BS / 2]).unwrap();
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        let fd = crate::real::reopen(f.as_raw_fd(), false).unwrap();
        let file = Arc::new(RawFile { fd, direct: None });
        let mut p = WithinFile::new(ReadAhead::new(2, 16), file, offset, BS);
        p.attach(Layout {
            buffers: 64,
            capacity: 64,
            buffer_size: BS,
        });
        (f, p)
    }

    /// Every proposal for sequential misses 0..misses.
    fn proposals(p: &impl Prefetcher, misses: u64) -> Vec<u64> {
        let mut out = Vec::new();
        for i in 0..misses {
            p.on_miss(i, &mut out);
        }
        out
    }

    #[test]
    fn windows_stop_at_the_files_end() {
        let dir = tempfile::tempdir().unwrap();
        // 10.5 buffers: buffers 0..=10 hold bytes of the file.
        let (_f, p) = setup(dir.path(), 10, 0);
        let out = proposals(&p, 11);
        assert!(!out.is_empty(), "sequential misses proposed nothing");
        assert!(out.iter().all(|&i| i <= 10), "{out:?}");
        assert!(
            out.contains(&10),
            "the buffer holding the end was cut: {out:?}"
        );
        // The same readahead unwrapped goes past it: the test can fail.
        let mut bare = ReadAhead::new(2, 16);
        bare.attach(Layout {
            buffers: 64,
            capacity: 64,
            buffer_size: BS,
        });
        assert!(proposals(&bare, 11).iter().any(|&i| i > 10));
    }

    #[test]
    fn the_mappings_file_offset_counts() {
        let dir = tempfile::tempdir().unwrap();
        // The mapping starts 4 buffers into a file of 10.5: its buffers 0..=6 hold bytes.
        let (_f, p) = setup(dir.path(), 10, 4 * BS as u64);
        let out = proposals(&p, 7);
        assert!(out.iter().all(|&i| i <= 6), "{out:?}");
        assert!(out.contains(&6), "{out:?}");
    }

    #[test]
    fn a_file_that_grew_is_read_further() {
        let dir = tempfile::tempdir().unwrap();
        let (f, p) = setup(dir.path(), 3, 0);
        assert!(proposals(&p, 4).iter().all(|&i| i <= 3));
        f.set_len(40 * BS as u64).unwrap();
        let mut out = Vec::new();
        for i in 4..12 {
            p.on_miss(i, &mut out);
        }
        assert!(out.iter().any(|&i| i > 12), "{out:?}");
        assert!(out.iter().all(|&i| i < 40), "{out:?}");
    }

    #[test]
    fn proposals_already_in_the_list_are_kept() {
        let dir = tempfile::tempdir().unwrap();
        let (_f, p) = setup(dir.path(), 2, 0);
        let mut out = vec![50, 60];
        for i in 0..4 {
            p.on_miss(i, &mut out);
        }
        assert_eq!(&out[..2], &[50, 60]);
        assert!(out[2..].iter().all(|&i| i <= 2), "{out:?}");
    }
}
