//! The data copied into one anonymous array before the run: what a lookup costs when nothing
//! stands between the program and memory. The in-memory bar for ucache's hit path.

use std::fs::File;
use std::os::unix::fs::FileExt;

use super::{Params, System};
use crate::bench::worker::ThreadCtx;

pub struct Array {
    data: Vec<u8>,
}

impl Array {
    pub fn open(p: &Params) -> Result<Self, String> {
        let file = File::open(&p.path).map_err(|e| format!("open {}: {e}", p.path.display()))?;
        let mut data = vec![0u8; p.data_bytes as usize];
        for (k, chunk) in data.chunks_mut(1 << 20).enumerate() {
            file.read_exact_at(chunk, (k as u64) << 20)
                .map_err(|e| format!("read {}: {e}", p.path.display()))?;
        }
        Ok(Array { data })
    }
}

impl System for Array {
    fn run_thread(&self, ctx: &mut ThreadCtx) -> Result<(), String> {
        let bs = ctx.params().buffer_size;
        while ctx.running() {
            let t = ctx.sample();
            let idx = ctx.next_index();
            let off = idx as usize * bs;
            ctx.touch(&self.data[off..off + bs], idx);
            ctx.done(1, t);
        }
        Ok(())
    }
}
