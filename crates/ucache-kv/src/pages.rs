//! What the B+tree needs from whatever holds its pages: optimistic reads that validate, and
//! shared, exclusive and overwrite pins. A ucache [`Mapping`] provides them natively; the
//! bench's `kv-mmap` provides them over a plain file `mmap` with a version word per page, so
//! the same tree code runs on both.

use std::ops::{Deref, DerefMut};

use ucache::{ExclusiveGuard, Mapping, OptimisticRead, OptimisticView, SharedGuard};

use crate::error::Result;
use crate::page::PageBytes;

/// An optimistic read of one page.
pub trait ReadPage {
    type View: PageBytes + ?Sized;
    fn view(&self) -> &Self::View;
    /// Whether what was read through the view so far was stable.
    fn validate(&self) -> bool;
    fn index(&self) -> u64;
}

/// Pages of one file, cut into buffers of one size.
pub trait Pages: Sync {
    type Read<'a>: ReadPage
    where
        Self: 'a;
    type Shared<'a>: Deref<Target = [u8]>
    where
        Self: 'a;
    type Exclusive<'a>: DerefMut<Target = [u8]>
    where
        Self: 'a;
    /// Begins an optimistic read of page `i` (loading it first if need be).
    fn optimistic(&self, i: u64) -> Result<Self::Read<'_>>;
    fn pin_shared(&self, i: u64) -> Result<Self::Shared<'_>>;
    fn pin_exclusive(&self, i: u64) -> Result<Self::Exclusive<'_>>;
    /// Page `i` exclusively, zeroed, without reading it.
    fn pin_overwrite(&self, i: u64) -> Result<Self::Exclusive<'_>>;
    fn pages(&self) -> u64;
    fn page_size(&self) -> usize;
}

impl<'m> ReadPage for OptimisticRead<'m> {
    type View = OptimisticView<'m>;
    fn view(&self) -> &OptimisticView<'m> {
        OptimisticRead::view(self)
    }
    fn validate(&self) -> bool {
        OptimisticRead::validate(self)
    }
    fn index(&self) -> u64 {
        OptimisticRead::index(self)
    }
}

impl Pages for Mapping {
    type Read<'a> = OptimisticRead<'a>;
    type Shared<'a> = SharedGuard<'a>;
    type Exclusive<'a> = ExclusiveGuard<'a>;
    fn optimistic(&self, i: u64) -> Result<OptimisticRead<'_>> {
        Ok(Mapping::optimistic(self, i)?)
    }
    fn pin_shared(&self, i: u64) -> Result<SharedGuard<'_>> {
        Ok(Mapping::pin_shared(self, i)?)
    }
    fn pin_exclusive(&self, i: u64) -> Result<ExclusiveGuard<'_>> {
        Ok(Mapping::pin_exclusive(self, i)?)
    }
    fn pin_overwrite(&self, i: u64) -> Result<ExclusiveGuard<'_>> {
        Ok(Mapping::pin_overwrite(self, i)?)
    }
    fn pages(&self) -> u64 {
        self.buffers()
    }
    fn page_size(&self) -> usize {
        self.buffer_size()
    }
}
