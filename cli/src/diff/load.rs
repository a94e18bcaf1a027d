//! One side of a comparison read in: a run directory, a job's directory (a `rank-<r>/` run
//! per rank) or an OTLP/JSON traces file (gpuspan's `traces.jsonl`, or what the
//! OpenTelemetry Collector's file exporter wrote), as the closed spans of each rank.

use std::io::BufRead;
use std::path::{Path, PathBuf};

use super::wire::Request;
use super::DiffError;
use gpuspan::runlog::SpanRecord;
use gpuspan::runlog::{RANK_DIR_PREFIX, TRACES_FILE};
use gpuspan::BatchFit;

/// What one side holds.
#[derive(Debug, Default)]
pub(super) struct Side {
    /// The path given.
    pub(super) path: PathBuf,
    /// Each rank's spans, in rank order.
    pub(super) ranks: Vec<RankSpans>,
    /// What the run fitted its largest batch to (`limits.json`), for one run.
    pub(super) batch_limit: Option<i64>,
    /// Lines passed over: a last line cut short by a run that was killed mid-write.
    pub(super) skipped: Vec<String>,
}

/// The spans of one rank (`None`: a run that names no rank).
#[derive(Debug, Default)]
pub(super) struct RankSpans {
    pub(super) rank: Option<String>,
    pub(super) spans: Vec<SpanRecord>,
}

impl Side {
    /// Reads `path`: a traces file, a run directory, or a job's directory.
    pub(super) fn read(path: &Path) -> Result<Self, DiffError> {
        let mut side = Self {
            path: path.to_path_buf(),
            ..Self::default()
        };
        let metadata = std::fs::metadata(path).map_err(|source| DiffError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        if !metadata.is_dir() {
            side.ranks = read_traces(path, &mut side.skipped)?;
        } else if path.join(TRACES_FILE).is_file() {
            side.ranks = read_traces(&path.join(TRACES_FILE), &mut side.skipped)?;
            side.batch_limit = BatchFit::limit_of_run(path);
        } else {
            let ranks = rank_dirs(path)?;
            if ranks.is_empty() {
                return Err(DiffError::NoRun {
                    path: path.to_path_buf(),
                });
            }
            for (rank, dir) in ranks {
                let file = dir.join(TRACES_FILE);
                let spans = read_traces(&file, &mut side.skipped)?
                    .into_iter()
                    .flat_map(|r| r.spans)
                    .collect();
                side.ranks.push(RankSpans {
                    rank: Some(rank),
                    spans,
                });
            }
        }
        if !side
            .ranks
            .iter()
            .flat_map(|r| &r.spans)
            .any(|s| s.gpu.is_some() || !s.devices.is_empty())
        {
            return Err(DiffError::NoFigures {
                path: path.to_path_buf(),
            });
        }
        Ok(side)
    }
}

/// A job's `rank-<r>` runs, in rank order (rank 2 before rank 10).
fn rank_dirs(dir: &Path) -> Result<Vec<(String, PathBuf)>, DiffError> {
    let entries = std::fs::read_dir(dir).map_err(|source| DiffError::Read {
        path: dir.to_path_buf(),
        source,
    })?;
    let mut ranks: Vec<(Option<u64>, String, PathBuf)> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.join(TRACES_FILE).is_file())
        .filter_map(|p| {
            let name = p.file_name()?.to_string_lossy().into_owned();
            let rank = name.strip_prefix(RANK_DIR_PREFIX)?.to_owned();
            Some((rank.parse().ok(), rank, p))
        })
        .collect();
    ranks.sort();
    Ok(ranks.into_iter().map(|(_, rank, p)| (rank, p)).collect())
}

/// Every span of an OTLP/JSON traces file, grouped by the `ml.rank` of its resource.
///
/// A line that cannot be read is an error naming it, except a last line with no newline
/// after it: a run killed mid-write leaves one, and it is passed over (and said).
fn read_traces(path: &Path, skipped: &mut Vec<String>) -> Result<Vec<RankSpans>, DiffError> {
    let read_error = |source| DiffError::Read {
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::File::open(path).map_err(read_error)?;
    let mut reader = std::io::BufReader::with_capacity(1 << 20, file);
    let mut ranks: Vec<RankSpans> = Vec::new();
    let mut line = Vec::new();
    let mut number = 0;
    loop {
        line.clear();
        let read = reader.read_until(b'\n', &mut line).map_err(read_error)?;
        if read == 0 {
            break;
        }
        number += 1;
        let cut = line.last() != Some(&b'\n');
        let bad = |why: String| DiffError::Line {
            path: path.to_path_buf(),
            line: number,
            why,
        };
        let parsed = std::str::from_utf8(&line)
            .map_err(|_| "not UTF-8 text".to_owned())
            .and_then(|text| {
                if text.trim().is_empty() {
                    return Ok(None);
                }
                serde_json::from_str::<Request>(text)
                    .map(Some)
                    .map_err(|e| e.to_string())
            });
        let request = match parsed {
            Ok(Some(request)) => request,
            Ok(None) => continue,
            Err(why) if cut && number > 1 => {
                skipped.push(format!(
                    "{} line {number}: cut short ({why})",
                    path.display()
                ));
                continue;
            }
            Err(why) => return Err(bad(why)),
        };
        for resource in request.resource_spans {
            let index = match ranks.iter().position(|r| r.rank == resource.rank) {
                Some(index) => index,
                None => {
                    ranks.push(RankSpans {
                        rank: resource.rank.clone(),
                        spans: Vec::new(),
                    });
                    ranks.len() - 1
                }
            };
            ranks[index].spans.extend(resource.into_spans());
        }
    }
    ranks.sort_by(|a, b| rank_order(&a.rank).cmp(&rank_order(&b.rank)));
    Ok(ranks)
}

/// Ranks by number where they are numbers, then by name.
fn rank_order(rank: &Option<String>) -> (Option<u64>, Option<&str>) {
    (
        rank.as_deref().and_then(|r| r.parse().ok()),
        rank.as_deref(),
    )
}
