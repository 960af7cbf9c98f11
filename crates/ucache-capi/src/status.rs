//! Status codes, the thread-local last-error message, and [`guard`]: the one place where a
//! call's result, error or panic becomes what C sees.

use std::any::Any;
use std::cell::RefCell;
use std::ffi::{c_char, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::OnceLock;

use ucache_core::Error;

/// What every fallible call returns: `UCACHE_OK` (0) on success, otherwise the reason, with a
/// message for it in `ucache_last_error()`. The first codes name the variants of the Rust
/// library's `ucache::Error`; the codes from 100 on are the C API's own.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ucache_status {
    /// Success.
    UCACHE_OK = 0,
    /// A buffer size that is not a power of two from 4096 to 1 GiB.
    UCACHE_ERR_BAD_BUFFER_SIZE = 1,
    /// A zero length, or one the mapping's mode cannot cover.
    UCACHE_ERR_BAD_LENGTH = 2,
    /// A budget that cannot hold one eviction batch.
    UCACHE_ERR_BUDGET_TOO_SMALL = 3,
    /// Any other invalid argument or option.
    UCACHE_ERR_BAD_ARGUMENT = 4,
    /// A read-only mapping that reaches past the end of its object.
    UCACHE_ERR_BEYOND_OBJECT = 5,
    /// The store has no object by that name.
    UCACHE_ERR_NOT_FOUND = 6,
    /// The object changed behind the cache since it was opened.
    UCACHE_ERR_OBJECT_CHANGED = 7,
    /// A buffer index, offset or address outside the mapping.
    UCACHE_ERR_OUT_OF_RANGE = 8,
    /// A write access to a read-only mapping.
    UCACHE_ERR_READ_ONLY = 9,
    /// Every resident buffer is pinned or refused eviction: no memory can be freed.
    UCACHE_ERR_BUDGET_EXHAUSTED = 10,
    /// The store returned fewer bytes than a buffer needs.
    UCACHE_ERR_SHORT_IO = 11,
    /// The store failed.
    UCACHE_ERR_IO = 12,
    /// Some buffers could not be written back; they stay dirty and resident.
    UCACHE_ERR_WRITEBACK_FAILED = 13,
    /// The call would wait for a buffer the calling thread itself holds.
    UCACHE_ERR_WOULD_DEADLOCK = 14,
    /// The mapping is still in use (pinned, or used by another thread) and was not unmapped.
    UCACHE_ERR_IN_USE = 15,
    /// The mapping handle was unmapped or closed.
    UCACHE_ERR_UNMAPPED = 16,
    /// A system call ucache made failed.
    UCACHE_ERR_OS = 17,
    /// An earlier sync failed after write-backs the cache no longer holds: msync and unmap
    /// refuse until `ucache_clear_sync_failure`.
    UCACHE_ERR_SYNC_POISONED = 18,
    /// This process is a fork of the one that made the cache, which it cannot use.
    UCACHE_ERR_FORKED = 19,
    /// A required pointer argument was NULL.
    UCACHE_ERR_NULL_POINTER = 100,
    /// A handle that is not (or no longer) a live handle of the expected type.
    UCACHE_ERR_BAD_HANDLE = 101,
    /// ucache panicked inside the call; the message says where. The panic did not cross
    /// into C.
    UCACHE_ERR_PANIC = 102,
    /// An error of the Rust library newer than this list.
    UCACHE_ERR_OTHER = 103,
}

use ucache_status::*;

/// Every status, for turning a number from C back into one.
const ALL: [ucache_status; 24] = [
    UCACHE_OK,
    UCACHE_ERR_BAD_BUFFER_SIZE,
    UCACHE_ERR_BAD_LENGTH,
    UCACHE_ERR_BUDGET_TOO_SMALL,
    UCACHE_ERR_BAD_ARGUMENT,
    UCACHE_ERR_BEYOND_OBJECT,
    UCACHE_ERR_NOT_FOUND,
    UCACHE_ERR_OBJECT_CHANGED,
    UCACHE_ERR_OUT_OF_RANGE,
    UCACHE_ERR_READ_ONLY,
    UCACHE_ERR_BUDGET_EXHAUSTED,
    UCACHE_ERR_SHORT_IO,
    UCACHE_ERR_IO,
    UCACHE_ERR_WRITEBACK_FAILED,
    UCACHE_ERR_WOULD_DEADLOCK,
    UCACHE_ERR_IN_USE,
    UCACHE_ERR_UNMAPPED,
    UCACHE_ERR_OS,
    UCACHE_ERR_SYNC_POISONED,
    UCACHE_ERR_FORKED,
    UCACHE_ERR_NULL_POINTER,
    UCACHE_ERR_BAD_HANDLE,
    UCACHE_ERR_PANIC,
    UCACHE_ERR_OTHER,
];

impl ucache_status {
    /// The status for a Rust library error.
    pub(crate) fn of(e: &Error) -> ucache_status {
        match e {
            Error::BadBufferSize(_) => UCACHE_ERR_BAD_BUFFER_SIZE,
            Error::BadLength { .. } => UCACHE_ERR_BAD_LENGTH,
            Error::BudgetTooSmall { .. } => UCACHE_ERR_BUDGET_TOO_SMALL,
            Error::BadArgument(_) => UCACHE_ERR_BAD_ARGUMENT,
            Error::BeyondObject { .. } => UCACHE_ERR_BEYOND_OBJECT,
            Error::NotFound { .. }
            | Error::DirectoryNotFound { .. }
            | Error::BucketNotFound { .. } => UCACHE_ERR_NOT_FOUND,
            Error::ObjectChanged { .. } => UCACHE_ERR_OBJECT_CHANGED,
            Error::OutOfRange { .. } => UCACHE_ERR_OUT_OF_RANGE,
            Error::ReadOnly => UCACHE_ERR_READ_ONLY,
            Error::BudgetExhausted { .. } => UCACHE_ERR_BUDGET_EXHAUSTED,
            Error::ShortIo { .. } => UCACHE_ERR_SHORT_IO,
            Error::Io { .. } => UCACHE_ERR_IO,
            Error::WritebackFailed { .. } => UCACHE_ERR_WRITEBACK_FAILED,
            Error::WouldDeadlock { .. } => UCACHE_ERR_WOULD_DEADLOCK,
            Error::InUse { .. } => UCACHE_ERR_IN_USE,
            Error::Unmapped => UCACHE_ERR_UNMAPPED,
            Error::Os { .. } => UCACHE_ERR_OS,
            Error::SyncPoisoned { .. } => UCACHE_ERR_SYNC_POISONED,
            Error::Forked => UCACHE_ERR_FORKED,
            _ => UCACHE_ERR_OTHER,
        }
    }
}

/// Why a call failed: the code C gets and the message `ucache_last_error` gives.
#[derive(Debug)]
pub(crate) struct Fail {
    pub(crate) status: ucache_status,
    pub(crate) message: String,
}

impl Fail {
    pub(crate) fn new(status: ucache_status, message: impl Into<String>) -> Fail {
        Fail {
            status,
            message: message.into(),
        }
    }
    /// A NULL where `what` was required.
    pub(crate) fn null(what: &str) -> Fail {
        Fail::new(UCACHE_ERR_NULL_POINTER, format!("{what} is NULL"))
    }
    pub(crate) fn bad(message: impl Into<String>) -> Fail {
        Fail::new(UCACHE_ERR_BAD_ARGUMENT, message)
    }
}

impl From<Error> for Fail {
    fn from(e: Error) -> Fail {
        Fail::new(ucache_status::of(&e), e.to_string())
    }
}

/// What a call returns when it fails, for each return type of the API.
pub(crate) trait Failed {
    fn failed(status: ucache_status) -> Self;
}
impl Failed for ucache_status {
    fn failed(status: ucache_status) -> Self {
        status
    }
}
impl Failed for bool {
    fn failed(_: ucache_status) -> Self {
        false
    }
}
impl Failed for u64 {
    fn failed(_: ucache_status) -> Self {
        0
    }
}

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn set_last_error(message: String) {
    let c = CString::new(message.replace('\0', "\\0")).unwrap_or_default();
    LAST_ERROR.with(|l| *l.borrow_mut() = c);
}

fn panic_message(payload: &(dyn Any + Send)) -> &str {
    if let Some(s) = payload.downcast_ref::<&str>() {
        s
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s
    } else {
        "(no message)"
    }
}

/// Runs the body of an exported function: its result is returned, its failure becomes a code
/// and the thread's last-error message, and a panic inside it is caught here, so it never
/// unwinds into C. Every `extern "C"` function of the API goes through this.
pub(crate) fn guard<T: Failed>(body: impl FnOnce() -> Result<T, Fail>) -> T {
    let fail = match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(v)) => return v,
        Ok(Err(fail)) => fail,
        Err(payload) => Fail::new(
            UCACHE_ERR_PANIC,
            format!("ucache panicked: {}", panic_message(&*payload)),
        ),
    };
    let status = fail.status;
    set_last_error(fail.message);
    T::failed(status)
}

/// [`guard`] for the functions that return a status: `UCACHE_OK` when the body succeeds.
pub(crate) fn call(body: impl FnOnce() -> Result<(), Fail>) -> ucache_status {
    guard(|| body().map(|()| UCACHE_OK))
}

/// The message of the last call on this thread that failed ("" if none has).
///
/// Ownership: the string belongs to ucache; it stays valid until the next failing call on
/// the same thread. Copy it to keep it. Thread safety: each thread has its own message.
#[no_mangle]
pub extern "C" fn ucache_last_error() -> *const c_char {
    // Reading a thread-local cannot fail or panic once initialised; no guard needed beyond
    // `try_with`, which returns an error during thread teardown instead of panicking.
    LAST_ERROR
        .try_with(|l| l.borrow().as_ptr())
        .unwrap_or(c"".as_ptr())
}

/// The name of a status code ("UCACHE_ERR_IO"), or "UCACHE_UNKNOWN_STATUS" for a number that
/// is none. Ownership: a static string. Thread safety: any thread.
#[no_mangle]
pub extern "C" fn ucache_status_name(status: i32) -> *const c_char {
    static NAMES: OnceLock<Vec<(i32, CString)>> = OnceLock::new();
    let names = NAMES.get_or_init(|| {
        ALL.iter()
            .map(|&s| (s as i32, CString::new(format!("{s:?}")).unwrap_or_default()))
            .collect()
    });
    names
        .iter()
        .find(|(n, _)| *n == status)
        .map_or(c"UCACHE_UNKNOWN_STATUS", |(_, c)| c.as_c_str())
        .as_ptr()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

    fn last_error() -> String {
        // SAFETY: `ucache_last_error` returns a valid NUL-terminated string.
        unsafe { CStr::from_ptr(ucache_last_error()) }
            .to_string_lossy()
            .into_owned()
    }

    #[test]
    fn a_panic_becomes_a_status_and_a_message() {
        let s = call(|| panic!("deliberate"));
        assert_eq!(s, UCACHE_ERR_PANIC);
        assert!(last_error().contains("deliberate"), "{}", last_error());
        assert!(!guard::<bool>(|| panic!("again")));
    }

    #[test]
    fn errors_map_to_their_codes_and_messages() {
        assert_eq!(call(|| Err(Error::ReadOnly.into())), UCACHE_ERR_READ_ONLY);
        assert_eq!(last_error(), "mapping is read-only");
        assert_eq!(call(|| Ok(())), UCACHE_OK);
        assert_eq!(
            last_error(),
            "mapping is read-only",
            "success leaves the message"
        );
    }

    #[test]
    fn every_status_has_its_name() {
        for s in ALL {
            // SAFETY: a static NUL-terminated string.
            let name = unsafe { CStr::from_ptr(ucache_status_name(s as i32)) };
            assert_eq!(name.to_str().unwrap(), format!("{s:?}"));
        }
        let mut codes: Vec<i32> = ALL.iter().map(|&s| s as i32).collect();
        codes.dedup();
        assert_eq!(codes.len(), ALL.len());
    }
}
