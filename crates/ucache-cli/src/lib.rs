//! The parts of the `ucache` command that other front ends reuse: the trace readers and replay
//! runner of `ucache sim`, and byte-size parsing. The Python package (crates/ucache-py) calls
//! them so that `ucache.simulate` reads traces and replays them exactly as `ucache sim` does.

pub mod sim;
pub mod size;
