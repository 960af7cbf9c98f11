//! Typed slices over a transparent mapping's memory: the checks that turn the mapping's
//! pointer into a `&[T]` or `&mut [T]` of plain-old-data elements, so that programs need no
//! `unsafe { from_raw_parts(..) }` of their own.
//!
//! Why these are sound. A transparent mapping's memory behaves as plain memory to loads and
//! stores: a miss faults and is served before the access completes, eviction drops pages only
//! after writing them back (and write-protects them for the write-back, so a store waits for
//! it), and a reload brings back the bytes that were written back. So the values a slice sees
//! change only through writers: exclusive pins, `Mapping::write`, and stores through the raw
//! pointer. The signatures keep the first two out for as long as a slice lives:
//! - `as_slice` takes `&self` and serves read-only mappings only, where no pin can be
//!   exclusive and no `write` succeeds;
//! - `as_mut_slice` takes `&mut self`, so no pin, read or write of the same mapping can be
//!   made until the slice is dropped.
//!
//! The cache's own reads of the memory (a write-back, setting a buffer aside) happen while the
//! buffer is write-protected, so a store through the slice faults and waits for them rather
//! than racing them; like the kernel's reads under `mmap`, they change no value the slice
//! holds. Raw-pointer stores (`as_mut_ptr`, or C code holding the base address) are `unsafe`
//! and theirs to order. What no signature can rule out is the object changing behind the cache (a
//! file rewritten by another program): as under `mmap`, a buffer evicted and read back would
//! then show the new bytes. Stores that can tell (S3's ETag) fail that read instead, and a read
//! that fails is a `SIGBUS` or the mapping's [`crate::MapOptions::on_fault_error`] hook, as for
//! any plain load.

use super::MappingCore;
use crate::error::{Error, Result};

impl MappingCore {
    /// The mapping's bytes as a `[T]`, after the checks every typed slice needs: a transparent
    /// mapping, a `T` of non-zero size whose alignment the base meets, and a length that is a
    /// whole number of `T`.
    pub(super) fn typed_bytes<T: bytemuck::Pod>(&self, what: &str) -> Result<(*mut T, usize)> {
        if self.forked_away() {
            return Err(Error::Forked);
        }
        if self.is_pool() {
            return Err(Error::NotInPlace {
                what: "a typed slice over the mapping",
            });
        }
        if !self.is_transparent() {
            return Err(Error::BadArgument(format!(
                "{what} needs a transparent mapping (MapOptions::transparent): the memory of \
                 another mapping holds data only while a pin is held"
            )));
        }
        let size = std::mem::size_of::<T>();
        let align = std::mem::align_of::<T>();
        let ty = std::any::type_name::<T>();
        if size == 0 {
            return Err(Error::BadArgument(format!(
                "{what}::<{ty}>: a zero-sized element type has no slice to map"
            )));
        }
        if !(self.base() as usize).is_multiple_of(align) {
            return Err(Error::BadArgument(format!(
                "{what}::<{ty}>: the mapping's base is not aligned to {align} bytes"
            )));
        }
        if !self.len.is_multiple_of(size as u64) {
            return Err(Error::BadArgument(format!(
                "{what}::<{ty}>: the mapping's {} bytes are not a whole number of {size}-byte \
                 elements",
                self.len
            )));
        }
        Ok((self.base() as *mut T, (self.len / size as u64) as usize))
    }
}
