//! What a transparent miss costs in the kernel, path by path, before building one into ucache:
//! the current path (read into staging, `UFFDIO_COPY` into an anonymous region, evict with a
//! batched `process_madvise`) against a zero-copy candidate (read with `O_DIRECT` straight into
//! a memfd page through an unregistered alias, map it into the registered region with
//! `UFFDIO_CONTINUE`, evict with `fallocate(PUNCH_HOLE)`). Single-threaded loop of random 4 KiB
//! reads; a second thread spins in the same process so TLB shootdowns cost what they cost under
//! load. Pages are evicted 64 at a time, scattered, once 8192 are resident.
//!
//! Run: `cargo run --release -p ucache --example install_paths -- FILE [READS]` with FILE on the
//! device to measure (the zram file of `scripts/zram-setup.sh`).

use std::fs::OpenOptions;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

const PAGE: usize = 4096;
const SLOTS: usize = 1 << 16;
const RESIDENT: usize = 8192;
const BATCH: usize = 64;

// The userfaultfd ABI (linux/userfaultfd.h), for this measurement only.
const UFFDIO_API: u64 = 0xC018_AA3F;
const UFFDIO_REGISTER: u64 = 0xC020_AA00;
const UFFDIO_COPY: u64 = 0xC028_AA03;
const UFFDIO_CONTINUE: u64 = 0xC020_AA07;
const FEATURE_MINOR_SHMEM: u64 = 1 << 10;
const MODE_MISSING: u64 = 1 << 0;
const MODE_MINOR: u64 = 1 << 2;

#[repr(C)]
struct Api {
    api: u64,
    features: u64,
    ioctls: u64,
}
#[repr(C)]
struct Register {
    start: u64,
    len: u64,
    mode: u64,
    ioctls: u64,
}
#[repr(C)]
struct Copy {
    dst: u64,
    src: u64,
    len: u64,
    mode: u64,
    copy: i64,
}
#[repr(C)]
struct Continue {
    start: u64,
    len: u64,
    mode: u64,
    mapped: i64,
}

fn check(r: i64, what: &str) {
    if r < 0 {
        panic!("{what}: {}", std::io::Error::last_os_error());
    }
}

/// A userfaultfd with `features`, and `[start, start+len)` registered in `mode`.
fn uffd(features: u64, start: *mut u8, len: usize, mode: u64) -> i32 {
    // SAFETY: plain syscalls and ioctls on structs laid out as the kernel's.
    unsafe {
        let fd = libc::syscall(libc::SYS_userfaultfd, libc::O_CLOEXEC | libc::O_NONBLOCK) as i32;
        check(fd as i64, "userfaultfd");
        let mut api = Api {
            api: 0xAA,
            features,
            ioctls: 0,
        };
        check(libc::ioctl(fd, UFFDIO_API, &mut api) as i64, "UFFDIO_API");
        let mut reg = Register {
            start: start as u64,
            len: len as u64,
            mode,
            ioctls: 0,
        };
        check(
            libc::ioctl(fd, UFFDIO_REGISTER, &mut reg) as i64,
            "UFFDIO_REGISTER",
        );
        fd
    }
}

fn map(len: usize, flags: i32, fd: i32) -> *mut u8 {
    // SAFETY: a fresh mapping; checked below.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            flags | libc::MAP_NORESERVE,
            fd,
            0,
        )
    };
    assert_ne!(
        p,
        libc::MAP_FAILED,
        "mmap: {}",
        std::io::Error::last_os_error()
    );
    p as *mut u8
}

#[derive(Default)]
struct Phases {
    read: Duration,
    install: Duration,
    evict: Duration,
}

impl Phases {
    fn report(&self, name: &str, n: usize) {
        let us = |d: Duration| d.as_secs_f64() * 1e6 / n as f64;
        println!(
            "{name:<44} {:>6.2} µs/page = read {:>5.2} + install {:>5.2} + evict {:>5.2}",
            us(self.read + self.install + self.evict),
            us(self.read),
            us(self.install),
            us(self.evict)
        );
    }
}

/// Random 4 KiB-aligned offsets below `len`, and a scattered order of slots.
struct Plan {
    offsets: Vec<u64>,
    slots: Vec<usize>,
}

fn plan(reads: usize, len: u64) -> Plan {
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let pages = len / PAGE as u64;
    let offsets = (0..reads).map(|_| next() % pages * PAGE as u64).collect();
    let mut slots: Vec<usize> = (0..SLOTS).collect();
    for i in (1..SLOTS).rev() {
        slots.swap(i, next() as usize % (i + 1));
    }
    Plan { offsets, slots }
}

/// The slots to evict after read `k`: the batch that fell `RESIDENT` reads behind.
fn victims(p: &Plan, k: usize) -> Option<&[usize]> {
    let done = k + 1;
    (done >= RESIDENT + BATCH && done.is_multiple_of(BATCH)).then(|| {
        let from = (done - RESIDENT - BATCH) % SLOTS;
        &p.slots[from..from + BATCH]
    })
}

fn current_path(file: i32, p: &Plan, pidfd: i32) -> Phases {
    let region = map(SLOTS * PAGE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1);
    let fd = uffd(0, region, SLOTS * PAGE, MODE_MISSING);
    let staging = map(
        PAGE,
        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
        -1,
    );
    let mut ph = Phases::default();
    for (k, &off) in p.offsets.iter().enumerate() {
        let slot = p.slots[k % SLOTS];
        let t0 = Instant::now();
        // SAFETY: staging is one page of our own memory, aligned for O_DIRECT.
        let n = unsafe { libc::pread(file, staging as *mut libc::c_void, PAGE, off as i64) };
        check(n as i64, "pread");
        let t1 = Instant::now();
        let mut c = Copy {
            dst: region as u64 + (slot * PAGE) as u64,
            src: staging as u64,
            len: PAGE as u64,
            mode: 0,
            copy: 0,
        };
        // SAFETY: the destination page is missing (evicted or never filled) in our region.
        check(
            unsafe { libc::ioctl(fd, UFFDIO_COPY, &mut c) } as i64,
            "UFFDIO_COPY",
        );
        let t2 = Instant::now();
        ph.read += t1 - t0;
        ph.install += t2 - t1;
        if let Some(v) = victims(p, k) {
            let iov: Vec<libc::iovec> = v
                .iter()
                .map(|&s| libc::iovec {
                    // SAFETY: inside the region.
                    iov_base: unsafe { region.add(s * PAGE) } as *mut libc::c_void,
                    iov_len: PAGE,
                })
                .collect();
            // SAFETY: the ranges lie in our region and nothing uses them.
            let r = unsafe {
                libc::syscall(
                    libc::SYS_process_madvise,
                    pidfd,
                    iov.as_ptr(),
                    iov.len(),
                    libc::MADV_DONTNEED,
                    0,
                )
            };
            check(r, "process_madvise");
            ph.evict += t2.elapsed();
        }
    }
    // SAFETY: our mappings and descriptor, no longer used.
    unsafe {
        libc::munmap(region as *mut libc::c_void, SLOTS * PAGE);
        libc::munmap(staging as *mut libc::c_void, PAGE);
        libc::close(fd);
    }
    ph
}

fn zero_copy_path(file: i32, p: &Plan) -> Phases {
    // SAFETY: a new anonymous memory file, sized below.
    let memfd = unsafe { libc::memfd_create(c"ucache-install-paths".as_ptr(), libc::MFD_CLOEXEC) };
    check(memfd as i64, "memfd_create");
    // SAFETY: our descriptor.
    check(
        unsafe { libc::ftruncate(memfd, (SLOTS * PAGE) as i64) } as i64,
        "ftruncate",
    );
    let region = map(SLOTS * PAGE, libc::MAP_SHARED, memfd);
    let alias = map(SLOTS * PAGE, libc::MAP_SHARED, memfd);
    let fd = uffd(FEATURE_MINOR_SHMEM, region, SLOTS * PAGE, MODE_MINOR);
    let mut ph = Phases::default();
    for (k, &off) in p.offsets.iter().enumerate() {
        let slot = p.slots[k % SLOTS];
        let t0 = Instant::now();
        // SAFETY: the alias page is ours; the kernel allocates it in the memfd during the read.
        let n = unsafe {
            libc::pread(
                file,
                alias.add(slot * PAGE) as *mut libc::c_void,
                PAGE,
                off as i64,
            )
        };
        check(n as i64, "pread into the alias");
        let t1 = Instant::now();
        let mut c = Continue {
            start: region as u64 + (slot * PAGE) as u64,
            len: PAGE as u64,
            mode: 0,
            mapped: 0,
        };
        // SAFETY: the page exists in the memfd and is not mapped in the region yet.
        check(
            unsafe { libc::ioctl(fd, UFFDIO_CONTINUE, &mut c) } as i64,
            "UFFDIO_CONTINUE",
        );
        let t2 = Instant::now();
        ph.read += t1 - t0;
        ph.install += t2 - t1;
        if let Some(v) = victims(p, k) {
            for &s in v {
                // SAFETY: a page of our memfd that nothing uses any more.
                let r = unsafe {
                    libc::fallocate(
                        memfd,
                        libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                        (s * PAGE) as i64,
                        PAGE as i64,
                    )
                };
                check(r as i64, "fallocate");
            }
            ph.evict += t2.elapsed();
        }
    }
    // SAFETY: our mappings and descriptors, no longer used.
    unsafe {
        libc::munmap(region as *mut libc::c_void, SLOTS * PAGE);
        libc::munmap(alias as *mut libc::c_void, SLOTS * PAGE);
        libc::close(fd);
        libc::close(memfd);
    }
    ph
}

fn main() {
    let mut args = std::env::args().skip(1);
    let path = args.next().expect("usage: install_paths FILE [READS]");
    let reads: usize = args.next().map_or(200_000, |s| s.parse().expect("READS"));
    let f = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(&path)
        .expect("open FILE with O_DIRECT");
    let len = f.metadata().expect("stat").len();
    assert!(len >= PAGE as u64, "FILE is empty");
    let p = plan(reads, len);
    // SAFETY: plain syscall.
    let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, libc::getpid(), 0) } as i32;
    check(pidfd as i64, "pidfd_open");
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                std::hint::spin_loop();
            }
        });
        for round in 1..=2 {
            println!("round {round}, {reads} random 4 KiB reads of {path}:");
            current_path(f.as_raw_fd(), &p, pidfd)
                .report("staging + UFFDIO_COPY, process_madvise", reads);
            zero_copy_path(f.as_raw_fd(), &p)
                .report("memfd alias + UFFDIO_CONTINUE, punch hole", reads);
        }
        stop.store(true, Ordering::Relaxed);
    });
}
