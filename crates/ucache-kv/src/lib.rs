//! ucache-kv: a B+tree key-value store on ucache's explicit API, with a write-ahead log,
//! no-steal eviction and crash recovery. See README.md for the design in one page.
//!
//! - [`node`]: a node's layout in one page (a slotted page), read the same way pinned or
//!   optimistically ([`page`]).
//! - [`meta`]: page 0, the root and the page allocator.
//! - [`pages`]: what the tree needs from whatever holds its pages (a ucache mapping; the
//!   bench's plain mmap).
//! - [`tree`]: optimistic lock-coupled reads and scans; puts, deletes and splits in a batch.
//! - [`txn`]: a write batch: pages held, before-images, the log record, undo, and redo.
//! - [`wal`]: the log, group commit, checkpoints' reset.
//! - [`recovery`]: opening, creating, replaying.
//! - [`store`]: [`Kv`], the public face.
//!
//! ```
//! use ucache_kv::{Direction, Kv, KvOptions, WriteBatch};
//! let dir = tempfile::tempdir().unwrap();
//! let mut o = KvOptions::in_dir(dir.path());
//! o.capacity_pages = 1024;
//! let kv = Kv::open(o.clone()).unwrap();
//! kv.put(b"apple", b"red").unwrap();
//! let mut b = WriteBatch::new();
//! b.put(b"banana".to_vec(), b"yellow".to_vec()).delete(b"apple".to_vec());
//! kv.write(&b).unwrap(); // both or neither, durable on return
//! assert_eq!(kv.get(b"banana").unwrap().as_deref(), Some(&b"yellow"[..]));
//! assert_eq!(kv.scan(None, None, Direction::Forward, 10).unwrap().len(), 1);
//! drop(kv); // even without close(), the log has every commit
//! let kv = Kv::open(o).unwrap();
//! assert_eq!(kv.get(b"apple").unwrap(), None);
//! ```

pub mod error;
pub mod meta;
pub mod node;
pub mod page;
pub mod pages;
pub mod recovery;
pub mod store;
pub mod tree;
pub mod txn;
pub mod wal;

pub use error::{KvError, Result};
pub use store::{Cursor, Kv, KvOptions, Op, Txn, WriteBatch, DEFAULT_PLACEMENT, POOL_CHUNK};
pub use tree::Direction;
pub use ucache::Placement;
