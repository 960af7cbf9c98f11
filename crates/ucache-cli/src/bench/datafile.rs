//! The data file every system reads, and the steps that put it in the same state for each.
//!
//! Contents: the 8-byte little-endian word at byte offset `o` holds a bijective hash of `o`
//! ([`expected_word`]). Any read of any system can therefore be checked against its offset
//! alone, which makes every benchmark run
//! a correctness test of ucache as well (a buffer loaded into the wrong slot, a stale page
//! after eviction, a torn read all show up as mismatches).
//!
//! The file must be fully written, not sparse: reading a hole costs no device IO, and a
//! benchmark on holes measures nothing.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::Path;
use std::time::Instant;

use super::system::aligned::AlignedBuf;

/// The value stored at byte offset `offset` (a multiple of 8): the splitmix64 finalizer, a
/// bijection, so the words look random. Plain offsets would compress about 2.6:1, and on a
/// compressing device (zram) every read would then pay for decompression that real data
/// does not cost.
#[inline]
pub fn expected_word(offset: u64) -> u64 {
    let mut z = offset.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Checks the 8 bytes at `buf[at..at+8]`, where `buf` holds the file from byte `base` on.
#[inline]
pub fn word_ok(buf: &[u8], base: u64, at: usize) -> bool {
    let w = u64::from_le_bytes(buf[at..at + 8].try_into().expect("8 bytes"));
    w == expected_word(base + at as u64)
}

/// Fills `buf` with the contents the file has from byte `base` on.
pub fn fill_pattern(buf: &mut [u8], base: u64) {
    for (i, chunk) in buf.chunks_exact_mut(8).enumerate() {
        chunk.copy_from_slice(&expected_word(base + 8 * i as u64).to_le_bytes());
    }
}

/// What `ensure` found or did.
#[derive(Debug)]
pub struct DataFileInfo {
    pub created: bool,
    pub filesystem: String,
    pub reason: Option<String>,
}

/// The filesystem type of the directory holding `path`, by statfs magic number.
pub fn filesystem_of(path: &Path) -> String {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()) else {
        return "unknown".into();
    };
    // SAFETY: statfs writes only the struct we pass; c is NUL-terminated.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statfs(c.as_ptr(), &mut st) } != 0 {
        return "unknown".into();
    }
    match st.f_type as i64 {
        0x0102_1994 => "tmpfs".into(),
        0xEF53 => "ext4".into(),
        0x5846_5342 => "xfs".into(),
        0x9123_683E => "btrfs".into(),
        0x6969 => "nfs".into(),
        0x794C_7630 => "overlayfs".into(),
        other => format!("0x{other:x}"),
    }
}

/// Makes sure `path` exists with `size` bytes of the pattern, fully allocated. An existing
/// file is kept when its size matches, it has no holes, and sampled words hold the pattern.
pub fn ensure(path: &Path, size: u64, mut progress: impl FnMut(u64)) -> io::Result<DataFileInfo> {
    let filesystem = filesystem_of(path);
    if filesystem == "tmpfs" {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{} is on tmpfs: it would be memory, not a disk, and O_DIRECT fails there; pass --file on a real disk",
                path.display()
            ),
        ));
    }
    let reason = match check_existing(path, size) {
        Ok(()) => {
            return Ok(DataFileInfo {
                created: false,
                filesystem,
                reason: None,
            })
        }
        Err(why) => why,
    };
    create(path, size, &mut progress)?;
    Ok(DataFileInfo {
        created: true,
        filesystem,
        reason: Some(reason),
    })
}

fn check_existing(path: &Path, size: u64) -> Result<(), String> {
    let meta = fs::metadata(path).map_err(|_| "missing".to_string())?;
    if meta.len() != size {
        return Err(format!("size {} != {}", meta.len(), size));
    }
    if meta.blocks() * 512 < size {
        return Err("sparse".into());
    }
    let f = File::open(path).map_err(|e| e.to_string())?;
    let words = size / 8;
    // A fixed spread of offsets: first, last, and 254 in between.
    let mut buf = [0u8; 8];
    for i in 0..256u64 {
        let off = if i == 255 {
            (words - 1) * 8
        } else {
            (words * i / 255) * 8
        };
        f.read_exact_at(&mut buf, off).map_err(|e| e.to_string())?;
        if !word_ok(&buf, off, 0) {
            return Err(format!("wrong contents at offset {off}"));
        }
    }
    Ok(())
}

fn create(path: &Path, size: u64, progress: &mut impl FnMut(u64)) -> io::Result<()> {
    if size == 0 || !size.is_multiple_of(8) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "data size must be a multiple of 8",
        ));
    }
    let tmp = path.with_extension("tmp");
    let r = write_new(&tmp, path, size, progress);
    if r.is_err() {
        // A half-written file would hold the disk space that made the write fail.
        let _ = fs::remove_file(&tmp);
    }
    r
}

/// Writes `tmp` in full, then renames it to `path`. The space is taken first, so a file that
/// does not fit fails at once instead of after filling the disk.
fn write_new(tmp: &Path, path: &Path, size: u64, progress: &mut impl FnMut(u64)) -> io::Result<()> {
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(tmp)?;
    let len = libc::off_t::try_from(size)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "data size too large"))?;
    // SAFETY: plain syscall on a descriptor we own.
    if unsafe { libc::fallocate(f.as_raw_fd(), 0, 0, len) } != 0 {
        let e = io::Error::last_os_error();
        // A file system without preallocation: the writes below find out.
        if e.raw_os_error() != Some(libc::EOPNOTSUPP) {
            return Err(e);
        }
    }
    const CHUNK: u64 = 1 << 20;
    let mut buf = vec![0u8; CHUNK as usize];
    let mut off = 0;
    while off < size {
        let n = CHUNK.min(size - off) as usize;
        fill_pattern(&mut buf[..n], off);
        f.write_all(&buf[..n])?;
        off += n as u64;
        progress(off);
    }
    f.sync_all()?;
    drop(f);
    fs::rename(tmp, path)
}

/// Reads the whole file once with O_DIRECT in 1 MiB requests, so that the host-side cache
/// under the virtio disk holds all of it before any system is measured: otherwise the first
/// system pays ~1 ms misses the later ones do not. Returns bytes/s achieved.
pub fn warm_host_cache(path: &Path, mut progress: impl FnMut(u64)) -> io::Result<f64> {
    let f = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)?;
    let size = f.metadata()?.len();
    const CHUNK: usize = 1 << 20;
    let mut buf = AlignedBuf::new(CHUNK);
    let start = Instant::now();
    let mut off = 0u64;
    while off < size {
        let n = f.read_at(&mut buf, off)?;
        if n == 0 {
            break;
        }
        off += n as u64;
        progress(off);
    }
    Ok(off as f64 / start.elapsed().as_secs_f64().max(1e-9))
}

/// Evicts the file from the page cache so a kernel baseline starts cold inside its cgroup.
/// This matters twice over with cgroup v1: a page already cached is charged to whoever read it
/// first, so a warm page cache would let the baseline use memory its limit does not count.
/// With `system_wide`, also writes 1 to /proc/sys/vm/drop_caches, which catches pages fadvise
/// cannot (mapped by nobody but still charged elsewhere); returns whether that was permitted.
pub fn drop_page_cache(path: &Path, system_wide: bool) -> io::Result<bool> {
    let f = File::open(path)?;
    // SAFETY: plain syscalls on a valid fd.
    unsafe {
        libc::fdatasync(std::os::fd::AsRawFd::as_raw_fd(&f));
        libc::posix_fadvise(
            std::os::fd::AsRawFd::as_raw_fd(&f),
            0,
            0,
            libc::POSIX_FADV_DONTNEED,
        );
    }
    if !system_wide {
        return Ok(false);
    }
    let dropped = OpenOptions::new()
        .write(true)
        .open("/proc/sys/vm/drop_caches")
        .and_then(|mut d| d.write_all(b"1"))
        .is_ok();
    Ok(dropped)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pattern_is_checkable_by_offset() {
        let mut buf = vec![0u8; 4096];
        fill_pattern(&mut buf, 8192);
        for at in (0..4096).step_by(8) {
            assert!(word_ok(&buf, 8192, at));
        }
        assert_eq!(
            u64::from_le_bytes(buf[8..16].try_into().unwrap()),
            expected_word(8200)
        );
        assert_ne!(expected_word(8200), expected_word(8208));
        assert!(
            !word_ok(&buf, 0, 0),
            "same bytes at another base must not check"
        );
        buf[100] ^= 1;
        assert!(!word_ok(&buf, 8192, 96));
    }

    #[test]
    fn ensure_creates_then_keeps_then_repairs() {
        let dir = std::env::temp_dir().join(format!("ucache-datafile-test-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join("d.dat");
        if filesystem_of(&path) == "tmpfs" {
            fs::remove_dir_all(&dir).ok();
            return; // cannot test on tmpfs; ensure() refuses it by design
        }
        let size = 3 << 20;
        let info = ensure(&path, size, |_| {}).unwrap();
        assert!(info.created);
        assert_eq!(fs::metadata(&path).unwrap().len(), size);
        let f = File::open(&path).unwrap();
        let mut buf = vec![0u8; 4096];
        f.read_exact_at(&mut buf, (2 << 20) + 4096).unwrap();
        assert!((0..4096)
            .step_by(8)
            .all(|at| word_ok(&buf, (2 << 20) + 4096, at)));

        assert!(!ensure(&path, size, |_| {}).unwrap().created);

        // Corrupt the last word: it is among the sampled ones.
        let w = OpenOptions::new().write(true).open(&path).unwrap();
        w.write_all_at(&[0xff; 8], size - 8).unwrap();
        drop(w);
        let info = ensure(&path, size, |_| {}).unwrap();
        assert!(info.created);
        assert!(info.reason.unwrap().contains("wrong contents"));

        assert!(ensure(&path, size * 2, |_| {}).unwrap().created);
        fs::remove_dir_all(&dir).unwrap();
    }
}
