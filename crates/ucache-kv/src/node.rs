//! The layout of a B+tree node in one page: a slotted page.
//!
//! ```text
//! 0      8     9      12      16     20        24              32
//! +------+-----+------+-------+------+---------+---------------+--------------------+--------+
//! | LSN  | kind| pad  | count | heap | (pad)   | leftmost child| slots ...  -> free  <- records|
//! +------+-----+------+-------+------+---------+---------------+--------------------+--------+
//! ```
//!
//! A slot is `offset: u32, key_len: u16, value_len: u16, head: [u8; 8]` and is kept in key
//! order; its record (key bytes, then value bytes) lives in the heap that grows down from the
//! end of the page. The head is the key's first 8 bytes (zero-padded): a binary search
//! compares heads in the slot array and reads a record's key only when heads tie, so a probe
//! touches one cache line instead of two dependent ones (the slot, then the record). For keys
//! of 8 bytes or fewer a search reads no record at all; the one record it then reads is the
//! value's. Measured in docs/results/2026-11-26-kv-lookups.
//! A leaf's values are the user's values; an inner node's are 8-byte child page numbers, and
//! child `leftmost` holds the keys below its first key, the child of slot `i` the keys from
//! key `i` up to key `i + 1`.
//!
//! The LSN (the log position of the batch that last changed the page) is what the
//! before-write-back hook reads to flush the log first; it is not part of what the log
//! records, since recovery does not need it.
//!
//! Readers go through [`PageBytes`], so the same code serves pinned pages and optimistic
//! views; counts and offsets are clamped, so a torn read gives wrong answers (thrown away by
//! validation) but never a panic or an endless loop.

use std::cmp::Ordering;

use crate::page::PageBytes;

pub const HEADER: usize = 32;
pub const SLOT: usize = 16;
/// Where a slot's key head lies in the slot.
const HEAD: usize = 8;
pub const LSN: usize = 0;
const KIND: usize = 8;
const COUNT: usize = 12;
const HEAP: usize = 16;
const LEFTMOST: usize = 24;

/// What a page holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Leaf = 1,
    Inner = 2,
}

pub fn kind<P: PageBytes + ?Sized>(p: &P) -> Option<Kind> {
    match p.u8_at(KIND) {
        1 => Some(Kind::Leaf),
        2 => Some(Kind::Inner),
        _ => None,
    }
}

/// The number of slots, clamped to what the page could hold.
pub fn count<P: PageBytes + ?Sized>(p: &P) -> usize {
    (p.u32_at(COUNT) as usize).min((p.page_len().saturating_sub(HEADER)) / SLOT)
}

pub fn page_lsn<P: PageBytes + ?Sized>(p: &P) -> u64 {
    p.u64_at(LSN)
}

/// Slot `i`: (record offset, key length, value length).
fn slot<P: PageBytes + ?Sized>(p: &P, i: usize) -> (usize, usize, usize) {
    // One 8-byte read for the whole slot: on an optimistic view every read is a bounds check
    // and a volatile copy, so a binary search pays per read.
    let s = p.u64_at(HEADER + i * SLOT);
    (
        (s & 0xffff_ffff) as usize,
        ((s >> 32) & 0xffff) as usize,
        (s >> 48) as usize,
    )
}

pub fn key_at<P: PageBytes + ?Sized>(p: &P, i: usize) -> Vec<u8> {
    let (off, kl, _) = slot(p, i);
    p.bytes(off, kl)
}

pub fn value_at<P: PageBytes + ?Sized>(p: &P, i: usize) -> Vec<u8> {
    let (off, kl, vl) = slot(p, i);
    p.bytes(off + kl, vl)
}

/// The child page of an inner node at position `pos`: 0 is the leftmost, `i + 1` slot `i`'s.
pub fn child_at<P: PageBytes + ?Sized>(p: &P, pos: usize) -> u64 {
    if pos == 0 {
        return p.u64_at(LEFTMOST);
    }
    let (off, kl, _) = slot(p, pos - 1);
    p.u64_at(off + kl)
}

/// A key's head as an integer whose order is the order of the heads' bytes: the first 8
/// bytes, zero-padded, big-endian.
fn head(key: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    let n = key.len().min(8);
    b[..n].copy_from_slice(&key[..n]);
    u64::from_be_bytes(b)
}

/// Slot `i`'s key against `key`, whose [`head`] is `key_head`.
///
/// Heads that differ order the keys as the keys themselves: they differ at a byte both keys
/// have, or the shorter key is a prefix of the longer one there (its padding, zero, against a
/// byte that is not). Equal heads of keys no longer than 8 bytes mean equal bytes, so the
/// length decides. Only otherwise is the record's key read.
fn cmp_slot<P: PageBytes + ?Sized>(p: &P, i: usize, key: &[u8], key_head: u64) -> Ordering {
    let h = p.u64_at(HEADER + i * SLOT + HEAD).swap_bytes();
    match h.cmp(&key_head) {
        Ordering::Equal => {}
        o => return o,
    }
    let (off, kl, _) = slot(p, i);
    if kl <= 8 && key.len() <= 8 {
        return kl.cmp(&key.len());
    }
    p.compare(off, kl, key)
}

/// The first slot whose key is not less than `key`, and whether it equals `key`.
pub fn search<P: PageBytes + ?Sized>(p: &P, key: &[u8]) -> (usize, bool) {
    let (mut lo, mut hi) = (0, count(p));
    let key_head = head(key);
    while lo < hi {
        let mid = (lo + hi) / 2;
        match cmp_slot(p, mid, key, key_head) {
            Ordering::Less => lo = mid + 1,
            Ordering::Equal => return (mid, true),
            Ordering::Greater => hi = mid,
        }
    }
    (lo, false)
}

/// The child position whose range holds `key`: the number of keys not greater than it.
pub fn child_pos_for<P: PageBytes + ?Sized>(p: &P, key: &[u8]) -> usize {
    match search(p, key) {
        (i, true) => i + 1,
        (i, false) => i,
    }
}

/// The child position whose range holds the greatest key below `bound`: the number of keys
/// less than it.
pub fn child_pos_below<P: PageBytes + ?Sized>(p: &P, bound: &[u8]) -> usize {
    search(p, bound).0
}

/// The value of `key` in a leaf.
pub fn leaf_get<P: PageBytes + ?Sized>(p: &P, key: &[u8]) -> Option<Vec<u8>> {
    match search(p, key) {
        (i, true) => Some(value_at(p, i)),
        _ => None,
    }
}

pub fn init(p: &mut [u8], kind: Kind) {
    p[..HEADER].fill(0);
    p[KIND] = kind as u8;
    set_u32(p, COUNT, 0);
    set_u32(p, HEAP, p.len() as u32);
}

pub fn set_lsn(p: &mut [u8], lsn: u64) {
    p[LSN..LSN + 8].copy_from_slice(&lsn.to_le_bytes());
}

pub fn set_leftmost(p: &mut [u8], child: u64) {
    p[LEFTMOST..LEFTMOST + 8].copy_from_slice(&child.to_le_bytes());
}

fn set_u32(p: &mut [u8], at: usize, v: u32) {
    p[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

fn live_bytes(p: &[u8]) -> usize {
    (0..count(p))
        .map(|i| {
            let (_, k, v) = slot(p, i);
            k + v
        })
        .sum()
}

/// Whether a record of `key_len + value_len` bytes fits (after compaction if need be).
pub fn fits(p: &[u8], key_len: usize, value_len: usize) -> bool {
    let used = HEADER + (count(p) + 1) * SLOT + live_bytes(p) + key_len + value_len;
    used <= p.len()
}

/// Rewrites the heap without the holes that removed records left.
fn compact(p: &mut [u8]) {
    let entries: Vec<(Vec<u8>, Vec<u8>)> = (0..count(p))
        .map(|i| (key_at(p, i), value_at(p, i)))
        .collect();
    rebuild(p, &entries);
}

/// Replaces the slots and heap with `entries` (in order), keeping the header's other fields.
fn rebuild(p: &mut [u8], entries: &[(Vec<u8>, Vec<u8>)]) {
    set_u32(p, COUNT, 0);
    set_u32(p, HEAP, p.len() as u32);
    for (i, (k, v)) in entries.iter().enumerate() {
        let ok = insert_at(p, i, k, v);
        debug_assert!(ok, "rebuild overflowed the page");
    }
}

/// Inserts `key`/`value` as slot `i`; false if the page has no room even after compaction.
pub fn insert_at(p: &mut [u8], i: usize, key: &[u8], value: &[u8]) -> bool {
    if !fits(p, key.len(), value.len()) {
        return false;
    }
    let n = count(p);
    let heap = p.u32_at(HEAP) as usize;
    let slots_end = HEADER + (n + 1) * SLOT;
    if heap < slots_end + key.len() + value.len() {
        compact(p);
        return insert_at(p, i, key, value);
    }
    let off = heap - key.len() - value.len();
    p[off..off + key.len()].copy_from_slice(key);
    p[off + key.len()..heap].copy_from_slice(value);
    let at = HEADER + i * SLOT;
    p.copy_within(at..HEADER + n * SLOT, at + SLOT);
    set_u32(p, at, off as u32);
    p[at + 4..at + 6].copy_from_slice(&(key.len() as u16).to_le_bytes());
    p[at + 6..at + 8].copy_from_slice(&(value.len() as u16).to_le_bytes());
    p[at + HEAD..at + HEAD + 8].copy_from_slice(&head(key).to_be_bytes());
    set_u32(p, COUNT, n as u32 + 1);
    set_u32(p, HEAP, off as u32);
    true
}

/// Removes slot `i` (its record becomes a hole, reclaimed by the next compaction).
pub fn remove_at(p: &mut [u8], i: usize) {
    let n = count(p);
    let at = HEADER + i * SLOT;
    p.copy_within(at + SLOT..HEADER + n * SLOT, at);
    set_u32(p, COUNT, n as u32 - 1);
}

/// All entries of a node, in order.
pub fn entries(p: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
    (0..count(p))
        .map(|i| (key_at(p, i), value_at(p, i)))
        .collect()
}

/// Splits a full node while inserting `key`/`value` at slot `pos`: `left` keeps the lower
/// part, `right` (a fresh page) gets the upper part, chosen by bytes so that both fit. Returns
/// the separator to insert into the parent, whose child on its right is `right`'s page. A
/// leaf's separator is `right`'s first key; an inner node's middle key moves up, and its child
/// becomes `right`'s leftmost.
pub fn split_insert(
    left: &mut [u8],
    right: &mut [u8],
    pos: usize,
    key: &[u8],
    value: &[u8],
) -> Vec<u8> {
    let k = kind(left).expect("split of a page that is not a node");
    let mut all = entries(left);
    all.insert(pos, (key.to_vec(), value.to_vec()));
    let size = |e: &(Vec<u8>, Vec<u8>)| e.0.len() + e.1.len() + SLOT;
    let total: usize = all.iter().map(size).sum();
    // The split point that leaves the larger side smallest; each side keeps one entry or more.
    let mut best = (usize::MAX, 1);
    let mut acc = 0;
    for (m, e) in all.iter().enumerate().take(all.len() - 1) {
        acc += size(e);
        let worst = acc.max(total - acc);
        if worst < best.0 {
            best = (worst, m + 1);
        }
    }
    // Appending past the last key (a sequential load) leaves the left node full and starts
    // the right one with the new entry alone, so sequential inserts fill pages, not halves.
    let m = if pos == all.len() - 1 && acc_fits(&all[..pos], left.len()) {
        pos
    } else {
        best.1
    };
    init(right, k);
    match k {
        Kind::Leaf => {
            let sep = all[m].0.clone();
            rebuild(left, &all[..m]);
            rebuild(right, &all[m..]);
            sep
        }
        Kind::Inner => {
            // all[m] moves up: its child is the leftmost of the right node.
            let m = m.min(all.len() - 1).max(1);
            let sep = all[m].0.clone();
            let child = u64::from_le_bytes(all[m].1[..8].try_into().unwrap());
            set_leftmost(right, child);
            rebuild(left, &all[..m]);
            rebuild(right, &all[m + 1..]);
            sep
        }
    }
}

/// Whether `entries` fit in a page of `page` bytes.
fn acc_fits(entries: &[(Vec<u8>, Vec<u8>)], page: usize) -> bool {
    HEADER
        + entries
            .iter()
            .map(|e| e.0.len() + e.1.len() + SLOT)
            .sum::<usize>()
        <= page
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leaf(size: usize) -> Vec<u8> {
        let mut p = vec![0; size];
        init(&mut p, Kind::Leaf);
        p
    }

    #[test]
    fn inserts_keep_key_order_and_reuse_holes() {
        let mut p = leaf(4096);
        for k in [5u8, 1, 9, 3] {
            let (i, found) = search(&p[..], &[k]);
            assert!(!found);
            assert!(insert_at(&mut p, i, &[k], &[k; 10]));
        }
        let keys: Vec<_> = entries(&p).into_iter().map(|e| e.0[0]).collect();
        assert_eq!(keys, [1, 3, 5, 9]);
        assert_eq!(leaf_get(&p[..], &[9]), Some(vec![9; 10]));
        // Fill, empty, fill again: holes are compacted away.
        let mut p = leaf(4096);
        let big = vec![7u8; 992];
        for round in 0..3 {
            let mut n = 0u8;
            while insert_at(&mut p, n as usize, &[n], &big) {
                n += 1;
            }
            assert_eq!(n, 4, "round {round}: (4096 - 32) / (16 + 993)");
            while count(&p[..]) > 0 {
                remove_at(&mut p, 0);
            }
        }
    }

    /// Keys that tie on their 8-byte heads (zero padding, shared prefixes, lengths around 8)
    /// still sort and search as byte strings.
    #[test]
    fn heads_order_keys_as_their_bytes() {
        let mut keys: Vec<Vec<u8>> = vec![vec![1], vec![1, 0], vec![0], vec![0, 0], vec![255]];
        for len in [7usize, 8, 9, 12, 17] {
            for last in [0u8, 1, 200] {
                let mut k = vec![1u8; len];
                k[len - 1] = last;
                keys.push(k.clone());
                k[0] = 0;
                keys.push(k);
            }
        }
        keys.push(vec![1, 0, 0, 0, 0, 0, 0, 0, 0]);
        keys.push(vec![1, 0, 0, 0, 0, 0, 0, 0]);
        let mut p = leaf(4096);
        // Insert in a scrambled order.
        for j in 0..keys.len() {
            let k = &keys[(j * 7) % keys.len()];
            let (i, found) = search(&p[..], k);
            assert!(!found, "{k:?} found before insertion");
            assert!(insert_at(&mut p, i, k, k));
        }
        let mut sorted = keys.clone();
        sorted.sort();
        let got: Vec<_> = entries(&p).into_iter().map(|e| e.0).collect();
        assert_eq!(got, sorted);
        for (i, k) in sorted.iter().enumerate() {
            assert_eq!(search(&p[..], k), (i, true), "{k:?}");
            let mut past = k.clone();
            past.push(0);
            assert_eq!(
                search(&p[..], &past).0,
                i + 1,
                "{past:?} sorts right after {k:?}"
            );
        }
    }

    #[test]
    fn splits_fit_both_sides_and_keep_every_entry() {
        for size in [4096usize, 65536] {
            let mut l = leaf(size);
            let v = vec![1u8; size / 4];
            let k = vec![2u8; size / 16];
            let mut n = 0;
            loop {
                let mut key = k.clone();
                key.push(n);
                if !insert_at(&mut l, n as usize, &key, &v) {
                    break;
                }
                n += 1;
            }
            let mut r = vec![0; size];
            let mut key = k.clone();
            key.push(n);
            let sep = split_insert(&mut l, &mut r, n as usize, &key, &v);
            let (a, b) = (entries(&l), entries(&r));
            assert_eq!(a.len() + b.len(), n as usize + 1);
            assert_eq!(b[0].0, sep);
            assert!(a.last().unwrap().0 < sep);
        }
    }

    #[test]
    fn inner_split_moves_the_middle_key_up() {
        let mut l = vec![0; 4096];
        init(&mut l, Kind::Inner);
        set_leftmost(&mut l, 100);
        let mut n = 0u64;
        loop {
            let key = format!("{n:0200}");
            if !insert_at(&mut l, n as usize, key.as_bytes(), &n.to_le_bytes()) {
                break;
            }
            n += 1;
        }
        let mut r = vec![0; 4096];
        let key = format!("{n:0200}");
        let sep = split_insert(&mut l, &mut r, n as usize, key.as_bytes(), &n.to_le_bytes());
        let moved: u64 = String::from_utf8(sep.clone()).unwrap().parse().unwrap();
        assert_eq!(
            child_at(&r[..], 0),
            moved,
            "the separator's child leads the right"
        );
        assert_eq!(count(&l[..]) + count(&r[..]) + 1, n as usize + 1);
        assert_eq!(child_at(&l[..], 0), 100);
        assert_eq!(child_at(&l[..], child_pos_for(&l[..], &sep)), moved - 1);
    }

    #[test]
    fn garbage_pages_do_not_panic() {
        let mut rng = 0x12345678u64;
        for _ in 0..200 {
            let p: Vec<u8> = (0..4096)
                .map(|_| {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    rng as u8
                })
                .collect();
            let _ = leaf_get(&p[..], b"key");
            let _ = child_at(&p[..], child_pos_for(&p[..], b"key"));
            let _ = child_pos_below(&p[..], b"key");
        }
    }
}
