//! `otlp`: to a collector over gRPC or HTTP, with the endpoint and options configuration
//! resolved for each signal. Sends on a runtime, so no export thread waits on the network.

use super::{ExporterKind, KindError, Outlet};
use crate::config::{Destination, Exporter};

pub(super) const KIND: &dyn ExporterKind = &Otlp;

struct Otlp;

impl ExporterKind for Otlp {
    fn exporter(&self) -> Exporter {
        Exporter::Otlp
    }

    fn outlet<'d>(&self, destination: &'d Destination) -> Result<Outlet<'d>, KindError> {
        match destination {
            Destination::Otlp(target) => Ok(Outlet::Otlp(target)),
            Destination::Plain(_) => Err(KindError::Mismatched(Exporter::Otlp)),
        }
    }
}
