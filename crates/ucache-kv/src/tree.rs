//! The B+tree's algorithms: optimistic lock-coupled reads, and writes inside a batch.
//!
//! Reads (get and scans) pin nothing: each node is read through an optimistic view, the child
//! it names is begun, and only then is the parent validated (its version unchanged), so the
//! child is known to be the one the parent named at a moment when both were consistent. A
//! failed validation restarts from the meta page. A read-only descent takes no pin counts
//! and no latches, as in vmcache; its only shared-memory write is a node's referenced bit,
//! set when the cache's CLOCK hand has cleared it (once per lap, not once per read), as
//! vmcache's reads clear an eviction mark. Without it CLOCK saw no accesses from reads, and
//! evicted hot nodes, the root and inner levels among them, in FIFO order
//! (docs/results/2026-11-26-kv-lookups). A node that is not cached is loaded by a pin that is
//! dropped at once.
//!
//! Scans ([`Cursor`]) go leaf by leaf, each leaf found by a fresh descent that also yields the
//! leaf's fences (the parent keys around it): a forward scan continues at the leaf's upper
//! fence, a backward one below its lower fence. Leaves have no sibling links to keep consistent, and
//! a split between two steps cannot hide keys: the next descent finds them where they went.
//!
//! Writes run under the store's writer lock inside a [`WriteTxn`]: the writer is the only
//! thread that changes nodes, so it reads them under plain pins and takes each page it changes
//! exclusively until the batch ends. Nodes split when full and are never merged: a delete
//! leaves its leaf smaller (possibly empty), and pages are never freed.

use crate::error::{KvError, Result};
use crate::meta;
use crate::node::{self, Kind};
use crate::pages::{Pages, ReadPage};
use crate::txn::WriteTxn;

/// Which leaf a descent looks for.
#[derive(Clone, Copy)]
enum Target<'k> {
    /// The leaf whose range holds this key.
    Key(&'k [u8]),
    /// The leaf holding the greatest key below this bound.
    Below(&'k [u8]),
    /// The leftmost leaf.
    First,
    /// The rightmost leaf.
    Last,
}

/// A leaf's fences from the descent that found it: its keys are at least `lo` and below `hi`
/// (`None`: unbounded).
struct Fences {
    lo: Option<Vec<u8>>,
    hi: Option<Vec<u8>>,
}

fn corrupt(why: String) -> KvError {
    KvError::Corrupt(why)
}

/// Descends optimistically to the leaf for `target` and runs `f` on it; returns `f`'s result
/// once the leaf validated, with the leaf's fences if `fences` is asked.
fn with_leaf<'m, P: Pages, R>(
    map: &'m P,
    target: Target<'_>,
    fences: bool,
    mut f: impl FnMut(&<P::Read<'m> as ReadPage>::View) -> R,
) -> Result<(R, Fences)> {
    let pages = map.pages();
    'restart: loop {
        let m = map.optimistic(0)?;
        let root = meta::root(m.view());
        let mut node: P::Read<'m> = match root {
            r if r > 0 && r < pages => map.optimistic(r)?,
            _ if !m.validate() => continue,
            r => return Err(corrupt(format!("root page {r}"))),
        };
        if !m.validate() {
            continue;
        }
        let mut fence = Fences { lo: None, hi: None };
        loop {
            let v = node.view();
            match node::kind(v) {
                Some(Kind::Leaf) => {
                    let r = f(v);
                    if node.validate() {
                        return Ok((r, fence));
                    }
                    continue 'restart;
                }
                Some(Kind::Inner) => {
                    let n = node::count(v);
                    let pos = match target {
                        Target::Key(k) => node::child_pos_for(v, k),
                        Target::Below(b) => node::child_pos_below(v, b),
                        Target::First => 0,
                        Target::Last => n,
                    };
                    if fences {
                        if pos > 0 {
                            fence.lo = Some(node::key_at(v, pos - 1));
                        }
                        if pos < n {
                            fence.hi = Some(node::key_at(v, pos));
                        }
                    }
                    let child = node::child_at(v, pos);
                    if child == 0 || child >= pages {
                        if node.validate() {
                            return Err(corrupt(format!(
                                "page {} names child {child}",
                                node.index()
                            )));
                        }
                        continue 'restart;
                    }
                    let c = map.optimistic(child)?;
                    if !node.validate() {
                        continue 'restart;
                    }
                    node = c;
                }
                None => {
                    if node.validate() {
                        return Err(corrupt(format!("page {} is not a node", node.index())));
                    }
                    continue 'restart;
                }
            }
        }
    }
}

/// The value of `key`.
pub fn get<P: Pages>(map: &P, key: &[u8]) -> Result<Option<Vec<u8>>> {
    Ok(with_leaf(map, Target::Key(key), false, |v| node::leaf_get(v, key))?.0)
}

/// Scan direction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    Forward,
    Backward,
}

/// The entries with `from <= key < to` (unbounded where `None`), in key order forward or
/// backward, at most `limit` of them.
pub fn scan<P: Pages>(
    map: &P,
    from: Option<&[u8]>,
    to: Option<&[u8]>,
    dir: Direction,
    limit: usize,
) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
    Cursor::new(map, from, to, dir, limit).collect()
}

/// A range iterator: the entries with `from <= key < to` in key order, forward or backward,
/// read one leaf at a time.
///
/// It holds no pin and no lock between leaves, only the key where the next leaf begins (a
/// forward cursor: the leaf's upper fence; a backward one: its lower fence). Each step is a
/// fresh optimistic descent to the leaf that holds that key now, so a writer may split or
/// change leaves between two steps, and the pages may be evicted and reloaded, without the
/// cursor ever reading a stale page or a freed one: keys it has not reached yet are found
/// wherever they went, and keys it has passed are not returned twice. Each leaf is copied out
/// under one validated read, so the entries of one leaf are a consistent snapshot of it; the
/// whole range is not a snapshot (a batch that commits during the iteration shows in the
/// leaves read after it).
pub struct Cursor<'m, P: Pages> {
    map: &'m P,
    from: Option<Vec<u8>>,
    to: Option<Vec<u8>>,
    dir: Direction,
    /// Forward: the next leaf read returns keys at or above this (`None`: from the first key).
    /// Backward: keys below this (`None`: from the last key).
    resume: Option<Vec<u8>>,
    /// Entries not yet returned: at most `left` of them are taken from each leaf.
    left: usize,
    buf: std::vec::IntoIter<(Vec<u8>, Vec<u8>)>,
    done: bool,
}

impl<'m, P: Pages> Cursor<'m, P> {
    /// A cursor over `from <= key < to` that returns at most `limit` entries.
    pub fn new(
        map: &'m P,
        from: Option<&[u8]>,
        to: Option<&[u8]>,
        dir: Direction,
        limit: usize,
    ) -> Self {
        let (from, to) = (from.map(<[u8]>::to_vec), to.map(<[u8]>::to_vec));
        let resume = match dir {
            Direction::Forward => from.clone(),
            Direction::Backward => to.clone(),
        };
        let empty = matches!((&from, &to), (Some(f), Some(t)) if f >= t);
        Cursor {
            map,
            from,
            to,
            dir,
            resume,
            left: limit,
            buf: Vec::new().into_iter(),
            done: empty || limit == 0,
        }
    }

    /// Copies the in-range entries of the next leaf into the buffer and moves `resume` past
    /// it (or marks the end).
    fn next_leaf(&mut self) -> Result<()> {
        let (from, to, left) = (self.from.as_deref(), self.to.as_deref(), self.left);
        let resume = self.resume.as_deref();
        let (got, f) = match self.dir {
            Direction::Forward => {
                let target = resume.map_or(Target::First, Target::Key);
                with_leaf(self.map, target, true, |v| {
                    let start = resume.map_or(0, |c| node::search(v, c).0);
                    (start..node::count(v))
                        .map(|i| (node::key_at(v, i), node::value_at(v, i)))
                        .take_while(|(k, _)| to.is_none_or(|t| &k[..] < t))
                        .take(left)
                        .collect::<Vec<_>>()
                })?
            }
            Direction::Backward => {
                let target = resume.map_or(Target::Last, Target::Below);
                with_leaf(self.map, target, true, |v| {
                    let end = resume.map_or(node::count(v), |b| node::search(v, b).0);
                    (0..end)
                        .rev()
                        .map(|i| (node::key_at(v, i), node::value_at(v, i)))
                        .take_while(|(k, _)| from.is_none_or(|s| &k[..] >= s))
                        .take(left)
                        .collect::<Vec<_>>()
                })?
            }
        };
        // A leaf read through a stale fence may hold keys outside the range: drop them.
        let in_range = |k: &[u8]| from.is_none_or(|s| k >= s) && to.is_none_or(|t| k < t);
        let got: Vec<_> = got.into_iter().filter(|(k, _)| in_range(k)).collect();
        self.left -= got.len();
        self.resume = match self.dir {
            Direction::Forward => f.hi.filter(|hi| to.is_none_or(|t| &hi[..] < t)),
            Direction::Backward => f.lo.filter(|lo| from.is_none_or(|s| &lo[..] > s)),
        };
        self.done = self.resume.is_none() || self.left == 0;
        self.buf = got.into_iter();
        Ok(())
    }
}

impl<P: Pages> Iterator for Cursor<'_, P> {
    type Item = Result<(Vec<u8>, Vec<u8>)>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(e) = self.buf.next() {
                return Some(Ok(e));
            }
            if self.done {
                return None;
            }
            if let Err(e) = self.next_leaf() {
                // An error ends the iteration: the caller cannot know where to resume.
                self.done = true;
                return Some(Err(e));
            }
        }
    }
}

/// The path from the root to the leaf for `key`: (inner page, child position taken) per
/// level, and the leaf.
fn path_to<P: Pages>(txn: &WriteTxn<'_, P>, key: &[u8]) -> Result<(Vec<(u64, usize)>, u64)> {
    let mut id = txn.read(0, meta::root)?;
    let mut path = Vec::new();
    for _ in 0..64 {
        let step = txn.read(id, |p| match node::kind(p) {
            Some(Kind::Leaf) => Ok(None),
            Some(Kind::Inner) => {
                let pos = node::child_pos_for(p, key);
                Ok(Some((pos, node::child_at(p, pos))))
            }
            None => Err(corrupt(format!("page {id} is not a node"))),
        })??;
        match step {
            None => return Ok((path, id)),
            Some((pos, child)) => {
                path.push((id, pos));
                id = child;
            }
        }
    }
    Err(corrupt("the tree is deeper than 64 levels".into()))
}

/// Inserts or replaces `key`'s value.
pub fn put<P: Pages>(txn: &mut WriteTxn<'_, P>, key: &[u8], value: &[u8]) -> Result<()> {
    let (mut path, leaf) = path_to(txn, key)?;
    let ps = txn.page_size();
    let page = txn.write(leaf)?;
    let (pos, found) = node::search(&page[..], key);
    if found {
        node::remove_at(page, pos);
    }
    if node::insert_at(page, pos, key, value) {
        return Ok(());
    }
    // Split the leaf, then carry the separator up until a node has room for it.
    let mut right_page = vec![0u8; ps];
    let mut sep = node::split_insert(page, &mut right_page, pos, key, value);
    let mut right = txn.allocate()?;
    txn.write(right)?.copy_from_slice(&right_page);
    let mut left = leaf;
    while let Some((parent, pos)) = path.pop() {
        let p = txn.write(parent)?;
        let child = right.to_le_bytes();
        if node::insert_at(p, pos, &sep, &child) {
            return Ok(());
        }
        right_page.fill(0);
        sep = node::split_insert(p, &mut right_page, pos, &sep, &child);
        right = txn.allocate()?;
        txn.write(right)?.copy_from_slice(&right_page);
        left = parent;
    }
    // The root split: a new root over the two halves.
    let root = txn.allocate()?;
    let r = txn.write(root)?;
    node::init(r, Kind::Inner);
    node::set_leftmost(r, left);
    let ok = node::insert_at(r, 0, &sep, &right.to_le_bytes());
    debug_assert!(ok);
    meta::set_root(txn.write(0)?, root);
    Ok(())
}

/// Removes `key`; whether it was there.
pub fn delete<P: Pages>(txn: &mut WriteTxn<'_, P>, key: &[u8]) -> Result<bool> {
    let (_, leaf) = path_to(txn, key)?;
    let (pos, found) = txn.read(leaf, |p| node::search(p, key))?;
    if found {
        node::remove_at(txn.write(leaf)?, pos);
    }
    Ok(found)
}
