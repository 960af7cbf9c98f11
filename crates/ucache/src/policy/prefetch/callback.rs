//! An application-supplied prefetcher: the application knows its access pattern (the next
//! leaf of a B-tree scan, the neighbours of a graph vertex) better than any detector.

use super::Prefetcher;

type Hook = dyn Fn(u64, &mut Vec<u64>) + Send + Sync;

pub struct Callback {
    name: String,
    hook: Box<Hook>,
}

impl Callback {
    /// `hook(index, out)` runs on the missing thread after each demand miss and appends the
    /// buffers to read ahead.
    pub fn new(name: &str, hook: impl Fn(u64, &mut Vec<u64>) + Send + Sync + 'static) -> Self {
        Callback {
            name: name.to_string(),
            hook: Box::new(hook),
        }
    }
}

impl Prefetcher for Callback {
    fn name(&self) -> &str {
        &self.name
    }

    fn on_miss(&self, index: u64, out: &mut Vec<u64>) {
        (self.hook)(index, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forwards_to_the_closure() {
        // A "tree" whose children of node i are 2i+1 and 2i+2.
        let p = Callback::new("tree", |i, out| out.extend([2 * i + 1, 2 * i + 2]));
        let mut out = Vec::new();
        p.on_miss(0, &mut out);
        p.on_miss(3, &mut out);
        assert_eq!(out, vec![1, 2, 7, 8]);
        assert_eq!(p.name(), "tree");
    }
}
