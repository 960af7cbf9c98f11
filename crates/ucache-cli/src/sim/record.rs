//! ucache's own trace record format, the one `ucache bench --record` writes.
//!
//! The 8-byte magic `UCTRACE1`, then one little-endian `u64` buffer id per access, nothing else:
//! trivial to write from any hot path (an append of 8 bytes), trivial to read at disk speed,
//! and self-identifying so a wrong `--format` fails at byte 0 instead of replaying garbage.

use std::fs::File;
use std::io::{self, BufRead, BufWriter, Write};
use std::path::Path;

use super::oracle::fill;

pub const MAGIC: &[u8; 8] = b"UCTRACE1";

/// Appends accesses to a record file.
pub struct RecordWriter<W: Write> {
    out: BufWriter<W>,
}

impl RecordWriter<File> {
    pub fn create(path: &Path) -> io::Result<Self> {
        RecordWriter::new(File::create(path)?)
    }
}

impl<W: Write> RecordWriter<W> {
    /// Starts a record on `w`, writing the magic.
    pub fn new(w: W) -> io::Result<Self> {
        let mut out = BufWriter::with_capacity(1 << 16, w);
        out.write_all(MAGIC)?;
        Ok(RecordWriter { out })
    }

    /// Records one access to buffer `id`.
    #[inline]
    pub fn push(&mut self, id: u64) -> io::Result<()> {
        self.out.write_all(&id.to_le_bytes())
    }

    /// Flushes and returns the underlying writer.
    pub fn finish(self) -> io::Result<W> {
        self.out.into_inner().map_err(|e| e.into_error())
    }
}

pub fn read(
    r: &mut dyn BufRead,
    sink: &mut dyn FnMut(u64) -> Result<(), String>,
) -> Result<(), String> {
    let mut magic = [0u8; 8];
    let n = fill(r, &mut magic).map_err(|e| format!("byte offset 0: {e}"))?;
    if n < 8 || &magic != MAGIC {
        return Err("byte offset 0: not a ucache record trace (no UCTRACE1 magic)".into());
    }
    let mut offset = 8u64;
    let mut rec = [0u8; 8];
    loop {
        let n = fill(r, &mut rec).map_err(|e| format!("byte offset {offset}: {e}"))?;
        if n == 0 {
            return Ok(());
        }
        if n < 8 {
            return Err(format!(
                "byte offset {offset}: truncated record ({n} of 8 bytes)"
            ));
        }
        sink(u64::from_le_bytes(rec)).map_err(|e| format!("byte offset {offset}: {e}"))?;
        offset += 8;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(b: &[u8]) -> Result<Vec<u64>, String> {
        let mut v = Vec::new();
        read(&mut &b[..], &mut |id| {
            v.push(id);
            Ok(())
        })?;
        Ok(v)
    }

    #[test]
    fn round_trips_through_the_writer() {
        let mut w = RecordWriter::new(Vec::new()).unwrap();
        for id in [3, 0, u64::MAX, 3] {
            w.push(id).unwrap();
        }
        let b = w.finish().unwrap();
        assert_eq!(b.len(), 8 + 4 * 8);
        assert_eq!(ids(&b).unwrap(), vec![3, 0, u64::MAX, 3]);
    }

    #[test]
    fn rejects_wrong_magic_and_truncation() {
        let e = ids(b"UCTRACE0\0\0\0\0\0\0\0\0").unwrap_err();
        assert!(e.starts_with("byte offset 0:"), "{e}");
        let mut b = MAGIC.to_vec();
        b.extend(7u64.to_le_bytes());
        b.extend([1, 2, 3]);
        let e = ids(&b).unwrap_err();
        assert!(
            e.starts_with("byte offset 16: truncated record (3 of 8"),
            "{e}"
        );
    }
}
