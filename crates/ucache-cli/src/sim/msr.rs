//! SNIA MSR Cambridge block traces (Narayanan et al., "Write off-loading", FAST'08), the
//! block-IO traces most cache papers replay.
//!
//! CSV lines `Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime`, offsets and sizes
//! in bytes. A request touches every 4 KiB block it covers, each one access, reads and writes
//! alike (a write-back cache holds written blocks too). The id packs (disk, block): 16 bits of
//! disk number, 48 bits of block number (1 EiB per disk).

use std::io::BufRead;

use super::text::for_each_line;

pub const BLOCK: u64 = 4096;
const BLOCK_BITS: u32 = 48;
/// Largest request accepted: Linux's largest single IO (`MAX_RW_COUNT`, just under 2 GiB). A
/// line claiming more is damaged, and would otherwise feed up to 2^48 blocks (one line of
/// fuzz/corpus input took minutes and gigabytes).
pub const MAX_SIZE: u64 = 1 << 31;

fn num(f: Option<&str>, what: &str, line: u64) -> Result<u64, String> {
    let f = f.ok_or_else(|| format!("line {line}: missing {what} (expected 7 fields: Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime)"))?;
    f.trim().parse().map_err(|_| {
        format!(
            "line {line}: {what} '{}' is not a decimal integer",
            f.trim()
        )
    })
}

pub fn read(
    r: &mut dyn BufRead,
    sink: &mut dyn FnMut(u64) -> Result<(), String>,
) -> Result<(), String> {
    for_each_line(r, |line, n| {
        let t = line.trim();
        let mut f = t.split(',');
        let _time = f.next();
        let _host = f.next();
        let disk = num(f.next(), "DiskNumber", n)?;
        let kind = f.next().map(str::trim).unwrap_or("");
        if !kind.eq_ignore_ascii_case("read") && !kind.eq_ignore_ascii_case("write") {
            return Err(format!("line {n}: Type '{kind}' is neither Read nor Write"));
        }
        let offset = num(f.next(), "Offset", n)?;
        let size = num(f.next(), "Size", n)?;
        if disk >= 1 << (64 - BLOCK_BITS) {
            return Err(format!(
                "line {n}: DiskNumber {disk} is too large (at most 65535)"
            ));
        }
        if size == 0 {
            return Ok(());
        }
        if size > MAX_SIZE {
            return Err(format!(
                "line {n}: Size {size} is larger than any block request ({MAX_SIZE} bytes)"
            ));
        }
        let last = offset
            .checked_add(size - 1)
            .ok_or_else(|| format!("line {n}: Offset + Size overflows"))?
            / BLOCK;
        if last >= 1 << BLOCK_BITS {
            return Err(format!("line {n}: Offset {offset} is beyond 1 EiB"));
        }
        for block in offset / BLOCK..=last {
            sink(disk << BLOCK_BITS | block).map_err(|e| format!("line {n}: {e}"))?;
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(s: &str) -> Result<Vec<u64>, String> {
        let mut v = Vec::new();
        read(&mut s.as_bytes(), &mut |id| {
            v.push(id);
            Ok(())
        })?;
        Ok(v)
    }

    #[test]
    fn splits_requests_into_blocks_per_disk() {
        let s = "128166372003061629,hm,0,Read,8192,8192,100\n\
                 128166372003061630,hm,1,Write,4000,200,100\n\
                 128166372003061631,hm,0,read,0,0,5\n";
        assert_eq!(ids(s).unwrap(), vec![2, 3, 1 << 48, (1 << 48) | 1]);
    }

    #[test]
    fn names_the_bad_line() {
        let e = ids("1,h,0,Read,0,4096,1\n1,h,0,Trim,0,4096,1\n").unwrap_err();
        assert!(e.starts_with("line 2: Type 'Trim'"), "{e}");
        let e = ids("1,h,0,Read,x,4096,1\n").unwrap_err();
        assert!(e.starts_with("line 1: Offset 'x'"), "{e}");
        let e = ids("1,h,0,Read\n").unwrap_err();
        assert!(e.starts_with("line 1: missing Offset"), "{e}");
    }

    /// Found by fuzz/fuzz_targets/traces.rs: one line with a Size of ~900 GB fed 2^28 blocks
    /// to the simulator (and 2^48 were possible) before this limit.
    #[test]
    fn refuses_requests_larger_than_any_block_io() {
        let e = ids("1,hm,0,Read,8191,968021006163,101
")
        .unwrap_err();
        assert!(e.starts_with("line 1: Size 968021006163 is larger"), "{e}");
        assert_eq!(
            ids(&format!("1,h,0,Read,0,{MAX_SIZE},1\n")).unwrap().len(),
            1 << 19
        );
    }
}
