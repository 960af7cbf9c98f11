//! The plain text trace: one decimal id per line.

use std::io::BufRead;

/// Parses a decimal id, or says what is wrong with `tok` on line `line`.
pub fn parse_id(tok: &str, line: u64) -> Result<u64, String> {
    tok.parse::<u64>()
        .map_err(|_| format!("line {line}: '{tok}' is not an id (a decimal integer below 2^64)"))
}

/// Calls `f(line, number)` for every line that is not blank, without its line ending, and
/// numbers lines from 1 so that every reader's errors can name the line. The loop the
/// line-based formats (text, CSV, MSR) share.
pub fn for_each_line(
    r: &mut dyn BufRead,
    mut f: impl FnMut(&str, u64) -> Result<(), String>,
) -> Result<(), String> {
    let mut line = String::new();
    let mut n = 0u64;
    loop {
        line.clear();
        n += 1;
        if r.read_line(&mut line)
            .map_err(|e| format!("line {n}: {e}"))?
            == 0
        {
            return Ok(());
        }
        let mut t = line.trim_end_matches(['\n', '\r']);
        if n == 1 {
            // A byte-order mark (Excel, PowerShell) is not part of the first field.
            t = t.strip_prefix('\u{feff}').unwrap_or(t);
        }
        if !t.trim().is_empty() {
            f(t, n)?;
        }
    }
}

pub fn read(
    r: &mut dyn BufRead,
    sink: &mut dyn FnMut(u64) -> Result<(), String>,
) -> Result<(), String> {
    for_each_line(r, |line, n| {
        let t = line.trim();
        if t.starts_with('#') {
            return Ok(());
        }
        sink(parse_id(t, n)?).map_err(|e| format!("line {n}: {e}"))
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
    fn reads_ids_skipping_blanks_and_comments() {
        assert_eq!(ids("1\n# c\n\n 22 \n3").unwrap(), vec![1, 22, 3]);
    }

    #[test]
    fn names_the_bad_line() {
        let e = ids("1\n2\nx7\n").unwrap_err();
        assert!(e.starts_with("line 3:") && e.contains("x7"), "{e}");
    }
}
