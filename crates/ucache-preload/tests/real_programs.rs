//! Programs nobody here wrote, run plain and through the shim on the same data, with the same
//! results: the `sqlite3` CLI in mmap mode, LMDB's tools (`mdb_load`, `mdb_stat`,
//! `mdb_dump`) and `rg --mmap`. Small data, a budget far below it, so the shim evicts.
//! A missing program fails under CI (CI=true) and skips locally.

mod common;

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;

use common::*;

const BUDGET: &str = "512KiB";

fn sql_setup() -> String {
    let mut s = String::from(
        "CREATE TABLE kv(k INTEGER PRIMARY KEY, v TEXT, n INTEGER);\n\
         CREATE INDEX kv_n ON kv(n);\n\
         WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c WHERE x < 30000)\n\
         INSERT INTO kv SELECT x, printf('value-%d-%s', x, substr(hex(x*2654435761), 1, 40)), \
         (x*7919) % 1000 FROM c;\n",
    );
    s.push_str("CREATE TABLE other(a INTEGER, b BLOB);\n");
    s.push_str(
        "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c WHERE x < 2000)\n\
         INSERT INTO other SELECT x, zeroblob(500 + x % 700) FROM c;\n",
    );
    s
}

fn sql_workload() -> String {
    let mut s = String::from("PRAGMA mmap_size=268435456;\nPRAGMA mmap_size;\n");
    s.push_str("SELECT count(*), sum(n), sum(length(v)) FROM kv;\n");
    for i in 0..50 {
        let k = (i * 7907) % 30000 + 1;
        writeln!(s, "SELECT k, v, n FROM kv WHERE k = {k};").unwrap();
    }
    s.push_str("SELECT n, count(*) FROM kv WHERE n < 20 GROUP BY n ORDER BY n;\n");
    s.push_str("BEGIN;\n");
    s.push_str(
        "WITH RECURSIVE c(x) AS (SELECT 30001 UNION ALL SELECT x+1 FROM c WHERE x < 45000)\n\
         INSERT INTO kv SELECT x, printf('new-%d', x), x % 1000 FROM c;\n",
    );
    s.push_str("UPDATE kv SET v = v || '-updated' WHERE k % 97 = 0;\n");
    s.push_str("DELETE FROM kv WHERE k % 101 = 0;\n");
    s.push_str("COMMIT;\n");
    s.push_str("UPDATE other SET b = zeroblob(1500) WHERE a % 3 = 0;\n");
    s.push_str("SELECT count(*), sum(n), sum(length(v)), max(k) FROM kv;\n");
    s.push_str("SELECT sum(length(b)) FROM other;\n");
    s.push_str("SELECT k, v FROM kv WHERE k IN (97, 194, 30500, 44999) ORDER BY k;\n");
    s.push_str("PRAGMA integrity_check;\n");
    s
}

/// `cmd` as it is (`glob` `None`), or under the shim caching the files that match `glob`.
fn through_shim(cmd: Command, glob: Option<&str>) -> Command {
    match glob {
        Some(glob) => under_shim(cmd, glob, BUDGET),
        None => cmd,
    }
}

/// Runs `cmd` as [`through_shim`] makes it and returns its stdout, checking that it succeeded
/// and, through the shim, that the shim mapped something and that no store read failed (a
/// readahead window past a file's end did, once: LMDB maps more than its file holds).
fn run_ok(cmd: Command, glob: Option<&str>, what: &str) -> String {
    let out = run(through_shim(cmd, glob));
    let stdout = ok(&out, what);
    if glob.is_some() {
        assert!(
            shim_mappings(&out.stderr) > 0,
            "{what}: the shim mapped nothing: {}",
            text(&out.stderr)
        );
        assert_eq!(
            read_failures(&out.stderr),
            0,
            "{what}: store reads failed: {}",
            text(&out.stderr)
        );
    }
    stdout
}

fn sqlite(db: &Path, sql: &str) -> Command {
    let mut c = Command::new("sqlite3");
    c.arg("-batch").arg(db).arg(sql);
    c
}

#[test]
fn sqlite3_in_mmap_mode() {
    if !have("sqlite3", "sqlite3") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("plain.db");
    let b = dir.path().join("shim.db");
    run_ok(sqlite(&a, &sql_setup()), None, "sqlite3 setup");
    std::fs::copy(&a, &b).unwrap();
    let glob = format!("{}/shim.db", dir.path().display());
    let plain = run_ok(sqlite(&a, &sql_workload()), None, "sqlite3 plain");
    let shim = run_ok(
        sqlite(&b, &sql_workload()),
        Some(&glob),
        "sqlite3 through the shim",
    );
    assert!(
        plain.contains("\nok\n") || plain.ends_with("ok\n"),
        "{plain}"
    );
    assert_eq!(plain, shim);
    // The files hold the same rows afterwards (read plain).
    let dump = |db: &Path| run_ok(sqlite(db, ".dump"), None, "sqlite3 .dump");
    assert_eq!(dump(&a), dump(&b));
}

fn lmdb_input(entries: usize) -> String {
    let mut s = String::from("VERSION=3\nformat=print\ntype=btree\nmapsize=67108864\nHEADER=END\n");
    for i in 0..entries {
        let pad = "x".repeat(i % 300);
        writeln!(s, " key{i:07}\n value-{i}-{pad}").unwrap();
    }
    s.push_str("DATA=END\n");
    s
}

#[test]
fn lmdb_tools() {
    if !have("mdb_load", "lmdb-utils") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("input.txt");
    std::fs::write(&input, lmdb_input(20_000)).unwrap();
    let glob = format!("{}/shim/*", dir.path().display());
    let mut results = Vec::new();
    for name in ["plain", "shim"] {
        let env = dir.path().join(name);
        std::fs::create_dir(&env).unwrap();
        let shell = format!(
            "mdb_load -f {input} {env} && mdb_stat {env} && mdb_dump -p {env} && \
             mdb_load -T -f /dev/stdin {env} <<'EOF'\n key0000005\n replaced\n key9999999\n added\nEOF\n\
             mdb_dump -p {env} | tail -n 8 && mdb_stat -e {env} | grep -v -i 'map address'",
            input = input.display(),
            env = env.display(),
        );
        let mut c = Command::new("sh");
        c.args(["-c", &shell]);
        let glob = (name == "shim").then_some(glob.as_str());
        let stdout = run_ok(c, glob, &format!("lmdb tools {name}"));
        results.push(stdout.replace(&env.display().to_string(), "ENV"));
    }
    assert!(results[0].contains("Entries: 20001") || results[0].contains("Entries: 20000"));
    assert_eq!(results[0], results[1]);
}

#[test]
fn ripgrep_with_mmap() {
    if !have("rg", "ripgrep") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let tree = dir.path().join("tree");
    // About 6 MiB of text in 120 files, some large.
    let words = [
        "alpha", "beta", "gamma", "needle", "haystack", "omega", "delta",
    ];
    let mut x: u64 = 1;
    for d in 0..6 {
        let sub = tree.join(format!("d{d}"));
        std::fs::create_dir_all(&sub).unwrap();
        for f in 0..20 {
            let mut s = String::new();
            let lines = 50 + (f * f * 37 + d * 11) % 2000;
            for _ in 0..lines {
                for _ in 0..8 {
                    x = x
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    s.push_str(words[(x >> 33) as usize % words.len()]);
                    s.push(' ');
                }
                s.push('\n');
            }
            std::fs::write(sub.join(format!("f{f}.txt")), s).unwrap();
        }
    }
    let glob = format!("{}/*", tree.display());
    let args = [
        "--mmap",
        "--no-config",
        "--sort",
        "path",
        "-n",
        "-c",
        "needle",
    ];
    let mut runs = Vec::new();
    // Plain, through the shim, through the shim with its readahead read on the faulting
    // threads, and with the files mapped as views.
    for (glob, inline, view) in [
        (None, "0", "0"),
        (Some(glob.as_str()), "0", "0"),
        (Some(glob.as_str()), "1", "0"),
        (Some(glob.as_str()), "1", "1"),
    ] {
        let mut c = Command::new("rg");
        c.args(args)
            .arg(&tree)
            .env("UCACHE_READAHEAD_INLINE", inline)
            .env("UCACHE_FILE_VIEW", view);
        runs.push(run_ok(c, glob, "rg"));
        // And the matching lines themselves, for one large file.
        let mut c = Command::new("rg");
        c.args(["--mmap", "--no-config", "-n", "needle needle"])
            .arg(tree.join("d5/f19.txt"))
            .env("UCACHE_READAHEAD_INLINE", inline)
            .env("UCACHE_FILE_VIEW", view);
        runs.push(text(&run(through_shim(c, glob)).stdout));
    }
    assert!(!runs[0].is_empty());
    for k in [2, 4, 6] {
        assert_eq!(runs[0], runs[k]);
        assert_eq!(runs[1], runs[k + 1]);
    }
}
