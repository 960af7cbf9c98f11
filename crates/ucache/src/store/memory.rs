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
    objects: Arc<Mutex<HashMap<String, Arc<MemoryObject>>>>,
}

impl MemoryStore {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds or replaces an object.
    pub fn insert(&self, name: &str, data: Vec<u8>) {
        let obj = Arc::new(MemoryObject {
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
        if let Some(o) = objects.get(object) {
            return Ok(o.clone());
        }
        if !options.create {
            return Err(Error::NotFound {
                object: object.to_string(),
            });
        }
        let obj = Arc::new(MemoryObject {
            name: object.to_string(),
            data: RwLock::new(Vec::new()),
        });
        objects.insert(object.to_string(), obj.clone());
        Ok(obj)
    }
}

struct MemoryObject {
    name: String,
    data: RwLock<Vec<u8>>,
}

impl Object for MemoryObject {
    fn name(&self) -> &str {
        &self.name
    }
    fn len(&self) -> io::Result<u64> {
        Ok(self.data.read().len() as u64)
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.data.write().resize(len as usize, 0);
        Ok(())
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let data = self.data.read();
        let start = (offset as usize).min(data.len());
        let n = buf.len().min(data.len() - start);
        buf[..n].copy_from_slice(&data[start..start + n]);
        Ok(n)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        let mut data = self.data.write();
        let end = offset as usize + buf.len();
        if data.len() < end {
            data.resize(end, 0);
        }
        data[offset as usize..end].copy_from_slice(buf);
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
}
