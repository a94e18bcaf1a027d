//! `console`: OTLP/JSON lines on standard output, one a span, a metric export or a
//! forwarded request.

use super::{ExporterKind, KindError, Outlet};
use crate::config::{Destination, Exporter};

pub(super) const KIND: &dyn ExporterKind = &Console;

struct Console;

impl ExporterKind for Console {
    fn exporter(&self) -> Exporter {
        Exporter::Console
    }

    fn outlet<'d>(&self, _: &'d Destination) -> Result<Outlet<'d>, KindError> {
        Ok(Outlet::Stdout)
    }
}
