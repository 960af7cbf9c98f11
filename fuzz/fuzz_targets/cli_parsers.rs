//! The parsers of the `ucache` command line: `--memory 1.5GiB`-style sizes (`parse_size`), the
//! cache sizes of `ucache sim --sizes 1%,5000`, and `--generate zipf:N:U[:ALPHA]`. On any
//! string: no panic, and what they accept is consistent (a size reads back from its shortest
//! spelling and from its decimal bytes).

#![no_main]

use libfuzzer_sys::fuzz_target;
use ucache_fuzz::sim::generate::parse_generator;
use ucache_fuzz::sim::sizes::{parse_sizes, CacheSize};
use ucache_fuzz::size::{format_size, parse_size};

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(n) = parse_size(s) {
        assert_eq!(parse_size(&format_size(n)), Ok(n), "{s:?}");
        assert_eq!(parse_size(&n.to_string()), Ok(n), "{s:?}");
    }
    if let Ok(v) = parse_sizes(s) {
        assert!(!v.is_empty());
        for c in v {
            match c {
                CacheSize::Percent(p) => assert!(p > 0.0 && p <= 100.0, "{s:?}"),
                CacheSize::Buffers(n) => assert!(n > 0, "{s:?}"),
            }
            for unique in [0, 1, 7, 1 << 40, u64::MAX] {
                let b = c.resolve(unique);
                assert!(b >= 1 && b <= unique.max(1), "{s:?} {unique}");
            }
        }
    }
    if let Ok(z) = parse_generator(s) {
        assert!(z.universe > 0 && z.universe <= u32::MAX as u64 / 2, "{s:?}");
        assert!((0.0..10.0).contains(&z.alpha), "{s:?}");
    }
});
