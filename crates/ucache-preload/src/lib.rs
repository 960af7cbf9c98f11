//! `libucache_preload.so`: an `LD_PRELOAD` shim that serves an unmodified program's file
//! mappings through one process-wide ucache cache.
//!
//! ```text
//! LD_PRELOAD=target/release/libucache_preload.so UCACHE_FILES='*.db:/data/*' \
//!     UCACHE_MEMORY=256MiB [UCACHE_POLICY=s3fifo] [UCACHE_BUFFER_SIZE=16KiB] \
//!     [UCACHE_STATS=1] [UCACHE_FAULT_THREADS=n] program ...
//! ```
//!
//! `mmap` of a file whose canonical path matches one of the globs becomes a transparent ucache
//! mapping; every other `mmap` goes to the kernel untouched. The file-descriptor calls keep
//! the program's view coherent: reads first write back what writable mappings hold in the
//! range, writes drop the mappings' copies of what they wrote, `ftruncate` drops what lies
//! past the new end, `fsync` writes back and syncs the mappings. See README.md for what is
//! and is not covered.
//!
//! Layout: `real` (the functions behind the shim and raw system calls), `config` (the
//! environment), `store` (the file as a ucache object), `readahead` (the shim's readahead,
//! kept within the file), `table` (the live mappings, read without locks), `shim` (what the
//! calls do), `stdio` (glibc's unlocked standard streams kept while the program has one
//! thread), `reads` (read mode: `pread` of matched files served from the cache,
//! `UCACHE_READS=1`), `interpose` (the exported symbols).

// The unit tests build without the exported symbols (`interpose`), so much is unused there.
#![cfg_attr(test, allow(dead_code))]

mod config;
#[cfg(not(test))]
mod interpose;
mod readahead;
mod reads;
mod real;
mod shim;
mod stdio;
mod store;
mod table;

extern "C" fn constructor() {
    let _ = std::panic::catch_unwind(shim::init);
}

extern "C" fn destructor() {
    let _ = std::panic::catch_unwind(shim::fini);
}

/// Runs when the library is loaded, before `main`.
#[cfg(not(test))]
#[used]
#[link_section = ".init_array"]
static INIT: extern "C" fn() = constructor;

/// Runs at `exit`, after the program's `atexit` handlers.
#[cfg(not(test))]
#[used]
#[link_section = ".fini_array"]
static FINI: extern "C" fn() = destructor;

#[cfg(test)]
#[allow(dead_code)]
fn keep() -> [extern "C" fn(); 2] {
    [constructor, destructor]
}
