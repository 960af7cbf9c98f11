//! The trace formats `ucache sim` reads, and the dispatch to their readers.
//!
//! Each reader turns its input into a stream of 64-bit ids and stops at the first malformed
//! record with an error naming its line (text formats) or byte offset (binary formats).

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use super::trace::{Remapper, Trace};
use super::{csv, msr, oracle, record, text};

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// One decimal id per line; blank lines and lines starting with '#' are skipped.
    Text,
    /// Comma-separated; the id is the decimal integer in column --column (1-based). A first
    /// line whose id field is not a number is taken as a header.
    Csv,
    /// libCacheSim's oracleGeneral binary: packed little-endian 24-byte records
    /// (u32 time, u64 id, u32 size, i64 next access). Every object is one buffer.
    Oracle,
    /// SNIA MSR Cambridge CSV (Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime):
    /// each request, read or write, touches every 4 KiB block it covers; the id is
    /// (disk, block).
    Msr,
    /// ucache's own record format (see `ucache sim`'s record.rs): written by
    /// `ucache bench --record`.
    Record,
}

/// Reads `r` in `format`, feeding every id to `sink`.
pub fn read_ids(
    format: Format,
    column: usize,
    r: impl Read,
    sink: &mut dyn FnMut(u64) -> Result<(), String>,
) -> Result<(), String> {
    let mut r = BufReader::with_capacity(1 << 20, r);
    match format {
        Format::Text => text::read(&mut r as &mut dyn BufRead, sink),
        Format::Csv => csv::read(&mut r, column, sink),
        Format::Oracle => oracle::read(&mut r, sink),
        Format::Msr => msr::read(&mut r, sink),
        Format::Record => record::read(&mut r, sink),
    }
}

/// Reads and renumbers a trace file. `tick` is called with the bytes consumed so far now and
/// then, for a progress bar.
pub fn load(
    path: &Path,
    format: Format,
    column: usize,
    tick: &mut dyn FnMut(u64),
) -> Result<Trace, String> {
    let f = File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut counted = Counted {
        inner: f,
        bytes: 0,
        tick,
    };
    let mut map = Remapper::new();
    read_ids(format, column, &mut counted, &mut |id| map.push(id))
        .map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(map.finish())
}

/// Counts bytes read, for progress.
struct Counted<'a, R> {
    inner: R,
    bytes: u64,
    tick: &'a mut dyn FnMut(u64),
}

impl<R: Read> Read for Counted<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.bytes += n as u64;
        (self.tick)(self.bytes);
        Ok(n)
    }
}
