//! No prefetching: the explicit "off" choice, so configurations can name it.

use super::Prefetcher;

#[derive(Clone, Copy, Debug, Default)]
pub struct NoPrefetch;

impl Prefetcher for NoPrefetch {
    fn name(&self) -> &str {
        "none"
    }

    fn is_active(&self) -> bool {
        false
    }

    fn on_miss(&self, _: u64, _: &mut Vec<u64>) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proposes_nothing() {
        let mut out = Vec::new();
        for i in 0..100 {
            NoPrefetch.on_miss(i, &mut out);
        }
        assert!(out.is_empty() && !NoPrefetch.is_active());
    }
}
