//! libCacheSim's `oracleGeneral` binary traces, the format of its public trace collection.
//!
//! Packed little-endian records of 24 bytes: `u32` timestamp, `u64` object id, `u32` object
//! size, `i64` logical time of the next access to the same object. Only the id matters here:
//! every object is one buffer (a block-cache view, where sizes are uniform).

use std::io::{BufRead, Read};

const RECORD: usize = 24;

/// Reads until `buf` is full or the input ends; returns the bytes read.
pub fn fill(r: &mut dyn Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

pub fn read(
    r: &mut dyn BufRead,
    sink: &mut dyn FnMut(u64) -> Result<(), String>,
) -> Result<(), String> {
    let mut rec = [0u8; RECORD];
    let mut offset = 0u64;
    loop {
        let n = fill(r, &mut rec).map_err(|e| format!("byte offset {offset}: {e}"))?;
        if n == 0 {
            return Ok(());
        }
        if n < RECORD {
            return Err(format!(
                "byte offset {offset}: truncated record ({n} of {RECORD} bytes): not an \
                 oracleGeneral trace, or cut short"
            ));
        }
        let id = u64::from_le_bytes(rec[4..12].try_into().expect("8 bytes"));
        sink(id).map_err(|e| format!("byte offset {offset}: {e}"))?;
        offset += RECORD as u64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(time: u32, id: u64, size: u32, next: i64) -> Vec<u8> {
        let mut v = time.to_le_bytes().to_vec();
        v.extend(id.to_le_bytes());
        v.extend(size.to_le_bytes());
        v.extend(next.to_le_bytes());
        v
    }

    fn ids(b: &[u8]) -> Result<Vec<u64>, String> {
        let mut v = Vec::new();
        read(&mut &b[..], &mut |id| {
            v.push(id);
            Ok(())
        })?;
        Ok(v)
    }

    #[test]
    fn reads_ids_from_records() {
        let mut b = record(1, 42, 4096, 2);
        b.extend(record(2, u64::MAX - 3, 100, -1));
        assert_eq!(ids(&b).unwrap(), vec![42, u64::MAX - 3]);
        assert_eq!(ids(&[]).unwrap(), Vec::<u64>::new());
    }

    #[test]
    fn names_the_offset_of_a_truncated_record() {
        let mut b = record(1, 42, 4096, 2);
        b.extend(&record(2, 43, 1, 1)[..10]);
        let e = ids(&b).unwrap_err();
        assert!(
            e.starts_with("byte offset 24: truncated record (10 of 24"),
            "{e}"
        );
    }
}
