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
    let unit = 1u128 << shift;
    // Exact decimal arithmetic: through f64, digits past its 53 bits would be rounded away,
    // and a fraction of a byte could pass as whole.
    let (int, frac) = num.split_once('.').unwrap_or((num, ""));
    if (int.is_empty() && frac.is_empty()) || frac.contains('.') {
        return Err(format!("'{s}' is not a size"));
    }
    let frac = frac.trim_end_matches('0');
    // 10^26 times the largest unit (2^40) stays within u128.
    if frac.len() > 26 {
        return Err(format!("'{s}': too many decimal places"));
    }
    let too_large = || format!("'{s}' is too large");
    let whole: u128 = if int.is_empty() {
        0
    } else {
        int.parse().map_err(|_| too_large())?
    };
    let part: u128 = if frac.is_empty() {
        0
    } else {
        frac.parse().expect("digits")
    };
    let scale = 10u128.pow(frac.len() as u32);
    if !(part * unit).is_multiple_of(scale) {
        return Err(format!("'{s}' is not a whole number of bytes"));
    }
    let bytes = whole
        .checked_mul(unit)
        .and_then(|b| b.checked_add(part * unit / scale))
        .ok_or_else(too_large)?;
    u64::try_from(bytes).map_err(|_| too_large())
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
        assert!(parse_size(".").is_err());
        assert!(parse_size("1..5G").is_err());
    }

    #[test]
    fn overflow_says_too_large() {
        for big in [
            "18446744073709551616",
            "16777216T",
            "99999999999999999999999999999999999999999",
        ] {
            let e = parse_size(big).unwrap_err();
            assert!(e.contains("too large"), "{big}: {e}");
        }
        assert_eq!(parse_size("18446744073709551615").unwrap(), u64::MAX);
    }

    #[test]
    fn decimals_are_exact() {
        assert_eq!(parse_size("9007199254740993.0").unwrap(), (1 << 53) + 1);
        assert_eq!(parse_size("0.5K").unwrap(), 512);
        assert_eq!(parse_size(".25M").unwrap(), 1 << 18);
        assert_eq!(parse_size("1.000G").unwrap(), 1 << 30);
        assert_eq!(parse_size("0.00000001490116119384765625T").unwrap(), 16384);
        assert!(parse_size("1.00000000000000001G").is_err());
        assert!(parse_size("0.1K").is_err());
    }

    #[test]
    fn formats_round_trip() {
        for s in ["4KiB", "128MiB", "1GiB", "3GiB", "2TiB", "1000", "1536MiB"] {
            assert_eq!(format_size(parse_size(s).unwrap()), s);
        }
    }
}
