//! What the export queue's unit tests and the SDK spans' unit tests both set up: a runtime
//! for a remote destination and the health a queue counts in. Test code only.

use std::sync::Arc;

use super::health::ExportHealth;

/// A runtime with one worker, as the export runtime of a remote destination.
pub(crate) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("a runtime")
}

/// Fresh export health for a queue of spans.
pub(crate) fn health() -> Arc<ExportHealth> {
    Arc::new(ExportHealth::new("test".into(), "span"))
}
