//! Typed reads and writes at byte offsets in one buffer: on pins ([`SharedGuard`],
//! [`ExclusiveGuard`]) and on the optimistic view ([`OptimisticView`]), for plain-old-data
//! types ([`bytemuck::Pod`]), so that a hash bucket or a record is read as a value rather than
//! decoded from bytes by hand.
//!
//! Values are in the machine's byte order, as if the buffer were cast to `T`; offsets need no
//! alignment (unaligned loads and stores are used). An access that does not fit the buffer
//! panics, as slice indexing does: the offset is the program's arithmetic, not input.

use crate::guard::{ExclusiveGuard, OptimisticView, SharedGuard};

/// The bytes `[offset, offset + size_of::<T>())` of a buffer of `len` bytes, or a panic naming
/// the access.
#[track_caller]
fn span<T>(what: &str, offset: usize, len: usize) -> std::ops::Range<usize> {
    let size = std::mem::size_of::<T>();
    match offset.checked_add(size) {
        Some(end) if end <= len => offset..end,
        _ => panic!(
            "{what}::<{}> of {size} bytes at offset {offset} is outside the buffer of {len} bytes",
            std::any::type_name::<T>()
        ),
    }
}

impl SharedGuard<'_> {
    /// The `T` at byte `offset` of the buffer.
    ///
    /// # Panics
    /// If `offset + size_of::<T>()` passes the end of the buffer.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use ucache::{Cache, CacheOptions, MapOptions, store::MemoryStore};
    /// let store = MemoryStore::new();
    /// let mut bytes = vec![0u8; 4096];
    /// bytes[12..20].copy_from_slice(&7u64.to_ne_bytes());
    /// store.insert("o", bytes);
    /// let cache = Cache::new(CacheOptions::new(16 * 4096).batch(4)).unwrap();
    /// let map = cache.map(Arc::new(store), "o", MapOptions::new()).unwrap();
    /// assert_eq!(map.pin_shared(0).unwrap().read::<u64>(12), 7);
    /// ```
    #[track_caller]
    pub fn read<T: bytemuck::Pod>(&self, offset: usize) -> T {
        bytemuck::pod_read_unaligned(&self[span::<T>("read", offset, self.len())])
    }
}

impl ExclusiveGuard<'_> {
    /// The `T` at byte `offset` of the buffer.
    ///
    /// # Panics
    /// If `offset + size_of::<T>()` passes the end of the buffer.
    #[track_caller]
    pub fn read<T: bytemuck::Pod>(&self, offset: usize) -> T {
        bytemuck::pod_read_unaligned(&self[span::<T>("read", offset, self.len())])
    }

    /// Stores `value` at byte `offset` of the buffer, which the guard then leaves dirty.
    ///
    /// # Panics
    /// If `offset + size_of::<T>()` passes the end of the buffer.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use ucache::{Cache, CacheOptions, MapOptions, store::MemoryStore};
    /// let store = MemoryStore::new();
    /// store.insert("o", vec![0; 4096]);
    /// let cache = Cache::new(CacheOptions::new(16 * 4096).batch(4)).unwrap();
    /// let map = cache.map(Arc::new(store), "o", MapOptions::new().writable(true)).unwrap();
    /// let mut g = map.pin_exclusive(0).unwrap();
    /// g.write::<u32>(3, 0xfeed);
    /// assert_eq!(g.read::<u32>(3), 0xfeed);
    /// ```
    #[track_caller]
    pub fn write<T: bytemuck::Pod>(&mut self, offset: usize, value: T) {
        let r = span::<T>("write", offset, self.len());
        self[r].copy_from_slice(bytemuck::bytes_of(&value));
    }
}

impl OptimisticView<'_> {
    /// The `T` at byte `offset` of the buffer, read without a pin: like every optimistic read
    /// it may be torn, and counts only once `read_optimistic` returns (its validation failed
    /// otherwise, and the closure ran again).
    ///
    /// # Panics
    /// If `offset + size_of::<T>()` passes the end of the buffer.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use ucache::{Cache, CacheOptions, MapOptions, store::MemoryStore};
    /// let store = MemoryStore::new();
    /// let mut bytes = vec![0u8; 4096];
    /// bytes[100..104].copy_from_slice(&9u32.to_ne_bytes());
    /// store.insert("o", bytes);
    /// let cache = Cache::new(CacheOptions::new(16 * 4096).batch(4)).unwrap();
    /// let map = cache.map(Arc::new(store), "o", MapOptions::new()).unwrap();
    /// map.ensure_cached(0, 4096).unwrap();
    /// assert_eq!(map.read_optimistic(0, |v| v.read::<u32>(100)).unwrap(), 9);
    /// ```
    #[track_caller]
    pub fn read<T: bytemuck::Pod>(&self, offset: usize) -> T {
        let r = span::<T>("read", offset, self.len());
        let mut v = T::zeroed();
        self.copy_to(r.start, bytemuck::bytes_of_mut(&mut v));
        v
    }

    /// Copies `out.len()` values of `T` from byte `offset` of the buffer, as
    /// [`OptimisticView::copy_to`] does bytes.
    ///
    /// # Panics
    /// If the values pass the end of the buffer.
    #[track_caller]
    pub fn read_slice<T: bytemuck::Pod>(&self, offset: usize, out: &mut [T]) {
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(out);
        let fits = offset
            .checked_add(bytes.len())
            .is_some_and(|e| e <= self.len());
        assert!(
            fits,
            "read_slice::<{}> of {} bytes at offset {offset} is outside the buffer of {} bytes",
            std::any::type_name::<T>(),
            bytes.len(),
            self.len()
        );
        self.copy_to(offset, bytes);
    }
}
