//! One side of a comparison read in: a run directory, a job's directory (a `rank-<r>/` run
//! per rank) or an OTLP/JSON traces file (gpuspan's `traces.jsonl`, or what the
//! OpenTelemetry Collector's file exporter wrote), as the closed spans of each rank.

use std::io::Read;
use std::path::{Path, PathBuf};

use super::scan;
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
    let mut ranks: Vec<RankSpans> = Vec::new();
    let mut spans = Vec::new();
    for_each_line(path, |number, line| {
        let Some(resources) = read_line(path, number, line, &mut spans, skipped)? else {
            return Ok(());
        };
        let mut spans = spans.drain(..);
        for (rank, count) in resources {
            let index = match ranks.iter().position(|r| r.rank == rank) {
                Some(index) => index,
                None => {
                    ranks.push(RankSpans {
                        rank,
                        spans: Vec::new(),
                    });
                    ranks.len() - 1
                }
            };
            ranks[index].spans.extend(spans.by_ref().take(count));
        }
        Ok(())
    })?;
    ranks.sort_by(|a, b| rank_order(&a.rank).cmp(&rank_order(&b.rank)));
    Ok(ranks)
}

/// The size of the reads a traces file is taken in; a longer line grows it.
const CHUNK: usize = 4 << 20;

/// Hands each line of the file at `path` (with its newline, if it has one) and its number,
/// from 1, to `each`, as a slice of the chunk read: no line is copied.
fn for_each_line(
    path: &Path,
    mut each: impl FnMut(usize, &[u8]) -> Result<(), DiffError>,
) -> Result<(), DiffError> {
    let read_error = |source| DiffError::Read {
        path: path.to_path_buf(),
        source,
    };
    let mut file = std::fs::File::open(path).map_err(read_error)?;
    let mut chunk = vec![0; CHUNK];
    let (mut filled, mut number) = (0, 0);
    loop {
        if filled == chunk.len() {
            chunk.resize(2 * chunk.len(), 0);
        }
        let read = match file.read(&mut chunk[filled..]) {
            Ok(read) => read,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(read_error(e)),
        };
        let end = filled + read;
        let mut start = 0;
        // Only the bytes just read can hold the newline that ends the line carried over.
        let mut from = filled;
        while let Some(at) = memchr::memchr(b'\n', &chunk[from..end]) {
            number += 1;
            each(number, &chunk[start..=from + at])?;
            start = from + at + 1;
            from = start;
        }
        if read == 0 {
            if start < end {
                each(number + 1, &chunk[start..end])?;
            }
            return Ok(());
        }
        chunk.copy_within(start..end, 0);
        filled = end - start;
    }
}

/// Reads one line's spans into `spans`: each resource's rank and count of them, or nothing
/// for a blank line or a last line cut short.
fn read_line(
    path: &Path,
    number: usize,
    line: &[u8],
    spans: &mut Vec<SpanRecord>,
    skipped: &mut Vec<String>,
) -> Result<Option<Vec<scan::Resource>>, DiffError> {
    let cut = line.last() != Some(&b'\n');
    let bad = |why: String| DiffError::Line {
        path: path.to_path_buf(),
        line: number,
        why,
    };
    let parsed = std::str::from_utf8(line)
        .map_err(|_| "not UTF-8 text".to_owned())
        .and_then(|text| {
            if text.trim().is_empty() {
                return Ok(None);
            }
            // The scan reads gpuspan's own lines; serde_json, any it gives up.
            if let Ok(resources) = scan::request(text, spans) {
                return Ok(Some(resources));
            }
            let request = serde_json::from_str::<Request>(text).map_err(|e| e.to_string())?;
            let resources = request.resource_spans.into_iter().map(|resource| {
                let rank = resource.rank.clone();
                let before = spans.len();
                spans.extend(resource.into_spans());
                (rank, spans.len() - before)
            });
            Ok(Some(resources.collect()))
        });
    match parsed {
        Ok(resources) => Ok(resources),
        Err(why) if cut && number > 1 => {
            skipped.push(format!(
                "{} line {number}: cut short ({why})",
                path.display()
            ));
            Ok(None)
        }
        Err(why) => Err(bad(why)),
    }
}

/// Ranks by number where they are numbers, then by name.
fn rank_order(rank: &Option<String>) -> (Option<u64>, Option<&str>) {
    (
        rank.as_deref().and_then(|r| r.parse().ok()),
        rank.as_deref(),
    )
}
