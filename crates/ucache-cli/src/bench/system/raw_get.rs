//! What the object store gives without a cache: each thread keeps `--prefetch-depth` ranged
//! GETs of random buffers in flight (one GET per buffer, no coalescing) and reads them from
//! private memory. ucache-prefetch over the same object runs the same concurrency, so the two
//! differ by the cache's own cost.

use std::ops::Range;
use std::sync::Arc;

use ucache::store::Object;
use ucache_object::S3Object;

use super::{s3_config, Params, System};
use crate::bench::worker::ThreadCtx;

pub struct RawGet {
    object: Arc<S3Object>,
}

impl RawGet {
    pub fn open(p: &Params) -> Result<Self, String> {
        let url = p
            .store
            .s3_url()
            .ok_or("raw-get needs an S3 store (--store s3://bucket/key)")?;
        let cfg =
            s3_config(url, p.endpoint.as_deref())?.max_in_flight(p.prefetch_depth * p.threads);
        let object = S3Object::open(&cfg).map_err(|e| format!("open {url}: {e}"))?;
        if object.len().unwrap_or(0) < p.data_bytes {
            return Err(format!("{url} is shorter than --data"));
        }
        Ok(RawGet { object })
    }
}

impl System for RawGet {
    fn run_thread(&self, ctx: &mut ThreadCtx) -> Result<(), String> {
        let bs = ctx.params().buffer_size as u64;
        let mut indices = vec![0u64; ctx.params().prefetch_depth];
        while ctx.running() {
            let t = ctx.sample();
            ctx.next_indices(&mut indices);
            let ranges: Vec<Range<u64>> = indices.iter().map(|&i| i * bs..(i + 1) * bs).collect();
            let got = self.object.get_ranges(&ranges);
            for (&idx, r) in indices.iter().zip(got) {
                let bytes = r.map_err(|e| format!("GET of buffer {idx}: {e}"))?;
                ctx.touch(&bytes, idx);
            }
            ctx.done(indices.len() as u64, t);
        }
        Ok(())
    }

    fn latency_unit(&self) -> &'static str {
        "batch of --prefetch-depth GETs"
    }
}
