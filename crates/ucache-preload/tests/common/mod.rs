//! What the shim's tests share: finding the library, running a program plain and under the
//! shim with a watchdog, and skipping (locally) or failing (CI) when a program is missing.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// How long one program may run before the watchdog kills it (a hang, not a slow run).
pub const WATCHDOG: Duration = Duration::from_secs(300);

/// The shim built for this test run (`cargo test` builds the cdylib next to the test's
/// directory); built here if it is missing.
pub fn shim() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap().parent().unwrap();
    let so = dir.join("libucache_preload.so");
    static BUILT: std::sync::Once = std::sync::Once::new();
    // `cargo test` does not always rebuild a cdylib its tests do not link: build it once per
    // test binary (a no-op when it is current).
    BUILT.call_once(|| {
        let release = dir.file_name().is_some_and(|n| n == "release");
        let mut c = Command::new(env!("CARGO"));
        c.args(["build", "-p", "ucache-preload"]);
        if release {
            c.arg("--release");
        }
        assert!(c.status().unwrap().success(), "building the shim failed");
    });
    assert!(so.exists(), "{} missing", so.display());
    so
}

/// Whether `program` is on PATH; if not, fails under CI and skips (returns false) locally.
pub fn have(program: &str, package: &str) -> bool {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !found {
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("{program} is missing: .ci/run installs Debian's {package}");
        }
        eprintln!("note: skipping, {program} is missing (apt-get install -y {package})");
    }
    found
}

/// Runs `cmd` to completion, killing it after [`WATCHDOG`].
pub fn run(mut cmd: Command) -> Output {
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let desc = format!("{cmd:?}");
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("{desc}: {e}"));
    // Drain the pipes on threads so a chatty program cannot block on them.
    let mut so = child.stdout.take().unwrap();
    let mut se = child.stderr.take().unwrap();
    let t1 = std::thread::spawn(move || {
        let mut v = Vec::new();
        std::io::Read::read_to_end(&mut so, &mut v).ok();
        v
    });
    let t2 = std::thread::spawn(move || {
        let mut v = Vec::new();
        std::io::Read::read_to_end(&mut se, &mut v).ok();
        v
    });
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > WATCHDOG {
            child.kill().ok();
            let _ = child.wait();
            panic!("watchdog: {desc} still running after {WATCHDOG:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Output {
        status,
        stdout: t1.join().unwrap(),
        stderr: t2.join().unwrap(),
    }
}

/// `cmd` under the shim, caching files matching `files` in `memory`, with statistics.
pub fn under_shim(mut cmd: Command, files: &str, memory: &str) -> Command {
    cmd.env("LD_PRELOAD", shim())
        .env("UCACHE_FILES", files)
        .env("UCACHE_MEMORY", memory)
        .env("UCACHE_STATS", "1");
    cmd
}

/// The number of mappings the shim made, from its `UCACHE_STATS` line (0 if none).
pub fn shim_mappings(stderr: &[u8]) -> u64 {
    stats_sum(stderr, "stats: mappings ", ',')
}

/// The direct-read bytes the shim's statistics line reports (summed over its processes).
pub fn direct_read_bytes(stderr: &[u8]) -> u64 {
    stats_sum(stderr, "direct-read bytes ", ';')
}

/// The failed store reads the shim's statistics report (summed over its processes).
pub fn read_failures(stderr: &[u8]) -> u64 {
    stats_sum(stderr, "read_failures: ", ',')
}

/// The number between `key` and `end` on each statistics line of the shim, summed.
fn stats_sum(stderr: &[u8], key: &str, end: char) -> u64 {
    let s = String::from_utf8_lossy(stderr);
    s.lines()
        .filter(|l| l.starts_with("ucache-preload: stats: mappings "))
        .filter_map(|l| l.split(key).nth(1))
        .filter_map(|r| r.split(end).next()?.trim().parse::<u64>().ok())
        .sum()
}

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Asserts success and returns stdout.
pub fn ok(out: &Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what} failed: {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

/// Compiles a C file with `cc` into `dir`.
pub fn compile(src: &Path, dir: &Path, name: &str, extra: &[&str]) -> PathBuf {
    let out = dir.join(name);
    let st = Command::new("cc")
        .args(["-O1", "-Wall", "-Wextra", "-o"])
        .arg(&out)
        .arg(src)
        .args(extra)
        .status()
        .expect("cc");
    assert!(st.success(), "compiling {} failed", src.display());
    out
}
