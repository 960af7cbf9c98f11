//! `Mapping::write`: the counterpart of `Mapping::read`, a copy into the mapping through
//! exclusive pins, buffer by buffer.

use std::sync::Arc;

use super::MappingCore;
use crate::error::{Error, Result};

impl MappingCore {
    /// Copies `data` to `offset`: each buffer the range overlaps is pinned exclusively (and
    /// loaded first on a miss, so the bytes of a partly covered buffer that the write leaves
    /// alone stay what the object holds), written and released dirty.
    pub(crate) fn write_from(self: &Arc<Self>, offset: u64, data: &[u8]) -> Result<()> {
        let r = self.range(offset, data.len() as u64)?;
        if !self.writable {
            return Err(Error::ReadOnly);
        }
        let end = offset + data.len() as u64;
        for i in r {
            let first = i << self.shift;
            let from = offset.max(first);
            let to = end.min(first + self.bs as u64);
            let src = &data[(from - offset) as usize..(to - offset) as usize];
            let within = (from - first) as usize;
            let mut g = self.pin_exclusive(i)?;
            g[within..within + src.len()].copy_from_slice(src);
        }
        Ok(())
    }
}
