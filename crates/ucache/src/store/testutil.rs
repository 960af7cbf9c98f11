//! Helpers the store tests share: scratch directories that accept `O_DIRECT`, aligned memory,
//! and a position-dependent byte pattern.

use std::alloc::{self, Layout};
use std::fs::OpenOptions;
use std::io::Write;
use std::ops::{Deref, DerefMut};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The byte expected at `pos` of test files: varies with position so misplaced data shows up.
pub fn pattern(pos: usize) -> u8 {
    (pos as u64)
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .rotate_left(17) as u8
}

/// A temporary directory; removed on drop.
pub struct Scratch {
    dir: tempfile::TempDir,
    direct_ok: bool,
}

impl Scratch {
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Whether `O_DIRECT` works here. Tests that need it return early (and say so) when it does
    /// not, rather than failing on a machine whose only writable file systems refuse it.
    pub fn direct_ok(&self) -> bool {
        if !self.direct_ok {
            eprintln!("skipping O_DIRECT checks: no scratch directory supports O_DIRECT");
        }
        self.direct_ok
    }
}

/// A fresh scratch directory, on a file system that supports `O_DIRECT` if one is found.
///
/// Candidates, in order: `$UCACHE_TEST_DIR`, the system temp dir, then `target/` of this
/// workspace (always on the disk holding the checkout). `/tmp` may be a tmpfs, which before
/// Linux 6.6 refuses `O_DIRECT`.
pub fn scratch() -> Scratch {
    static BASE: OnceLock<(PathBuf, bool)> = OnceLock::new();
    let (base, direct_ok) = BASE.get_or_init(|| {
        let mut candidates: Vec<PathBuf> = Vec::new();
        if let Some(dir) = std::env::var_os("UCACHE_TEST_DIR") {
            candidates.push(dir.into());
        }
        candidates.push(std::env::temp_dir());
        candidates.push(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/test-scratch"));
        for dir in &candidates {
            if std::fs::create_dir_all(dir).is_ok() && supports_direct(dir) {
                return (dir.clone(), true);
            }
        }
        (std::env::temp_dir(), false)
    });
    let dir = tempfile::Builder::new()
        .prefix("ucache-store-")
        .tempdir_in(base)
        .unwrap();
    Scratch {
        dir,
        direct_ok: *direct_ok,
    }
}

fn supports_direct(dir: &Path) -> bool {
    let Ok(probe) = tempfile::Builder::new().prefix("probe-").tempfile_in(dir) else {
        return false;
    };
    let opened = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_DIRECT)
        .open(probe.path());
    let Ok(mut file) = opened else {
        return false;
    };
    let buf = AlignedBuf::new(4096);
    file.write_all(&buf).is_ok()
}

/// Zeroed heap memory aligned to 4 KiB, as the cache hands to stores.
pub struct AlignedBuf {
    ptr: *mut u8,
    len: usize,
}

impl AlignedBuf {
    pub fn new(len: usize) -> Self {
        assert!(len > 0);
        let layout = Self::layout(len);
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { alloc::alloc_zeroed(layout) };
        assert!(!ptr.is_null(), "allocation of {len} bytes failed");
        AlignedBuf { ptr, len }
    }

    fn layout(len: usize) -> Layout {
        Layout::from_size_align(len, 4096).unwrap()
    }
}

impl Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: `ptr` owns `len` initialised bytes for the life of `self`.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `deref`, and `&mut self` makes the access exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this same layout.
        unsafe { alloc::dealloc(self.ptr, Self::layout(self.len)) }
    }
}
