//! Reading a page the same way whether it is pinned (a plain slice) or read optimistically
//! (an [`OptimisticView`] whose bytes may be torn by a concurrent writer).
//!
//! Every accessor is total: an offset past the end reads as zeros and a comparison past the
//! end compares short, never panics. A torn optimistic read can hold any bytes, and the node
//! code must get through it to the validation that throws its result away.

use std::cmp::Ordering;

use ucache::OptimisticView;

/// Little-endian reads at byte offsets of one page.
pub trait PageBytes {
    fn page_len(&self) -> usize;
    /// Copies `out.len()` bytes from `off`; bytes past the end read as zeros.
    fn copy(&self, off: usize, out: &mut [u8]);

    fn u16_at(&self, off: usize) -> u16 {
        let mut b = [0; 2];
        self.copy(off, &mut b);
        u16::from_le_bytes(b)
    }
    fn u32_at(&self, off: usize) -> u32 {
        let mut b = [0; 4];
        self.copy(off, &mut b);
        u32::from_le_bytes(b)
    }
    fn u64_at(&self, off: usize) -> u64 {
        let mut b = [0; 8];
        self.copy(off, &mut b);
        u64::from_le_bytes(b)
    }
    /// The `len` bytes at `off`, copied out.
    fn bytes(&self, off: usize, len: usize) -> Vec<u8> {
        let mut v = vec![0; len];
        self.copy(off, &mut v);
        v
    }
    /// Compares the `len` bytes at `off` with `key`, in chunks (no allocation).
    fn compare(&self, off: usize, len: usize, key: &[u8]) -> Ordering {
        let mut chunk = [0u8; 64];
        let mut done = 0;
        while done < len.min(key.len()) {
            let n = (len.min(key.len()) - done).min(chunk.len());
            self.copy(off + done, &mut chunk[..n]);
            match chunk[..n].cmp(&key[done..done + n]) {
                Ordering::Equal => done += n,
                o => return o,
            }
        }
        len.cmp(&key.len())
    }
}

/// The part of `[off, off+want)` that lies within `len`: `(start, count)`.
fn clamp(off: usize, want: usize, len: usize) -> (usize, usize) {
    if off >= len {
        return (0, 0);
    }
    (off, want.min(len - off))
}

impl PageBytes for [u8] {
    fn page_len(&self) -> usize {
        self.len()
    }
    fn copy(&self, off: usize, out: &mut [u8]) {
        let (s, n) = clamp(off, out.len(), self.len());
        out[..n].copy_from_slice(&self[s..s + n]);
        out[n..].fill(0);
    }
}

impl PageBytes for OptimisticView<'_> {
    fn page_len(&self) -> usize {
        self.len()
    }
    fn copy(&self, off: usize, out: &mut [u8]) {
        let (s, n) = clamp(off, out.len(), self.len());
        self.copy_to(s, &mut out[..n]);
        out[n..].fill(0);
    }
}

#[cfg(test)]
mod tests {
    use super::PageBytes;
    use std::cmp::Ordering;

    #[test]
    fn reads_past_the_end_are_zeros_not_panics() {
        let p: &[u8] = &[1u8; 16];
        assert_eq!(p.u64_at(12), u64::from_le_bytes([1, 1, 1, 1, 0, 0, 0, 0]));
        assert_eq!(p.u64_at(usize::MAX - 3), 0);
        assert_eq!(p.bytes(15, 3), vec![1, 0, 0]);
        assert_eq!(p.compare(14, 100, &[1, 1]), Ordering::Greater);
    }

    #[test]
    fn compare_is_byte_order_then_length() {
        let p: Vec<u8> = (0..200u8).collect();
        assert_eq!(p.compare(0, 3, &[0, 1, 2]), Ordering::Equal);
        assert_eq!(p.compare(0, 3, &[0, 1, 3]), Ordering::Less);
        assert_eq!(p.compare(0, 2, &[0, 1, 2]), Ordering::Less);
        let long: Vec<u8> = (0..150u8).collect();
        assert_eq!(p.compare(0, 150, &long), Ordering::Equal);
        assert_eq!(p.compare(1, 150, &long), Ordering::Greater);
    }
}
