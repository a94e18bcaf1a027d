//! Shutting down: flush both signals side by side within the export timeout, stop the
//! threads with bounded waits, print the run's table, and report exactly what was lost.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::Inner;
use crate::config::Destination;
use crate::error::ShutdownError;

impl Inner {
    /// The longest either signal may take to deliver what is left.
    pub(super) fn export_timeout(&self) -> Duration {
        self.settings
            .traces
            .timeout()
            .max(self.settings.metrics.timeout())
    }

    pub(super) fn shutdown(mut self: Box<Self>) -> Result<(), ShutdownError> {
        // A SIGTERM that comes now ends the process after this, not halfway through it.
        let _under_way = crate::signals::ShutdownUnderWay::begin();
        let timeout = self.export_timeout();
        // New spans stop being tracked, and metric exports stop retrying.
        self.sampler.shared().close();
        self.stopping.store(true, Ordering::Relaxed);
        // Traces and metrics flush side by side, so a dead collector costs one timeout. The
        // metrics side runs on a thread of its own that is waited for at most `timeout`
        // (plus slack), so a hung exporter cannot hang the exit.
        // The duration histograms are fed by the span taps: let every ended span through
        // them (no delivery wait, at most a second) before the last collection.
        self.span_backlog
            .settle(std::time::Instant::now() + Duration::from_secs(1));
        let meter_provider = self.meter_provider.clone();
        let (done, metrics_done) = std::sync::mpsc::sync_channel(1);
        let spawned = std::thread::Builder::new()
            .name("gpuspan-shutdown".into())
            .spawn(move || {
                let _ = done.send(meter_provider.shutdown_with_timeout(timeout));
            });
        let traces = self.tracer_provider.shutdown_with_timeout(timeout);
        let metrics = match spawned {
            Ok(_) => metrics_done
                .recv_timeout(timeout + Duration::from_secs(1))
                .unwrap_or(Err(opentelemetry_sdk::error::OTelSdkError::Timeout(
                    timeout,
                ))),
            Err(e) => Err(opentelemetry_sdk::error::OTelSdkError::InternalFailure(
                e.to_string(),
            )),
        };
        if let Some(mut prometheus) = self.prometheus.take() {
            prometheus.stop();
        }
        self.sampler.stop();
        if let Some(dir) = &self.run_dir {
            let stats = self.sampler.shared().stats();
            if let Err(error) = crate::runlog::sampler::write(dir, &stats) {
                eprintln!(
                    "gpuspan: warning: cannot write {}: {error}; `gpuspan report` will not say \
                     how well the sampler kept its cadence",
                    dir.join(crate::runlog::sampler::SAMPLER_FILE).display()
                );
            }
        }
        // The near-OOM files are local writes; a hung file system gets the local bound.
        self.diagnosis.stop(crate::signals::LOCAL_FLUSH_BOUND);
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
        self.print_summary();

        let spans = self.lost("span");
        let points = self.lost("metric point");
        if spans > 0 || points > 0 {
            let destinations: Vec<&str> = self
                .health
                .iter()
                .filter(|h| h.dropped() > 0)
                .map(|h| h.destination.as_str())
                .collect();
            let reason = self
                .health
                .iter()
                .find_map(|h| h.last_error())
                .unwrap_or_else(|| "unknown".into());
            return Err(ShutdownError::Dropped {
                spans,
                points,
                destination: destinations.join(" and "),
                reason,
            });
        }
        for result in [traces, metrics] {
            match result {
                Ok(()) | Err(opentelemetry_sdk::error::OTelSdkError::AlreadyShutdown) => {}
                Err(e) => return Err(ShutdownError::Sdk(e)),
            }
        }
        Ok(())
    }

    /// The run directory's table, from the rows the summary tap kept as spans were
    /// exported: the table `gpuspan report` draws from `traces.jsonl`.
    fn print_summary(&self) {
        if !self.settings.summary || self.settings.traces != Destination::RunDir {
            return;
        }
        let Some(dir) = &self.run_dir else { return };
        let Ok(table) = self.epochs.0.lock() else {
            return;
        };
        let mut summary = table.summary();
        (summary.marks, summary.notes) = self.diagnosis.summary();
        if summary.source.is_none() {
            summary.source = Some(self.sampler.shared().source_name().to_owned());
        }
        eprint!(
            "gpuspan: run {} ({})\n{}",
            self.settings.run_id,
            dir.display(),
            summary.render()
        );
    }

    /// Items of one kind (`span`, `metric point`) lost across exporters.
    fn lost(&self, item: &str) -> u64 {
        self.health
            .iter()
            .filter(|h| h.item() == item)
            .map(|h| h.dropped())
            .sum()
    }
}
