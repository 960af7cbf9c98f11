//! CSV traces: the id is one column of each line.

use std::io::BufRead;

use super::text::{for_each_line, parse_id};

/// The `column`-th (1-based) comma-separated field, trimmed of blanks and quotes.
fn field(line: &str, column: usize) -> Option<&str> {
    line.split(',')
        .nth(column.checked_sub(1)?)
        .map(|f| f.trim().trim_matches('"'))
}

pub fn read(
    r: &mut dyn BufRead,
    column: usize,
    sink: &mut dyn FnMut(u64) -> Result<(), String>,
) -> Result<(), String> {
    if column == 0 {
        return Err("--column counts from 1".into());
    }
    for_each_line(r, |t, n| {
        let Some(f) = field(t, column) else {
            return Err(format!(
                "line {n}: no column {column} (the line has {} fields)",
                t.split(',').count()
            ));
        };
        match parse_id(f, n) {
            Ok(id) => sink(id).map_err(|e| format!("line {n}: {e}")),
            Err(_) if n == 1 => Ok(()), // a header
            Err(e) => Err(e),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(s: &str, col: usize) -> Result<Vec<u64>, String> {
        let mut v = Vec::new();
        read(&mut s.as_bytes(), col, &mut |id| {
            v.push(id);
            Ok(())
        })?;
        Ok(v)
    }

    #[test]
    fn reads_the_chosen_column_after_a_header() {
        let s = "time,key,size\n1,10,4\r\n2, \"11\" ,4\n\n3,10,4\n";
        assert_eq!(ids(s, 2).unwrap(), vec![10, 11, 10]);
        assert_eq!(ids("5\n6\n", 1).unwrap(), vec![5, 6]);
    }

    #[test]
    fn names_the_bad_line() {
        let e = ids("k\n1\n2,3\nfoo\n", 1).unwrap_err();
        assert!(e.starts_with("line 4:"), "{e}");
        let e = ids("1,2\n3\n", 2).unwrap_err();
        assert!(e.starts_with("line 2: no column 2"), "{e}");
        assert!(ids("1\n", 0).is_err());
    }
}
