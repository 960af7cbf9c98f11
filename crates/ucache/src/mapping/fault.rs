//! Transparent faults: a load or store that found no page, or a first store to a clean
//! buffer, served with the pin path's protocol but without a pin.

use std::sync::Arc;

use super::MappingCore;
use crate::error::{Error, Result};
use crate::fault::FaultAction;
use crate::held::Hold;
use crate::sigbus::FaultTarget;
use crate::state::{BufferState, Phase, Pin};
use crate::stats::Counter;
use crate::stopwatch::Stopwatch;

impl MappingCore {
    /// Serves a fault at byte `offset` of a transparent mapping, on the faulting thread
    /// (inside its SIGBUS handler): a miss is loaded like a pin's miss, a first store to a
    /// clean buffer marks it dirty and lifts the write protection. Returning makes the access
    /// run again.
    pub(crate) fn fault(self: &Arc<Self>, offset: usize, write: bool) -> Result<()> {
        let i = (offset >> self.shift) as u64;
        let s = self.slot(i)?;
        if write && !self.writable {
            return Err(Error::ReadOnly);
        }
        self.stats().add(Counter::Faults, 1);
        let mut sw = self.stopwatch();
        let r = self.serve_fault(s, i, offset, write, &mut sw);
        if sw.is_on() {
            self.stats().add(Counter::FaultsTimed, 1);
            sw.total(self.stats(), Counter::FaultNs);
        }
        r
    }

    fn serve_fault(
        self: &Arc<Self>,
        s: &BufferState,
        i: u64,
        offset: usize,
        write: bool,
        sw: &mut Stopwatch,
    ) -> Result<()> {
        let mut w = s.load();
        loop {
            match w.phase() {
                Phase::Evicted if w.idle() => {
                    // A shared pin held across the readahead the miss starts: its claims must
                    // not evict the very buffer the access waits for. Under a budget of a
                    // buffer or two they did, and every retry of the access loaded it again
                    // and evicted it again, for good.
                    let pin = if self.prefetching {
                        Pin::Shared
                    } else {
                        Pin::None
                    };
                    if self.load_one(i, w, pin, write, sw)? {
                        if self.prefetching {
                            self.after_miss(i);
                            s.unpin_shared();
                        }
                        sw.lap(self.stats(), Counter::FaultBookkeepingNs);
                        return Ok(());
                    }
                }
                Phase::Aside if w.idle() => {
                    if self.restore(i, w, Pin::None, write, sw)? {
                        return Ok(());
                    }
                }
                // A read that raced the load of its page: it is there now.
                Phase::Cached if !write => return Ok(()),
                Phase::Cached if w.exclusive() => {
                    if crate::held::held(self.addr(), i) == Some(Hold::Exclusive)
                        || crate::held::unrecorded_exclusive()
                    {
                        // This thread holds the pin (or may: it holds more than its record
                        // keeps): nothing else can claim the buffer, so the dirty bit set here
                        // holds until the protection is lifted.
                        if s.update(|w| w.exclusive().then(|| w.mark_dirty())).is_ok() {
                            self.stats().add(Counter::WriteFaults, 1);
                            return self.home.protect(offset & !(self.bs - 1), self.bs, false);
                        }
                    } else {
                        // Another thread's pin, or its first store lifting the protection:
                        // wait for it. Lifting the protection here, after that holder let go of
                        // a clean buffer, would let this store land in a buffer marked clean.
                        self.self_wait(i)?;
                        s.wait_change(w);
                    }
                }
                Phase::Cached => {
                    if let Some(x) = w.begin_enable_write() {
                        if s.cas(w, x).is_ok() {
                            self.stats().add(Counter::WriteFaults, 1);
                            let r = self.home.protect(offset & !(self.bs - 1), self.bs, false);
                            let _ = s.update(|w| Some(w.finish_enable_write()));
                            return r;
                        }
                    } else {
                        // A write-back is reading the bytes: wait for it.
                        self.self_wait(i)?;
                        s.wait_change(w);
                    }
                }
                _ => {
                    self.self_wait(i)?;
                    s.wait_change(w);
                }
            }
            w = s.load();
        }
    }

    /// A fault could not be served: asks the mapping's hook, if any. Returns whether the
    /// access should simply run again (true) or SIGBUS be delivered (false).
    /// Takes write permission from the pages of buffer `[start, start+len)` for good: a
    /// handler thread's answer to a refused write into a read-only mapping (see
    /// `fault_thread::serve`).
    pub(crate) fn deny_writes(&self, start: usize, len: usize) -> Result<()> {
        match self.home.region() {
            Some(r) => r.deny_writes(start, len),
            None => Ok(()),
        }
    }

    pub(crate) fn fault_failed(&self, addr: usize, e: &Error) -> bool {
        match &self.fault_hook {
            Some(h) => h(addr, e) == FaultAction::Retry,
            None => false,
        }
    }
}

/// A transparent mapping as the `SIGBUS` handler and the handler threads see it.
impl FaultTarget for MappingCore {
    fn buffer_size(&self) -> usize {
        self.bs
    }
    fn serve(self: Arc<Self>, offset: usize, addr: usize, write: bool) -> Result<()> {
        match self.fault(offset, write) {
            Err(e) if !self.fault_failed(addr, &e) => Err(e),
            _ => Ok(()),
        }
    }
    fn deny_writes(&self, start: usize, len: usize) -> Result<()> {
        MappingCore::deny_writes(self, start, len)
    }
    fn signal(&self) -> libc::c_int {
        if self.is_view() {
            libc::SIGSEGV
        } else {
            libc::SIGBUS
        }
    }
}
