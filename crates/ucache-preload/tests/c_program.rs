//! tests/c/prog.c run plain and under the shim: map reads, writes and msync, pread/pwrite
//! mixed with map accesses, kernel-mode accesses, fork, exec, private mappings, truncation
//! under a mapping, and bad environment values.

mod common;

use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use tempfile::TempDir;

use common::*;

/// What each test works in: a directory with tests/c/prog.c compiled in it, the data file
/// prog uses there, and the glob that has the shim cache that file.
struct Setup {
    /// Kept for its drop, which removes the directory.
    _dir: TempDir,
    prog: PathBuf,
    file: PathBuf,
    glob: String,
}

impl Setup {
    fn new() -> Setup {
        let dir = tempfile::tempdir().unwrap();
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/prog.c");
        let prog = compile(&src, dir.path(), "prog", &[]);
        let file = dir.path().join("data.dat");
        let glob = format!("{}/*.dat", dir.path().display());
        Setup {
            _dir: dir,
            prog,
            file,
            glob,
        }
    }

    /// prog in `mode` on the data file, told whether to expect its mapping to be the shim's.
    fn cmd(&self, mode: &str, expect_shim: &str) -> Command {
        let mut c = Command::new(&self.prog);
        c.arg(mode).arg(&self.file).env("EXPECT_SHIM", expect_shim);
        c
    }

    /// [`Setup::cmd`] under the shim, with a budget of `memory`.
    fn shimmed(&self, mode: &str, expect_shim: &str, memory: &str) -> Command {
        under_shim(self.cmd(mode, expect_shim), &self.glob, memory)
    }
}

#[test]
fn modes_give_the_same_results_plain_and_through_the_shim() {
    let s = Setup::new();
    for mode in ["read", "write", "mix", "fork", "private", "exec"] {
        let plain = ok(&run(s.cmd(mode, "0")), &format!("{mode} plain"));
        // 256 KiB for 4 MiB of data: every mode runs out of memory and evicts.
        let out = run(s.shimmed(mode, "1", "256KiB"));
        let shim = ok(&out, &format!("{mode} through the shim"));
        assert_eq!(plain, shim, "{mode}");
        // (exec replaces the image before the statistics are printed: prog checked
        // /proc/self/maps itself.)
        if mode != "exec" {
            assert!(
                shim_mappings(&out.stderr) > 0,
                "{mode}: the shim mapped nothing"
            );
            assert!(
                direct_read_bytes(&out.stderr) > 0,
                "{mode}: no read went around the page cache"
            );
        }
    }
}

/// `UCACHE_DIRECT=0`: every read goes through the page cache, with the same results.
#[test]
fn reads_through_the_page_cache_when_direct_reads_are_off() {
    let s = Setup::new();
    for mode in ["read", "mix", "fork"] {
        let plain = ok(&run(s.cmd(mode, "0")), &format!("{mode} plain"));
        let mut c = s.shimmed(mode, "1", "256KiB");
        c.env("UCACHE_DIRECT", "0");
        let out = run(c);
        assert_eq!(plain, ok(&out, &format!("{mode}, buffered")), "{mode}");
        assert!(
            shim_mappings(&out.stderr) > 0,
            "{mode}: the shim mapped nothing"
        );
        assert_eq!(direct_read_bytes(&out.stderr), 0, "{mode}");
    }
}

/// `UCACHE_FILE_VIEW=1`: read-only mappings are views of their files (the file's own pages,
/// revealed and hidden by ucache), with the same results. prog's own check that a shim
/// mapping is anonymous does not apply (a view is the file), so the statistics tell that the
/// shim mapped it: and in `read` mode nothing was read into ucache's memory.
#[test]
fn file_views_give_the_same_results() {
    let s = Setup::new();
    for mode in ["read", "mix", "fork", "private"] {
        let plain = ok(&run(s.cmd(mode, "0")), &format!("{mode} plain"));
        // 2 MiB for 4 MiB of data, in 1 MiB buffers: the views evict.
        let mut c = s.shimmed(mode, "view", "2MiB");
        c.env("UCACHE_FILE_VIEW", "1");
        let out = run(c);
        assert_eq!(plain, ok(&out, &format!("{mode} as a view")), "{mode}");
        assert!(
            shim_mappings(&out.stderr) > 0,
            "{mode}: the shim mapped nothing"
        );
        if mode == "read" {
            assert_eq!(
                direct_read_bytes(&out.stderr),
                0,
                "a view reads nothing itself"
            );
        }
    }
}

#[test]
fn other_policies_and_buffer_sizes() {
    let s = Setup::new();
    for (policy, bs) in [("s3fifo", "4KiB"), ("lru", "16KiB"), ("2q", "64KiB")] {
        for mode in ["read", "mix"] {
            let mut c = s.shimmed(mode, "1", "1MiB");
            c.env("UCACHE_POLICY", policy).env("UCACHE_BUFFER_SIZE", bs);
            ok(&run(c), &format!("{mode} with {policy}, {bs}"));
        }
    }
}

#[test]
fn standard_streams_lock_again_when_the_program_starts_threads() {
    let s = Setup::new();
    let sorted = |out: String| {
        let mut v: Vec<String> = out.lines().map(str::to_owned).collect();
        v.sort();
        v
    };
    for mode in ["stdio", "stdio-c11"] {
        // prog checks stdout's locking itself: unlocked through the shim until its own
        // thread starts, locked after; then two threads print at once.
        let plain = sorted(ok(&run(s.cmd(mode, "0")), &format!("{mode} plain")));
        let out = run(s.shimmed(mode, "1", "256KiB"));
        let shim = sorted(ok(&out, &format!("{mode} through the shim")));
        assert!(
            shim_mappings(&out.stderr) > 0,
            "{mode}: the shim mapped nothing"
        );
        assert_eq!(plain.len(), 2 * 20000 + 1, "{mode}: lines printed plain");
        assert!(plain == shim, "{mode}: torn or lost lines through the shim");
    }
}

#[test]
fn truncation_under_a_mapping_raises_sigbus() {
    let s = Setup::new();
    let plain = run(s.cmd("truncate", "0"));
    let shim = run(s.shimmed("truncate", "1", "256KiB"));
    for (what, out) in [("plain", &plain), ("shim", &shim)] {
        assert_eq!(
            out.status.signal(),
            Some(libc::SIGBUS),
            "{what}: {:?}\n{}",
            out.status,
            text(&out.stderr)
        );
        assert!(
            text(&out.stderr).contains("touching past the end"),
            "{what}"
        );
    }
}

#[test]
fn bad_environment_values_leave_mappings_to_the_kernel() {
    let s = Setup::new();
    let cases: &[(&str, &str)] = &[
        ("UCACHE_MEMORY", "lots"),
        ("UCACHE_POLICY", "nope"),
        ("UCACHE_FILES", ""),
        ("UCACHE_FILES", "*.db::*.dat"),
        ("UCACHE_BUFFER_SIZE", "3000"),
    ];
    for &(var, value) in cases {
        let mut c = s.shimmed("read", "0", "1MiB");
        c.env(var, value);
        let out = run(c);
        ok(&out, &format!("{var}={value}"));
        let err = text(&out.stderr);
        let msgs: Vec<_> = err
            .lines()
            .filter(|l| l.starts_with("ucache-preload:"))
            .collect();
        assert_eq!(msgs.len(), 1, "{var}={value}: {err}");
        assert!(
            msgs[0].contains(var) && msgs[0].contains("kernel"),
            "{}",
            msgs[0]
        );
    }
}

#[test]
fn a_refused_mapping_gets_a_kernel_mapping_and_a_message() {
    let s = Setup::new();
    // Five descriptors: the program's file is 3, the shim's reopened one 4, and the
    // userfaultfd ucache needs for the mapping finds none left.
    let mut c = s.shimmed("read", "0", "1MiB");
    // SAFETY: setrlimit is async-signal-safe; it runs in the child before exec.
    unsafe {
        c.pre_exec(|| {
            let r = libc::rlimit {
                rlim_cur: 5,
                rlim_max: 5,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &r) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let out = run(c);
    ok(&out, "read with no descriptor to spare");
    let err = text(&out.stderr);
    assert!(
        err.contains("refused by ucache") && err.contains("kernel mapping"),
        "{err}"
    );
}
