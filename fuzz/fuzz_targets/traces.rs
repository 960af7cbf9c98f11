//! The trace readers of `ucache sim` (text, CSV, MSR, oracleGeneral, record) on arbitrary
//! bytes, fed into the same renumbering the simulator uses: none may panic, hang or run out of
//! memory, and every id they emit must land in a well-formed trace.
//!
//! Input: the first byte picks the format (and the CSV column), the rest is the file.

#![no_main]

use libfuzzer_sys::fuzz_target;
use ucache_fuzz::sim::trace::Remapper;
use ucache_fuzz::sim::{csv, msr, oracle, record, text};

#[derive(Clone, Copy, PartialEq, Eq)]
enum Format {
    Text,
    Csv,
    Msr,
    Oracle,
    Record,
}

fuzz_target!(|data: &[u8]| {
    let Some((&sel, file)) = data.split_first() else {
        return;
    };
    let format = match sel % 5 {
        0 => Format::Text,
        1 => Format::Csv,
        2 => Format::Msr,
        3 => Format::Oracle,
        _ => Format::Record,
    };
    let column = (sel / 5 % 5) as usize; // 0 is refused, which must be an error, not a panic
    let mut map = Remapper::new();
    let mut ids = 0u64;
    let mut sink = |id| {
        ids += 1;
        map.push(id)
    };
    // As `ucache sim` reads a file (sim/format.rs's read_ids, less its BufReader).
    let mut r = file;
    let r = match format {
        Format::Text => text::read(&mut r, &mut sink),
        Format::Csv => csv::read(&mut r, column, &mut sink),
        Format::Msr => msr::read(&mut r, &mut sink),
        Format::Oracle => oracle::read(&mut r, &mut sink),
        Format::Record => record::read(&mut r, &mut sink),
    };
    if format == Format::Csv && column == 0 {
        assert!(r.is_err());
    }
    let t = map.finish();
    assert_eq!(t.requests.len() as u64, ids);
    assert!(t.unique <= ids);
    assert!(t.requests.iter().all(|&i| (i as u64) < t.unique));
    // Binary formats: a whole input of records yields one id per record.
    if r.is_ok() && format == Format::Oracle {
        assert_eq!(ids, file.len() as u64 / 24);
    }
    if r.is_ok() && format == Format::Record {
        assert_eq!(ids, (file.len() as u64 - 8) / 8);
    }
});
