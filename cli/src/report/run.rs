//! A run directory read back for drawing: its timeline, its spans with their diagnosis
//! events, the epoch table and the batch-size fit.

use std::path::{Path, PathBuf};

use super::Marker;
use gpuspan::runlog::{self, RunSummary, SpanRecord};
use gpuspan::runlog::{read_timeline, Timeline, TIMELINE_FILE};

use super::ReportError;

/// Everything a report draws.
#[derive(Debug, Clone)]
pub struct Run {
    /// The run directory.
    pub dir: PathBuf,
    /// The timeline, when the run wrote one.
    pub timeline: Option<Timeline>,
    /// Every span, in the order the file holds them.
    pub spans: Vec<SpanRecord>,
    /// Diagnosis events on the spans.
    pub markers: Vec<Marker>,
    /// The per-epoch table.
    pub summary: RunSummary,
    /// The batch-size fit, when steps carry at least two batch sizes: the run's own
    /// (see [`RunSummary::batch_fit`]).
    pub fit: Option<gpuspan::BatchFit>,
}

impl Run {
    /// Reads `dir` (a run directory holding `traces.jsonl` and possibly `timeline.bin`).
    ///
    /// # Errors
    /// `traces.jsonl` cannot be read, or `timeline.bin` is there but is not a timeline.
    pub fn read(dir: &Path) -> Result<Self, ReportError> {
        let mut spans = Vec::new();
        let (summary, markers) =
            runlog::read_run_and(dir, |record| spans.push(record)).map_err(|source| {
                ReportError::Io {
                    path: dir.join(runlog::TRACES_FILE),
                    source,
                }
            })?;
        let timeline = if dir.join(TIMELINE_FILE).is_file() {
            Some(read_timeline(&dir.join(TIMELINE_FILE))?)
        } else {
            None
        };
        let fit = summary.batch_fit;
        Ok(Self {
            dir: dir.to_path_buf(),
            timeline,
            spans,
            markers,
            summary,
            fit,
        })
    }

    /// First and last instant anything in the run covers, UNIX ns.
    pub fn extent(&self) -> (u64, u64) {
        let mut start = u64::MAX;
        let mut end = 0;
        for span in &self.spans {
            start = start.min(span.start_unix_nanos);
            end = end.max(span.end_unix_nanos);
        }
        if let Some(timeline) = &self.timeline {
            for series in &timeline.series {
                if let (Some(first), Some(last)) = (series.points.first(), series.points.last()) {
                    start = start.min(first.0);
                    end = end.max(last.0);
                }
            }
        }
        if start > end {
            (0, 1)
        } else {
            (start, end.max(start + 1))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LINE: &str = r#"{"resourceSpans":[{"scopeSpans":[{"spans":[
        {"traceId":"0102030405060708090a0b0c0d0e0f10","spanId":"0102030405060708","name":"step",
         "startTimeUnixNano":"1000","endTimeUnixNano":"5000",
         "attributes":[{"key":"ml.step","value":{"intValue":"4"}},
                       {"key":"batch_size","value":{"intValue":"8"}},
                       {"key":"gpu.memory.start","value":{"intValue":"100"}},
                       {"key":"gpu.memory.peak","value":{"intValue":"180"}},
                       {"key":"gpu.memory.end","value":{"intValue":"100"}}],
         "events":[{"timeUnixNano":"3000","name":"gpu.memory.near_oom",
                    "attributes":[{"key":"gpu.index","value":{"intValue":"0"}}]},
                   {"timeUnixNano":"3500","name":"something.else"}]},
        {"traceId":"0102030405060708090a0b0c0d0e0f10","spanId":"0102030405060709","name":"step",
         "startTimeUnixNano":"6000","endTimeUnixNano":"9000",
         "attributes":[{"key":"ml.step","value":{"intValue":"5"}},
                       {"key":"batch_size","value":{"intValue":"16"}},
                       {"key":"gpu.memory.start","value":{"intValue":"100"}},
                       {"key":"gpu.memory.peak","value":{"intValue":"260"}},
                       {"key":"gpu.memory.end","value":{"intValue":"100"}}]}
    ]}]}]}"#;

    #[test]
    fn diagnosis_events_become_markers_and_batch_sizes_a_fit() {
        let dir = tempfile::tempdir().unwrap();
        let line: String = LINE.split_whitespace().collect();
        std::fs::write(dir.path().join(runlog::TRACES_FILE), line + "\n").unwrap();
        let run = Run::read(dir.path()).unwrap();
        assert!(run.timeline.is_none());
        assert_eq!(run.spans.len(), 2);
        assert_eq!(
            run.markers,
            vec![Marker {
                name: "gpu.memory.near_oom".into(),
                unix_nanos: 3000,
                span: "step 4".into(),
                attributes: vec![("gpu.index".into(), "0".into())],
            }]
        );
        // 180 = f + 8 p and 260 = f + 16 p; the run recorded no limits, so no largest batch.
        let fit = run.fit.unwrap();
        assert_eq!((fit.fixed_bytes, fit.per_sample_bytes), (100, 10));
        assert_eq!(fit.batch_sizes, 2);
        assert_eq!(fit.max_batch_size, None);
        // With the devices' limits recorded, the largest batch within them.
        std::fs::write(
            dir.path().join(gpuspan::runlog::LIMITS_FILE),
            r#"{"devices":[{"index":0,"total_bytes":600,"budget_bytes":null},
                           {"index":1,"total_bytes":800,"budget_bytes":500}]}"#,
        )
        .unwrap();
        let fit = Run::read(dir.path()).unwrap().fit.unwrap();
        assert_eq!(
            (fit.limit_bytes, fit.max_batch_size),
            (Some(1100), Some(100))
        );
        let page = crate::report::html(&run);
        assert!(page.contains("gpu.memory.near_oom"));
        assert!(page.contains("Batch size"));
    }
}
