//! Objects kept in memory: for tests, examples, and as the simplest store to read.

use std::collections::HashMap;
use std::io;
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};

use super::{Object, OpenOptions, Store};
use crate::error::{Error, Result};

/// A map of named byte vectors.
#[derive(Default, Clone)]
pub struct MemoryStore {
    objects: Arc<Mutex<HashMap<String, Arc<Bytes>>>>,
}

impl MemoryStore {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds or replaces an object.
    pub fn insert(&self, name: &str, data: Vec<u8>) {
        let obj = Arc::new(Bytes {
            name: name.to_string(),
            data: RwLock::new(data),
        });
        self.objects.lock().insert(name.to_string(), obj);
    }

    /// A copy of an object's current bytes.
    pub fn get(&self, name: &str) -> Option<Vec<u8>> {
        self.objects.lock().get(name).map(|o| o.data.read().clone())
    }
}

impl Store for MemoryStore {
    fn open(&self, object: &str, options: OpenOptions) -> Result<Arc<dyn Object>> {
        let mut objects = self.objects.lock();
        let bytes = match objects.get(object) {
            Some(b) => b.clone(),
            None if options.create => {
                let b = Arc::new(Bytes {
                    name: object.to_string(),
                    data: RwLock::new(Vec::new()),
                });
                objects.insert(object.to_string(), b.clone());
                b
            }
            None => {
                return Err(Error::NotFound {
                    object: object.to_string(),
                })
            }
        };
        Ok(Arc::new(MemoryObject {
            bytes,
            writable: options.write || options.create,
        }))
    }
}

/// One object's bytes, shared by every handle opened on it.
struct Bytes {
    name: String,
    data: RwLock<Vec<u8>>,
}

/// A handle on an object: read-only unless opened for writing, as a file would be.
struct MemoryObject {
    bytes: Arc<Bytes>,
    writable: bool,
}

impl MemoryObject {
    fn check_writable(&self) -> io::Result<()> {
        if self.writable {
            Ok(())
        } else {
            Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!("'{}' was opened read-only", self.bytes.name),
            ))
        }
    }
}

fn too_large() -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        "offset or length beyond what memory can hold",
    )
}

/// Resizes to `len`, failing instead of aborting when memory cannot be had.
fn grow(data: &mut Vec<u8>, len: usize) -> io::Result<()> {
    if len > data.len() {
        data.try_reserve_exact(len - data.len())
            .map_err(|_| io::Error::from(io::ErrorKind::OutOfMemory))?;
    }
    data.resize(len, 0);
    Ok(())
}

impl Object for MemoryObject {
    fn name(&self) -> &str {
        &self.bytes.name
    }
    fn len(&self) -> io::Result<u64> {
        Ok(self.bytes.data.read().len() as u64)
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.check_writable()?;
        let len = usize::try_from(len).map_err(|_| too_large())?;
        grow(&mut self.bytes.data.write(), len)
    }
    fn accepts_unaligned(&self) -> bool {
        true
    }
    /// Memory has no latency to hide: a scan copies straight from it.
    fn reads_ahead(&self) -> bool {
        true
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let data = self.bytes.data.read();
        let start = usize::try_from(offset)
            .unwrap_or(usize::MAX)
            .min(data.len());
        let n = buf.len().min(data.len() - start);
        buf[..n].copy_from_slice(&data[start..start + n]);
        Ok(n)
    }
    /// As `pwrite`: an empty write changes nothing, and an end past what memory can hold is
    /// an error, not an abort.
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.check_writable()?;
        if buf.is_empty() {
            return Ok(());
        }
        let start = usize::try_from(offset).map_err(|_| too_large())?;
        let end = start.checked_add(buf.len()).ok_or_else(too_large)?;
        let mut data = self.bytes.data.write();
        if data.len() < end {
            grow(&mut data, end)?;
        }
        data[start..end].copy_from_slice(buf);
        Ok(())
    }
    fn sync(&self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_object_is_not_found() {
        let s = MemoryStore::new();
        assert!(matches!(
            s.open("nope", OpenOptions::read_only()),
            Err(Error::NotFound { .. })
        ));
        assert!(s.open("new", OpenOptions::create()).is_ok());
    }

    #[test]
    fn short_read_at_end() {
        let s = MemoryStore::new();
        s.insert("a", vec![1; 100]);
        let o = s.open("a", OpenOptions::read_only()).unwrap();
        let mut b = [0u8; 64];
        assert_eq!(o.read_at(&mut b, 80).unwrap(), 20);
        assert_eq!(o.read_at(&mut b, 200).unwrap(), 0);
    }

    #[test]
    fn read_only_handle_refuses_writes_and_growth() {
        let s = MemoryStore::new();
        s.insert("a", vec![1; 100]);
        let ro = s.open("a", OpenOptions::read_only()).unwrap();
        let e = ro.write_at(&[2], 0).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::PermissionDenied);
        assert_eq!(
            ro.set_len(200).unwrap_err().kind(),
            io::ErrorKind::PermissionDenied
        );
        assert_eq!(s.get("a").unwrap(), vec![1; 100]);
        let rw = s.open("a", OpenOptions::read_write()).unwrap();
        rw.write_at(&[2], 0).unwrap();
        assert_eq!(s.get("a").unwrap()[0], 2);
        let mut b = [0u8; 1];
        ro.read_at(&mut b, 0).unwrap();
        assert_eq!(b[0], 2, "handles share the bytes");
    }
}
