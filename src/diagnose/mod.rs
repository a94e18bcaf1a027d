//! Diagnosis on top of the measurements: leak rules, memory budgets, the batch-size fit,
//! driver-vs-framework figures, and the near-OOM flight recorder.
//!
//! Nothing here runs on the training thread: span findings are made on the export thread
//! (a [`SpanTap`]), tick findings on the sampler thread (a
//! [`TickObserver`](crate::timeline::TickObserver)), and files are written by a thread of
//! their own.

mod batch_fit;
mod counts;
mod forecast;
mod near_oom;
mod open_span_layer;
mod open_spans;
pub(crate) mod peers;
mod report;
mod rules;
pub(crate) mod settings;
mod stop;
mod tap;

use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};

use opentelemetry::metrics::Meter;

use crate::names::event;
use crate::record::GpuId;
use crate::util::bytes;
use crate::util::sync::lock;
pub use batch_fit::BatchFit;
pub use near_oom::record_oom;
pub(crate) use open_span_layer::OpenSpanLayer;
pub(crate) use report::RunReader;
pub use report::{Marker, DIAGNOSIS_EVENTS};
pub use settings::MemoryBudget;

use crate::export::tap::SpanTap;

use crate::sampler::Shared;
use crate::timeline::TickObserver;
use batch_fit::BatchFitter;
use counts::Counts;
use near_oom::{Recorder, RingObserver};
use open_spans::OpenSpans;
use settings::DiagnoseSettings;
use stop::{BudgetWatch, StopRequest};

/// The highest peak against its budget.
#[derive(Debug, Clone)]
pub(crate) struct Highest {
    device: GpuId,
    peak: i64,
    budget: i64,
    span: String,
}

/// What the tap found, read by the summary and [`Telemetry::batch_fit`](crate::Telemetry::batch_fit).
#[derive(Debug, Default)]
pub(crate) struct Findings {
    /// `(epoch, what)`, in the order found.
    marks: Vec<(i64, String)>,
    fitter: BatchFitter,
    highest: Option<Highest>,
    over_budget: u64,
    /// OOM forecasts made, and the first one's line for the summary.
    forecasts: u64,
    first_forecast: Option<String>,
}

/// File in the run directory that keeps every device's total and budget, so that
/// `gpuspan report` fits the batch size to what the run fitted it to.
pub const LIMITS_FILE: &str = "limits.json";

/// One device's total and budget in bytes.
#[derive(Debug, Clone, Copy, serde::Serialize, serde::Deserialize)]
pub(crate) struct DeviceLimit {
    #[serde(rename = "index")]
    id: GpuId,
    #[serde(rename = "total_bytes")]
    total: Option<u64>,
    #[serde(rename = "budget_bytes")]
    budget: Option<u64>,
}

/// Every device's limits, read once the sampler has taken its first reading.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub(crate) struct Limits {
    devices: Vec<DeviceLimit>,
}

impl Limits {
    /// What the batch-size fit is fitted to, consistently with the step peak it fits (the
    /// memory used summed over the devices in scope): the budget summed over those devices
    /// if set, else their total.
    fn batch_limit(&self) -> Option<i64> {
        if self.devices.is_empty() {
            return None;
        }
        let sum: Option<u64> = self.devices.iter().map(|d| d.budget.or(d.total)).sum();
        sum.and_then(|s| i64::try_from(s).ok())
    }
}

/// The diagnosis of one [`Telemetry`](crate::Telemetry).
#[derive(Debug)]
pub(crate) struct Diagnosis {
    settings: DiagnoseSettings,
    findings: Arc<Mutex<Findings>>,
    counts: Arc<Counts>,
    open_spans: Arc<OpenSpans>,
    recorder: Arc<Recorder>,
    /// Reads the job's other ranks' alarms, in a job of several.
    peers: Option<peers::Watcher>,
    limits: Arc<OnceLock<Limits>>,
    /// The budget's request to stop the loop (`GPUSPAN_MEMORY_BUDGET_STOP`).
    stop: Arc<StopRequest>,
}

impl Diagnosis {
    /// Starts the near-OOM file writer (`run_dir` is where its files go) and, in a job of
    /// several ranks, the thread that reads the others' alarms from `board`.
    pub(crate) fn start(
        settings: DiagnoseSettings,
        run_dir: PathBuf,
        board: Option<peers::Board>,
    ) -> std::io::Result<Self> {
        let counts = Arc::new(Counts::default());
        let open_spans = Arc::new(OpenSpans::default());
        let recorder = Recorder::start(
            settings.near_oom_threshold,
            settings.near_oom_window,
            run_dir,
            Arc::clone(&open_spans),
            Arc::clone(&counts),
            near_oom::Writer::new(board.clone()),
        )?;
        let peers = board
            .map(|board| {
                let recorder = Arc::clone(&recorder);
                peers::Watcher::start(board, move |now, event| recorder.peer_found(now, event))
            })
            .transpose()?;
        Ok(Self {
            settings,
            findings: Arc::default(),
            counts,
            open_spans,
            recorder,
            peers,
            limits: Arc::default(),
            stop: Arc::default(),
        })
    }

    /// The sampler's observers: the near-OOM ring, and the budget watch when a budget
    /// may stop the loop.
    pub(crate) fn observers(&self) -> Vec<Box<dyn TickObserver>> {
        let mut observers: Vec<Box<dyn TickObserver>> =
            vec![Box::new(RingObserver(Arc::clone(&self.recorder)))];
        if self.settings.budget_stop {
            observers.push(Box::new(BudgetWatch {
                limits: Arc::clone(&self.limits),
                request: Arc::clone(&self.stop),
            }));
        }
        observers
    }

    /// Whether a reading over the budget asks the loop to stop (`GPUSPAN_MEMORY_BUDGET_STOP`).
    pub(crate) fn budget_stop(&self) -> bool {
        self.settings.budget_stop
    }

    /// Whether an OOM forecast asks the loop to stop (`GPUSPAN_MEMORY_FORECAST_STOP`).
    pub(crate) fn forecast_stop(&self) -> bool {
        self.settings.forecast_stop
    }

    /// Why the budget asked the loop to stop, once it did.
    pub(crate) fn stop_requested(&self) -> Option<String> {
        self.stop.reason().map(str::to_owned)
    }

    /// Calls `handler` (on the sampler thread) when the budget asks the loop to stop.
    pub(crate) fn on_stop_request(&self, handler: Box<dyn Fn(&str) + Send + Sync>) {
        self.stop.on_request(handler);
    }

    /// Reads the devices and their totals once the sampler has started, for the budget.
    pub(crate) fn attach(&self, shared: &Shared) {
        let devices = shared
            .devices()
            .iter()
            .enumerate()
            .map(|(i, device)| {
                let total = shared.total(i);
                DeviceLimit {
                    id: device.id(),
                    total,
                    budget: self.settings.budget.and_then(|b| b.bytes_for(total)),
                }
            })
            .collect::<Vec<_>>();
        self.recorder
            .set_device_ids(devices.iter().map(|d| d.id).collect());
        let _ = self.limits.set(Limits { devices });
    }

    /// Writes the devices' totals and budgets to the run directory, for `gpuspan report`.
    ///
    /// # Errors
    /// The file cannot be written.
    pub(crate) fn write_limits(&self, run_dir: &std::path::Path) -> std::io::Result<()> {
        let limits = self.limits.get().cloned().unwrap_or_default();
        let text = serde_json::to_string(&limits).map_err(std::io::Error::other)?;
        std::fs::write(run_dir.join(LIMITS_FILE), text + "\n")
    }

    /// The span taps for the export pipeline (one: diagnosis keeps one state per run),
    /// with every registered span rule started.
    pub(crate) fn taps(&self) -> Vec<Box<dyn SpanTap>> {
        let limits = self.limits.get().cloned().unwrap_or_default();
        let setup = rules::Setup {
            settings: &self.settings,
            limits: &limits,
            stop: &self.stop,
        };
        let rules = rules::KINDS
            .iter()
            .filter_map(|&kind| Some(tap::RuleState::new(kind, kind.start(&setup)?)))
            .collect();
        vec![Box::new(tap::DiagnoseTap {
            rules,
            findings: Arc::clone(&self.findings),
            counts: Arc::clone(&self.counts),
            recorder: Some(Arc::clone(&self.recorder)),
            warned_batch_size: false,
        })]
    }

    /// The tracing layer that keeps the open spans for the near-OOM file.
    pub(crate) fn layer(&self) -> OpenSpanLayer {
        OpenSpanLayer {
            spans: Arc::clone(&self.open_spans),
            recorder: Arc::downgrade(&self.recorder),
        }
    }

    /// Counters of the findings, on `meter`: one per registered kind.
    pub(crate) fn register_metrics(&self, meter: &Meter) {
        self.counts.register(meter);
    }

    /// How many findings of the kind whose event is `event` were made so far.
    pub(crate) fn findings(&self, event: &str) -> u64 {
        self.counts.total(event)
    }

    /// The batch-size fit of the steps exported so far.
    pub(crate) fn batch_fit(&self) -> Option<BatchFit> {
        let limit = self.limits.get().and_then(Limits::batch_limit);
        lock(&self.findings).fitter.fit(limit)
    }

    /// Per-epoch marks and the closing lines for the summary printed at shutdown.
    pub(crate) fn summary(&self) -> (Vec<(i64, String)>, Vec<String>) {
        let findings = lock(&self.findings);
        let mut notes = Vec::new();
        if let Some(budget) = self.settings.budget {
            notes.push(match &findings.highest {
                Some(h) => headroom_line(h, findings.over_budget),
                None => format!(
                    "memory budget {}: no GPU peak measured",
                    describe_budget(budget)
                ),
            });
        }
        let limit = self.limits.get().and_then(Limits::batch_limit);
        notes.extend(batch_fit::summary_line(&findings.fitter, limit));
        if let Some(first) = &findings.first_forecast {
            notes.push(forecast_line(first, findings.forecasts));
        }
        let near = self.counts.total(event::NEAR_OOM);
        let oom = self.counts.total(event::OOM);
        if near + oom > 0 {
            notes.push(format!(
                "near-OOM: {near} crossing(s) of {:.0}% and {oom} out-of-memory error(s); \
                 timelines in near-oom-*.json",
                self.settings.near_oom_threshold * 100.0
            ));
        }
        (findings.marks.clone(), notes)
    }

    /// Writes what the recorder still holds and stops its thread and the peers watcher,
    /// waiting at most `bound` for both together (each is told first, then each is waited
    /// for until the one deadline). Returns whether both stopped; a thread stuck in the file
    /// system is left behind, with one line that says so.
    pub(crate) fn stop(&self, bound: std::time::Duration) -> bool {
        let deadline = std::time::Instant::now() + bound;
        if let Some(peers) = &self.peers {
            peers.tell_to_stop();
        }
        let written = self.recorder.stop_by(deadline);
        let watched = self.peers.as_ref().is_none_or(|p| p.stop_by(deadline));
        written && watched
    }
}

/// What the batch-size fit of the run in `run_dir` is fitted to, by the run's own rule
/// (`None`: the run recorded no limits, or no device had a total).
pub(crate) fn read_batch_limit(run_dir: &std::path::Path) -> Option<i64> {
    let text = std::fs::read_to_string(run_dir.join(LIMITS_FILE)).ok()?;
    serde_json::from_str::<Limits>(&text).ok()?.batch_limit()
}

/// `OOM forecast at step 240: out of memory in about 130 steps on gpu 0 (...)`, with how
/// many forecasts the run made when more than one.
pub(crate) fn forecast_line(first: &str, forecasts: u64) -> String {
    let mut line = format!("OOM forecast at {first}");
    if forecasts > 1 {
        line.push_str(&format!("; {forecasts} forecasts in all"));
    }
    line
}

fn describe_budget(budget: MemoryBudget) -> String {
    match budget {
        MemoryBudget::Bytes(b) => bytes::human(i64::try_from(b).unwrap_or(i64::MAX)),
        MemoryBudget::Fraction(f) => format!("{:.0}% of each device", f * 100.0),
    }
}

/// `memory budget 20.0 GiB: highest peak 18.2 GiB (gpu 0, step 3), headroom 1.8 GiB (9.0%)`.
fn headroom_line(h: &Highest, over: u64) -> String {
    let headroom = h.budget - h.peak;
    let percent = if h.budget > 0 {
        headroom as f64 / h.budget as f64 * 100.0
    } else {
        0.0
    };
    let mut line = format!(
        "memory budget {}: highest peak {} (gpu {}, {}), headroom {} ({percent:.1}%)",
        bytes::human(h.budget),
        bytes::human(h.peak),
        h.device,
        h.span,
        bytes::human(headroom),
    );
    if over > 0 {
        line.push_str(&format!("; {over} span peak(s) over budget"));
    }
    line
}
