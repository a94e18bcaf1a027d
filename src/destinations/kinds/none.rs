//! `none`: nowhere. Spans still pass the taps (summary, diagnosis, pictures) and are
//! counted; metric points are not read at all.

use super::{ExporterKind, KindError, Outlet};
use crate::config::{Destination, Exporter};

pub(super) const KIND: &dyn ExporterKind = &Nowhere;

struct Nowhere;

impl ExporterKind for Nowhere {
    fn exporter(&self) -> Exporter {
        Exporter::None
    }

    fn outlet<'d>(&self, _: &'d Destination) -> Result<Outlet<'d>, KindError> {
        Ok(Outlet::Nowhere)
    }
}
