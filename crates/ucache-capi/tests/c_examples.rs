//! Builds the C examples in examples/c against include/ucache.h and the library this test
//! was built with, runs each, and checks its exit status and output; then runs them under a
//! memory checker: valgrind's memcheck where installed, and AddressSanitizer for the
//! transparent mappings (valgrind does not implement userfaultfd, so such a mapping could not
//! even be made under it: the examples skip theirs there). No test here measures time: the watchdog only ends hangs.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// How long one example may run before it is taken for hung.
const WATCHDOG: Duration = Duration::from_secs(300);

/// Flags a Rust static library needs from the system (`rustc --print native-static-libs`).
const STATIC_LIBS: &[&str] = &[
    "-lgcc_s",
    "-lutil",
    "-lrt",
    "-lpthread",
    "-lm",
    "-ldl",
    "-lc",
];

fn manifest_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The directory holding libucache.so and libucache.a of this build: the profile directory
/// above this test's own executable (target/<profile>/deps/c_examples-*), which follows
/// CARGO_TARGET_DIR and the profile.
fn lib_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>");
    assert!(
        dir.join("libucache.so").exists() && dir.join("libucache.a").exists(),
        "libucache.so/.a not found in {}: build with `cargo build -p ucache-capi`",
        dir.display()
    );
    dir.to_path_buf()
}

fn cc() -> String {
    std::env::var("CC").unwrap_or_else(|_| "cc".into())
}

/// Compiles examples/c/`name`.c into `out`, against the shared library (or the static one),
/// with extra flags.
fn compile(name: &str, out: &Path, static_lib: bool, extra: &[&str]) -> Result<(), String> {
    let dir = manifest_dir();
    let lib = lib_dir();
    let mut cmd = Command::new(cc());
    cmd.args(["-std=c11", "-g", "-Wall", "-Wextra", "-Werror", "-pthread"])
        .args(extra)
        .arg("-I")
        .arg(dir.join("include"))
        .arg(dir.join("examples/c").join(format!("{name}.c")))
        .arg("-o")
        .arg(out);
    if static_lib {
        cmd.arg(lib.join("libucache.a")).args(STATIC_LIBS);
    } else {
        cmd.arg("-L")
            .arg(&lib)
            .arg("-lucache")
            .arg(format!("-Wl,-rpath,{}", lib.display()));
    }
    let o = cmd.output().map_err(|e| format!("running {}: {e}", cc()))?;
    if o.status.success() {
        Ok(())
    } else {
        Err(format!(
            "compiling {name}.c failed:\n{}",
            String::from_utf8_lossy(&o.stderr)
        ))
    }
}

/// Runs a command to completion, killing it if it outlives the watchdog.
fn run(mut cmd: Command) -> Output {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let start = Instant::now();
    while child.try_wait().expect("wait").is_none() {
        if start.elapsed() > WATCHDOG {
            let _ = child.kill();
            let o = child.wait_with_output().expect("wait");
            panic!(
                "{cmd:?} hung (killed after {WATCHDOG:?}); stderr:\n{}",
                String::from_utf8_lossy(&o.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("wait")
}

/// Runs `cmd` and checks that it succeeded and printed "`name`: ok".
fn expect_ok(name: &str, how: &str, cmd: Command) {
    let o = run(cmd);
    let stdout = String::from_utf8_lossy(&o.stdout);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        o.status.success() && stdout.contains(&format!("{name}: ok")),
        "{name} ({how}) failed with {}:\nstdout:\n{stdout}\nstderr:\n{stderr}",
        o.status
    );
    println!("{name} ({how}): {}", stdout.trim());
}

/// Compiles examples/c/`name`.c into `dir` (as [`compile`] does) and runs it, checking its
/// output ([`expect_ok`]); returns the executable. Fails only if it does not compile.
fn build_and_run(
    name: &str,
    how: &str,
    dir: &Path,
    static_lib: bool,
    extra: &[&str],
) -> Result<PathBuf, String> {
    let exe = dir.join(format!("{name}-{how}"));
    compile(name, &exe, static_lib, extra)?;
    expect_ok(name, how, Command::new(&exe));
    Ok(exe)
}

/// Whether `program` runs (`program --version`).
fn on_path(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Builds and runs one example: plain, then under valgrind (unless `valgrind` is false), and
/// under AddressSanitizer when `asan` is set.
fn example(name: &str, valgrind: bool, asan: bool) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let exe = build_and_run(name, "plain", tmp.path(), false, &[]).unwrap();

    if valgrind {
        if on_path("valgrind") {
            let mut cmd = Command::new("valgrind");
            // Only definite leaks count: Rust's standard library keeps some allocations
            // (thread handles, hash tables) through pointers into them, which memcheck calls
            // "possibly lost".
            cmd.args([
                "-q",
                "--error-exitcode=1",
                "--leak-check=full",
                "--errors-for-leak-kinds=definite",
            ])
            .arg(&exe)
            // valgrind does not implement userfaultfd: examples skip their transparent
            // mappings under it (and run them under AddressSanitizer).
            .env("UCACHE_EXAMPLE_NO_USERFAULTFD", "1");
            expect_ok(name, "valgrind", cmd);
        } else {
            println!("{name}: valgrind not on PATH, memcheck run skipped");
        }
    }
    if asan {
        let flags = ["-fsanitize=address"];
        if let Err(e) = build_and_run(name, "AddressSanitizer", tmp.path(), false, &flags) {
            println!("{name}: no AddressSanitizer build ({e}), skipped");
        }
    }
}

#[test]
fn pin() {
    example("pin", true, false);
}

#[test]
fn transparent() {
    // Under valgrind the userfaultfd system call fails with ENOSYS: AddressSanitizer instead.
    example("transparent", false, true);
}

#[test]
fn policy() {
    example("policy", true, false);
}

#[test]
fn store() {
    // Its transparent part (a fault hook that retries a failed read) runs under ASan only.
    example("store", true, true);
}

#[test]
fn bad_input() {
    example("bad_input", true, false);
}

/// The static library links on its own too (with the system libraries Rust needs).
#[test]
fn pin_static() {
    let tmp = tempfile::tempdir().expect("tempdir");
    build_and_run("pin", "static", tmp.path(), true, &[]).unwrap();
}

/// scripts/install-c.sh lays out a prefix with which `cc prog.c $(pkg-config --cflags --libs
/// ucache)` builds a program that runs (installing this build's libraries, not a release).
#[test]
fn install_and_pkg_config() {
    if !on_path("pkg-config") {
        println!("pkg-config not on PATH: install check skipped");
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let prefix = tmp.path().join("prefix");
    let script = manifest_dir().join("../../scripts/install-c.sh");
    let mut install = Command::new("bash");
    install
        .arg(&script)
        .arg(&prefix)
        .env("UCACHE_INSTALL_FROM", lib_dir());
    let o = run(install);
    assert!(
        o.status.success(),
        "install-c.sh failed:\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let flags = Command::new("pkg-config")
        .args(["--cflags", "--libs", "ucache"])
        .env("PKG_CONFIG_PATH", prefix.join("lib/pkgconfig"))
        .output()
        .expect("pkg-config");
    assert!(flags.status.success(), "pkg-config does not find ucache");
    let flags = String::from_utf8(flags.stdout).unwrap();
    let exe = tmp.path().join("policy");
    let examples = manifest_dir().join("examples/c");
    let o = Command::new(cc())
        .arg(examples.join("policy.c"))
        .arg("-I")
        .arg(&examples)
        .args(flags.split_whitespace())
        .arg("-pthread")
        .arg("-o")
        .arg(&exe)
        .output()
        .expect("cc");
    assert!(
        o.status.success(),
        "cc with pkg-config flags failed:\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    expect_ok("policy", "installed", Command::new(&exe));
}
