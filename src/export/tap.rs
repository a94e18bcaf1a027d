//! Taps on the one route out of a closing span: every span the exporter is about to send
//! passes each tap first, on the export thread (never the training thread).
//!
//! The summary table, diagnosis (which may add span events) and the TensorBoard writer are
//! taps, so what they read is exactly what the exporter sends.

use opentelemetry_sdk::trace::SpanData;

use crate::record::SpanRecord;

/// Sees every exported span, in the order spans ended.
pub(crate) trait SpanTap: Send {
    /// One span, before it is exported; `span` may be changed (events added).
    fn on_span(&mut self, span: &mut SpanData, record: &SpanRecord);

    /// The exporter flushes or shuts down: write out what is buffered.
    fn flush(&mut self) {}

    /// Names the tap in the warning printed if it panics (it is then switched off).
    fn name(&self) -> &'static str {
        let name = std::any::type_name::<Self>();
        name.rsplit("::").next().unwrap_or(name)
    }
}
