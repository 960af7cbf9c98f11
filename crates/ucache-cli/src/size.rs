//! Byte sizes on the command line and in file names.
//!
//! Every suffix is a power of 1024, including the SI-looking ones (`K`, `MB`): people typing
//! `--memory 128M` for a cache budget mean MiB, and a silent 5% difference between two spellings
//! would make results taken with each incomparable.

/// Parses `4096`, `4K`, `4KiB`, `1.5G`, `128MB` (case-insensitive) into bytes.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, suffix) = t.split_at(split);
    if num.is_empty() {
        return Err(format!(
            "'{s}' is not a size: expected a number, e.g. 4KiB, 128MiB, 1GiB"
        ));
    }
    let shift = match suffix.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        other => {
            return Err(format!(
                "'{s}': unknown size suffix '{other}' (use K, M, G, KiB, MiB, GiB)"
            ))
        }
    };
    let unit = 1u64 << shift;
    if let Ok(n) = num.parse::<u64>() {
        return n
            .checked_mul(unit)
            .ok_or_else(|| format!("'{s}' is too large"));
    }
    let f: f64 = num.parse().map_err(|_| format!("'{s}' is not a size"))?;
    let bytes = f * unit as f64;
    if !(0.0..1.8e19).contains(&bytes) || bytes.fract() != 0.0 {
        return Err(format!("'{s}' is not a whole number of bytes"));
    }
    Ok(bytes as u64)
}

/// The shortest exact spelling (`1GiB`, `512MiB`, `4KiB`, `1000`), so it can name files.
pub fn format_size(bytes: u64) -> String {
    for (shift, name) in [(40, "TiB"), (30, "GiB"), (20, "MiB"), (10, "KiB")] {
        let unit = 1u64 << shift;
        if bytes >= unit && bytes.is_multiple_of(unit) {
            return format!("{}{name}", bytes / unit);
        }
    }
    bytes.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_suffixes_as_powers_of_1024() {
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("4K").unwrap(), 4096);
        assert_eq!(parse_size("4KiB").unwrap(), 4096);
        assert_eq!(parse_size("4kb").unwrap(), 4096);
        assert_eq!(parse_size("128M").unwrap(), 128 << 20);
        assert_eq!(parse_size("128MiB").unwrap(), 128 << 20);
        assert_eq!(parse_size("1G").unwrap(), 1 << 30);
        assert_eq!(parse_size("1GiB").unwrap(), 1 << 30);
        assert_eq!(parse_size(" 2 GiB ").unwrap(), 2 << 30);
        assert_eq!(parse_size("1.5G").unwrap(), 3 << 29);
        assert_eq!(parse_size("0").unwrap(), 0);
    }

    #[test]
    fn rejects_garbage() {
        assert!(parse_size("").is_err());
        assert!(parse_size("G").is_err());
        assert!(parse_size("12Q").is_err());
        assert!(parse_size("1.5").is_err());
        assert!(parse_size("-1G").is_err());
        assert!(parse_size("99999999999T").is_err());
    }

    #[test]
    fn formats_round_trip() {
        for s in ["4KiB", "128MiB", "1GiB", "3GiB", "2TiB", "1000", "1536MiB"] {
            assert_eq!(format_size(parse_size(s).unwrap()), s);
        }
    }
}
