//! Page 0, the meta page: what identifies the store and where the tree starts, and the page
//! allocator (a high-water mark: pages are never freed, since deletes never merge nodes).
//!
//! ```text
//! 0     8       16         20        24      32          40
//! +-----+-------+----------+---------+-------+-----------+
//! | LSN | magic | page size| (pad)   | root  | next page | capacity (pages) at 40
//! +-----+-------+----------+---------+-------+-----------+
//! ```
//!
//! The meta page is changed inside write batches like any node, so the log covers it.

use crate::page::PageBytes;

/// "uckv-002": format 2, whose node slots carry key heads (`node`). A format-1 file
/// ([`MAGIC_V1`]) is refused with a typed error, not misread.
pub const MAGIC: u64 = 0x7563_6b76_2d30_3032;
/// "uckv-001": format 1, 8-byte slots without key heads.
pub const MAGIC_V1: u64 = 0x7563_6b76_2d30_3031;
const MAGIC_AT: usize = 8;
const PAGE_SIZE: usize = 16;
const ROOT: usize = 24;
const NEXT: usize = 32;
const CAPACITY: usize = 40;

pub fn magic<P: PageBytes + ?Sized>(p: &P) -> u64 {
    p.u64_at(MAGIC_AT)
}
pub fn page_size<P: PageBytes + ?Sized>(p: &P) -> usize {
    p.u32_at(PAGE_SIZE) as usize
}
pub fn root<P: PageBytes + ?Sized>(p: &P) -> u64 {
    p.u64_at(ROOT)
}
pub fn next_page<P: PageBytes + ?Sized>(p: &P) -> u64 {
    p.u64_at(NEXT)
}
pub fn capacity<P: PageBytes + ?Sized>(p: &P) -> u64 {
    p.u64_at(CAPACITY)
}

fn put(p: &mut [u8], at: usize, v: u64) {
    p[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

/// A new store's meta page: its root is page 1, the first page handed out after it 2.
pub fn init(p: &mut [u8], capacity_pages: u64) {
    p.fill(0);
    put(p, MAGIC_AT, MAGIC);
    let size = p.len() as u32;
    p[PAGE_SIZE..PAGE_SIZE + 4].copy_from_slice(&size.to_le_bytes());
    put(p, ROOT, 1);
    put(p, NEXT, 2);
    put(p, CAPACITY, capacity_pages);
}
pub fn set_root(p: &mut [u8], root: u64) {
    put(p, ROOT, root)
}
pub fn set_next_page(p: &mut [u8], next: u64) {
    put(p, NEXT, next)
}
