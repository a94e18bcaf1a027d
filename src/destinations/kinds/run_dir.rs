//! `run_dir`: OTLP/JSON lines in the run directory (`traces.jsonl`, `metrics.jsonl`), which
//! `gpuspan report` reads back.

use super::{ExporterKind, KindError, Outlet};
use crate::config::{Destination, Exporter};

pub(super) const KIND: &dyn ExporterKind = &RunDir;

struct RunDir;

impl ExporterKind for RunDir {
    fn exporter(&self) -> Exporter {
        Exporter::RunDir
    }

    fn outlet<'d>(&self, _: &'d Destination) -> Result<Outlet<'d>, KindError> {
        Ok(Outlet::RunDir)
    }
}
