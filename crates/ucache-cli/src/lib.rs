//! The parts of the `ucache` command that other front ends reuse: the bench's building blocks
//! (memory cgroups, Zipf, latency histograms, CPU time; `ucache-kv bench` reuses them), the
//! trace readers and replay runner of `ucache sim`, and byte-size parsing. The Python package (crates/ucache-py) calls
//! them so that `ucache.simulate` reads traces and replays them exactly as `ucache sim` does.

pub mod bench;
pub mod sim;
pub mod size;
