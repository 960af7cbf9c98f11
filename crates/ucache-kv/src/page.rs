//! Reading a page the same way whether it is pinned (a plain slice) or read optimistically
//! (an [`OptimisticView`] whose bytes may be torn by a concurrent writer).
//!
//! Every accessor is total: an offset past the end reads as zeros and a comparison past the
//! end compares short, never panics. A torn optimistic read can hold any bytes, and the node
//! code must get through it to the validation that throws its result away.
//!
//! Why words: a lookup is a binary search per node, and each probe reads a slot and compares
//! a key. On an optimistic view every read is a volatile load, so reading byte by byte (or
//! through a bounds-checked copy into a zeroed buffer, then `memcmp`) made the search the
//! largest cost of an in-memory lookup (docs/results/2026-11-26-kv-lookups). Here every read
//! is made of aligned 8-byte loads ([`PageBytes::word`]): a slot is one load, an 8-byte key
//! two, and a key comparison compares 8 bytes per step as one integer comparison.

use std::cmp::Ordering;

use ucache::OptimisticView;

/// Little-endian reads at byte offsets of one page.
pub trait PageBytes {
    fn page_len(&self) -> usize;

    /// The 8 bytes at `off` as a little-endian word, for `off` a multiple of 8; bytes past the
    /// end read as zeros.
    fn word(&self, off: usize) -> u64;

    /// Copies `out.len()` bytes from `off`; bytes past the end read as zeros.
    fn copy(&self, off: usize, out: &mut [u8]) {
        let mut k = 0;
        while out.len() - k >= 8 {
            out[k..k + 8].copy_from_slice(&self.u64_at(off.saturating_add(k)).to_le_bytes());
            k += 8;
        }
        if k < out.len() {
            let rest = out.len() - k;
            let w = self.u64_at(off.saturating_add(k)).to_le_bytes();
            out[k..].copy_from_slice(&w[..rest]);
        }
    }

    /// The little-endian u64 at any `off`: one aligned word, or two spliced.
    #[inline]
    fn u64_at(&self, off: usize) -> u64 {
        let (a, s) = (off & !7, (off & 7) as u32);
        let lo = self.word(a);
        if s == 0 {
            return lo;
        }
        let hi = a.checked_add(8).map_or(0, |b| self.word(b));
        (lo >> (8 * s)) | (hi << (64 - 8 * s))
    }
    #[inline]
    fn u32_at(&self, off: usize) -> u32 {
        self.u64_at(off) as u32
    }
    #[inline]
    fn u16_at(&self, off: usize) -> u16 {
        self.u64_at(off) as u16
    }
    #[inline]
    fn u8_at(&self, off: usize) -> u8 {
        self.u64_at(off) as u8
    }
    /// The `len` bytes at `off`, copied out.
    fn bytes(&self, off: usize, len: usize) -> Vec<u8> {
        let mut v = vec![0; len];
        self.copy(off, &mut v);
        v
    }
    /// Compares the `len` bytes at `off` with `key`: byte order, then length. Eight bytes per
    /// step, as integers whose order is the bytes' order (no copy, no allocation).
    #[inline]
    fn compare(&self, off: usize, len: usize, key: &[u8]) -> Ordering {
        let n = len.min(key.len());
        let mut done = 0;
        while done < n {
            let m = (n - done).min(8);
            let mut kb = [0u8; 8];
            kb[..m].copy_from_slice(&key[done..done + m]);
            let mask = if m == 8 { !0 } else { (1u64 << (8 * m)) - 1 };
            // Byte-swapped, the first byte is the most significant: integer order is byte order.
            let a = (self.u64_at(off.saturating_add(done)) & mask).swap_bytes();
            let b = u64::from_le_bytes(kb).swap_bytes();
            match a.cmp(&b) {
                Ordering::Equal => done += m,
                o => return o,
            }
        }
        len.cmp(&key.len())
    }
}

/// The word at `off` of `len` bytes whose whole words `full` reads (`off + 8 <= len`) and
/// whose last partial word `partial` copies: zeros past the end.
#[inline]
fn word_within(
    off: usize,
    len: usize,
    full: impl FnOnce(usize) -> u64,
    partial: impl FnOnce(usize, &mut [u8]),
) -> u64 {
    if off.checked_add(8).is_some_and(|e| e <= len) {
        return full(off);
    }
    if off >= len {
        return 0;
    }
    let mut b = [0u8; 8];
    partial(off, &mut b[..len - off]);
    u64::from_le_bytes(b)
}

impl PageBytes for [u8] {
    fn page_len(&self) -> usize {
        self.len()
    }
    #[inline]
    fn word(&self, off: usize) -> u64 {
        word_within(
            off,
            self.len(),
            |o| u64::from_le_bytes(self[o..o + 8].try_into().unwrap()),
            |o, out| out.copy_from_slice(&self[o..o + out.len()]),
        )
    }
    // A stable slice needs no word splicing: plain copies and comparisons are faster.
    fn copy(&self, off: usize, out: &mut [u8]) {
        let (s, n) = clamp(off, out.len(), self.len());
        out[..n].copy_from_slice(&self[s..s + n]);
        out[n..].fill(0);
    }
    fn compare(&self, off: usize, len: usize, key: &[u8]) -> Ordering {
        let (s, n) = clamp(off, len, self.len());
        let mine = &self[s..s + n];
        // Bytes past the end read as zeros: compare those too, then the lengths.
        let common = n.min(key.len());
        match mine[..common].cmp(&key[..common]) {
            Ordering::Equal => {}
            o => return o,
        }
        let zeros = (len.min(key.len())).saturating_sub(common);
        if key[common..common + zeros].iter().any(|&b| b != 0) {
            return Ordering::Less;
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

impl PageBytes for OptimisticView<'_> {
    fn page_len(&self) -> usize {
        self.len()
    }
    #[inline]
    fn word(&self, off: usize) -> u64 {
        word_within(
            off,
            self.len(),
            |o| self.read_u64(o),
            |o, out| self.copy_to(o, out),
        )
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

    /// A page read only through [`PageBytes::word`], as an optimistic view is: every other
    /// accessor is the trait's word-built default.
    struct Words<'a>(&'a [u8]);
    impl PageBytes for Words<'_> {
        fn page_len(&self) -> usize {
            self.0.len()
        }
        fn word(&self, off: usize) -> u64 {
            assert!(off.is_multiple_of(8), "unaligned word at {off}");
            self.0.word(off)
        }
    }

    /// The word-built reads (optimistic views) agree with the plain slice reads (pinned pages)
    /// at every alignment, across the end of the page, and for keys of every length.
    #[test]
    fn word_reads_agree_with_slice_reads() {
        let mut rng = 0x9e3779b97f4a7c15u64;
        let mut next = move || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        for len in [0usize, 5, 16, 61, 4096] {
            // Few distinct byte values, so that keys often share long prefixes.
            let page: Vec<u8> = (0..len).map(|_| (next() % 3) as u8).collect();
            let (p, w) = (&page[..], Words(&page));
            for _ in 0..3000 {
                let off = (next() as usize) % (len + 24);
                let n = (next() as usize) % 40;
                assert_eq!(w.u64_at(off), p.u64_at(off), "u64 at {off} of {len}");
                assert_eq!(w.u16_at(off), p.u16_at(off));
                assert_eq!(w.bytes(off, n), p.bytes(off, n), "{n} bytes at {off}");
                // A key equal to the page's bytes there, then one changed in a random byte or
                // cut or lengthened.
                let mut key = p.bytes(off, n);
                match next() % 4 {
                    0 if n > 0 => key[(next() as usize) % n] = (next() % 3) as u8,
                    1 => key.truncate((next() as usize) % (n + 1)),
                    2 => key.push((next() % 3) as u8),
                    _ => {}
                }
                assert_eq!(
                    w.compare(off, n, &key),
                    p.compare(off, n, &key),
                    "compare {n} bytes at {off} of {len} with {key:?}"
                );
                let whole = p.bytes(off, n);
                assert_eq!(
                    p.compare(off, n, &key),
                    whole.cmp(&key),
                    "against Vec order"
                );
            }
            assert_eq!(w.u64_at(usize::MAX - 3), 0);
            assert_eq!(w.compare(usize::MAX - 3, 9, &[0; 9]), Ordering::Equal);
        }
    }
}
