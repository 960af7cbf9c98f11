//! How `ucache bench` fails: at once and cleanly on bad durations and output paths, without a
//! half-written data file left on a full disk, and without hanging when its worker cannot
//! start its threads.

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// O_DIRECT needs a real file system; /tmp may be tmpfs.
fn dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("ucache-bench-failures")
        .tempdir_in("/var/tmp")
        .unwrap()
}

fn ucache() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ucache"))
}

/// A short raw-psync bench over a 1 MiB file in `d`, with `extra` arguments.
fn short_bench(d: &Path, extra: &[&str]) -> Output {
    ucache()
        .args(["bench", "lookup", "--data", "1MiB", "--threads", "1"])
        .args(["--reps", "1", "--systems", "raw-psync"])
        .arg("--file")
        .arg(d.join("data.dat"))
        .arg("--plot")
        .arg(d.join("p.svg"))
        .args(extra)
        .env("RUST_BACKTRACE", "0")
        .stdin(Stdio::null())
        .output()
        .expect("run ucache")
}

/// Waits for `child` at most `limit`; kills it (and returns None) if it is still running.
fn wait_at_most(
    child: &mut std::process::Child,
    limit: Duration,
) -> Option<std::process::ExitStatus> {
    let start = Instant::now();
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return Some(st);
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A data file whose write fails part way (here a file-size limit stands in for a full disk)
/// leaves no half-written `<file>.tmp` behind to keep the disk full.
#[test]
fn a_failed_data_file_write_removes_its_partial_file() {
    let d = dir();
    let mut cmd = ucache();
    cmd.args([
        "bench",
        "lookup",
        "--data",
        "16MiB",
        "--systems",
        "raw-psync",
    ])
    .args(["--seconds", "0.2", "--warmup", "0", "--reps", "1"])
    .arg("--file")
    .arg(d.path().join("data.dat"))
    .stdin(Stdio::null());
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            // Writes past 4 MiB fail with EFBIG, as they would with ENOSPC on a full disk.
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            let lim = libc::rlimit {
                rlim_cur: 4 << 20,
                rlim_max: 4 << 20,
            };
            if libc::setrlimit(libc::RLIMIT_FSIZE, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let out = cmd.output().expect("run ucache");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the write cannot succeed: {stderr}");
    let tmp = d.path().join("data.tmp");
    let left = std::fs::metadata(&tmp).map(|m| m.len()).ok();
    assert_eq!(
        left,
        None,
        "a failed data-file write left {} behind ({left:?} bytes); stderr: {stderr}",
        tmp.display()
    );
}

/// Nor does a write that fails only at the end: `--file` naming a directory fails the rename
/// over it.
#[test]
fn a_data_file_that_cannot_be_renamed_into_place_leaves_nothing() {
    let d = dir();
    let target = d.path().join("adir");
    std::fs::create_dir(&target).unwrap();
    let out = ucache()
        .args([
            "bench",
            "lookup",
            "--data",
            "1MiB",
            "--systems",
            "raw-psync",
        ])
        .arg("--file")
        .arg(&target)
        .stdin(Stdio::null())
        .output()
        .expect("run ucache");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    let tmp = d.path().join("adir.tmp");
    assert!(
        !tmp.exists(),
        "{} was left behind after: {stderr}",
        tmp.display()
    );
}

/// `--seconds inf`, `--warmup inf` or `--seconds 1e20` are refused up front, not a panic where
/// a deadline is computed from them.
#[test]
fn non_finite_or_huge_durations_are_refused() {
    let d = dir();
    for extra in [
        ["--seconds", "inf", "--warmup", "0"],
        ["--seconds", "0.2", "--warmup", "inf"],
        ["--seconds", "1e20", "--warmup", "0"],
    ] {
        let out = short_bench(d.path(), &extra);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !stderr.contains("panicked") && out.status.code() == Some(1),
            "{extra:?}: expected a clean error (exit 1), got {} with stderr:\n{stderr}",
            out.status
        );
    }
}

/// A worker that cannot start all its threads (`--threads` beyond a process or memory limit)
/// stops the ones it started and fails, instead of waiting on them until the parent's timeout.
/// Here 1 GiB thread stacks under a 6 GiB address-space limit let a few threads start and make
/// the next spawn fail.
#[test]
fn a_worker_that_cannot_start_its_threads_fails_promptly() {
    let d = dir();
    let file = d.path().join("zeros.dat");
    // Contents do not matter: the run is about starting threads.
    std::fs::write(&file, vec![0u8; 1 << 20]).unwrap();
    let mut cmd = ucache();
    cmd.arg("bench-worker")
        .args(["--system", "raw-psync", "--workload", "lookup"])
        .arg("--file")
        .arg(&file)
        .args(["--data-bytes", "1048576", "--buffer-size", "4096"])
        .args(["--memory-bytes", "1048576", "--threads", "64"])
        .args(["--seconds", "1", "--warmup", "0", "--store", "file"])
        .env("RUST_MIN_STACK", (1u64 << 30).to_string())
        .env("RUST_BACKTRACE", "0")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            let lim = libc::rlimit {
                rlim_cur: 6 << 30,
                rlim_max: 6 << 30,
            };
            if libc::setrlimit(libc::RLIMIT_AS, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().expect("run worker");
    // A watchdog far above the 1 s run: the bug was a worker that never ended.
    let status = wait_at_most(&mut child, Duration::from_secs(300));
    let mut stderr = String::new();
    if let Some(mut e) = child.stderr.take() {
        use std::io::Read;
        let _ = e.read_to_string(&mut stderr);
    }
    assert!(
        status.is_some(),
        "worker still running 300 s after a 1 s run (killed); stderr:\n{stderr}"
    );
}

/// `--json` into a directory that does not exist is refused before any run, not after minutes
/// of measurement whose results it would then lose.
#[test]
fn an_unwritable_json_path_is_refused_before_running() {
    let d = dir();
    let json = d.path().join("missing-dir").join("r.json");
    let out = short_bench(
        d.path(),
        &[
            "--seconds",
            "0.2",
            "--warmup",
            "0",
            "--json",
            json.to_str().unwrap(),
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        !stderr.contains("rep 1 raw-psync"),
        "the benchmark ran before the --json path was found unwritable:\n{stderr}"
    );
}

/// A budget below what the worker process itself needs gets it killed in its memory cgroup;
/// the error says so, instead of a bare "signal 9". Skipped where no cgroup can be made.
#[test]
fn a_budget_the_process_cannot_live_in_is_reported_as_such() {
    let d = dir();
    let out = short_bench(
        d.path(),
        &[
            "--memory",
            "4KiB",
            "--systems",
            "mmap",
            "--seconds",
            "0.2",
            "--warmup",
            "0",
        ],
    );
    let text = String::from_utf8_lossy(&out.stdout) + String::from_utf8_lossy(&out.stderr);
    if !text.contains("cgroup for mmap/pread: v") {
        eprintln!("no memory cgroup here; skipping:\n{text}");
        return;
    }
    assert!(!out.status.success(), "{text}");
    assert!(text.contains("OOM killer"), "{text}");
}

/// `ucache coldread` refuses unknown systems and stores, zero repetitions and empty sizes
/// before it writes its data file or needs root, and names what was wrong.
#[test]
fn coldread_refuses_bad_arguments_before_writing_its_data_file() {
    let d = dir();
    let file = d.path().join("cold.dat");
    for (extra, says) in [
        (
            &["--data", "1MiB", "--systems", "scan:file"][..],
            "unknown system 'scan'",
        ),
        (
            &["--data", "1MiB", "--systems", "read:s3"][..],
            "unknown store 's3'",
        ),
        (
            &["--data", "1MiB", "--reps", "0"][..],
            "--reps must be at least 1",
        ),
        (
            &["--data", "1MiB", "--memory", "0"][..],
            "more than 0 bytes",
        ),
        (&["--data", "0"][..], "more than 0 bytes"),
    ] {
        let out = ucache()
            .arg("coldread")
            .arg("--file")
            .arg(&file)
            .args(extra)
            .env("RUST_BACKTRACE", "0")
            .stdin(Stdio::null())
            .output()
            .expect("run ucache");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{extra:?} was accepted");
        assert!(err.contains(says), "{extra:?}: stderr was {err}");
        assert!(!err.contains("panicked"), "{extra:?}: {err}");
        assert!(!file.exists(), "{extra:?} wrote the data file first");
    }
    let out = ucache()
        .args(["coldread", "--data", "not-a-size"])
        .stdin(Stdio::null())
        .output()
        .expect("run ucache");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--data"));
}
