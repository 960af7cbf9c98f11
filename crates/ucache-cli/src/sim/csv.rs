//! CSV traces: the id is one column of each line.

use std::io::BufRead;

use super::text::{for_each_line, parse_id};

/// The fields of one line, as RFC 4180 has them: commas inside double quotes do not split,
/// `""` inside quotes is one quote, and blanks around a field are trimmed. A quote left open
/// is an error, since the columns after it cannot be told apart.
fn fields(line: &str) -> Result<Vec<String>, &'static str> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' if quoted && chars.peek() == Some(&'"') => {
                chars.next();
                cur.push('"');
            }
            '"' => quoted = !quoted,
            ',' if !quoted => out.push(std::mem::take(&mut cur).trim().to_string()),
            c => cur.push(c),
        }
    }
    if quoted {
        return Err("a quote is not closed");
    }
    out.push(cur.trim().to_string());
    Ok(out)
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
        let fs = fields(t).map_err(|e| format!("line {n}: {e}"))?;
        let Some(f) = fs.get(column - 1) else {
            return Err(format!(
                "line {n}: no column {column} (the line has {} fields)",
                fs.len()
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
    fn quoted_commas_do_not_split() {
        assert_eq!(
            fields(r#"1, "/x,7" ,"say ""hi""",42"#).unwrap(),
            ["1", "/x,7", r#"say "hi""#, "42"]
        );
        assert_eq!(
            ids("1,\"/x,7\",42\n2,\"/z\",43\n", 3).unwrap(),
            vec![42, 43]
        );
        let e = ids("1,\"open,2\n", 2).unwrap_err();
        assert!(e.starts_with("line 1: a quote"), "{e}");
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
