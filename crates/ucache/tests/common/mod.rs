//! What several integration tests share.

use std::time::Duration;

/// Runs `f` on its own thread and returns what it returns, failing the test (naming `what`)
/// if it has not finished within `secs`: a regression in these tests is a hang, which must not
/// stall the suite. The stuck thread is left behind; the process exit ends it. A panic in `f`
/// is the test's own panic.
pub fn within<T: Send + 'static>(
    secs: u64,
    what: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
        let _ = tx.send(r);
    });
    match rx.recv_timeout(Duration::from_secs(secs)) {
        Ok(Ok(v)) => v,
        Ok(Err(p)) => std::panic::resume_unwind(p),
        Err(_) => panic!("{what}: hung for {secs} s"),
    }
}
