//! Reading what `nvidia-smi --query-gpu` prints into one row per device: kept apart from
//! running the command, so that every quirk of its CSV is tested on fixtures alone.

/// Values nvidia-smi prints for a figure the device does not measure.
const NOT_MEASURED: [&str; 2] = ["N/A", "Not Supported"];

/// Bytes in the MiB that nvidia-smi prints memory in.
pub(super) const MIB: u64 = 1024 * 1024;

/// One device line of `nvidia-smi --query-gpu` output.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SmiRow {
    pub(crate) index: u32,
    pub(crate) uuid: String,
    pub(crate) name: String,
    /// Memory in use, in bytes; `None` where nvidia-smi prints `[N/A]` or `[Not Supported]`.
    pub(crate) used: Option<u64>,
    /// Memory installed, in bytes; `None` as for `used`.
    pub(crate) total: Option<u64>,
    /// GPU utilization as a fraction (0 to 1); `None` where it is not reported.
    pub(crate) utilization: Option<f64>,
    /// What nvidia-smi printed instead of a memory figure, such as `[Unknown Error]`.
    pub(crate) error: Option<String>,
}

/// Why `nvidia-smi` output could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum SmiParseError {
    /// No device lines at all.
    #[error("nvidia-smi printed no device lines")]
    Empty,
    /// A line with fewer fields than were queried.
    #[error(
        "nvidia-smi line {line} has {found} fields where 6 were expected \
         (index, uuid, name, memory.used, memory.total, utilization.gpu); \
         the output looks truncated: '{text}'"
    )]
    Truncated {
        line: u64,
        found: usize,
        text: String,
    },
    /// A field that does not hold what its column should.
    #[error("nvidia-smi line {line}: {field} is '{value}', not {expected}")]
    Invalid {
        line: u64,
        field: &'static str,
        value: String,
        expected: &'static str,
    },
    /// The text could not be split into records.
    #[error("nvidia-smi output is not CSV: {0}")]
    Csv(String),
}

/// Parses the output of `nvidia-smi --query-gpu=index,uuid,name,memory.used,memory.total,
/// utilization.gpu --format=csv,noheader,nounits`, one row per device line. Blank lines are
/// skipped.
///
/// # Errors
/// Empty output, a truncated line, or a field that is not what its column holds; the error
/// names the line and the field.
pub(crate) fn parse_query_gpu(text: &str) -> Result<Vec<SmiRow>, SmiParseError> {
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(false)
        .trim(csv::Trim::All)
        // A name with commas makes a longer line; nvidia-smi never quotes.
        .flexible(true)
        .quoting(false)
        .from_reader(text.as_bytes());
    let mut rows = Vec::new();
    for record in reader.records() {
        let record = record.map_err(|e| SmiParseError::Csv(e.to_string()))?;
        if record.iter().all(str::is_empty) {
            continue;
        }
        let line = record
            .position()
            .map_or(0, |position| line_of(text, position.byte()));
        rows.push(parse_row(&record, line)?);
    }
    if rows.is_empty() {
        return Err(SmiParseError::Empty);
    }
    Ok(rows)
}

/// The 1-based line of the record csv places at byte `start`. csv's own line count and
/// offsets take in the blank lines before a record, so those are counted here.
fn line_of(text: &str, start: u64) -> u64 {
    let bytes = text.as_bytes();
    let (before, after) =
        bytes.split_at(usize::try_from(start).map_or(bytes.len(), |s| s.min(bytes.len())));
    let newline = |b: &&u8| **b == b'\n';
    let blank = after
        .iter()
        .take_while(|b| matches!(b, b'\n' | b'\r'))
        .filter(newline)
        .count();
    u64::try_from(before.iter().filter(newline).count() + blank + 1).unwrap_or(u64::MAX)
}

fn parse_row(record: &csv::StringRecord, line: u64) -> Result<SmiRow, SmiParseError> {
    let fields: Vec<&str> = record.iter().collect();
    let [index, uuid, name @ .., used, total, utilization] = fields.as_slice() else {
        return Err(truncated(&fields, line));
    };
    if name.is_empty() {
        return Err(truncated(&fields, line));
    }
    let index = index
        .parse::<u32>()
        .map_err(|_| invalid(line, "index", index, "a device index"))?;
    if uuid.is_empty() || bracketed(uuid).is_some() {
        return Err(invalid(line, "uuid", uuid, "a device UUID"));
    }
    let mut problems = Vec::new();
    let used = memory(line, "memory.used", used, &mut problems)?;
    let total = memory(line, "memory.total", total, &mut problems)?;
    let utilization = match bracketed(utilization) {
        Some(_) => None,
        None => match utilization.parse::<u8>() {
            Ok(percent) if percent <= 100 => Some(f64::from(percent) / 100.0),
            _ => {
                return Err(invalid(
                    line,
                    "utilization.gpu",
                    utilization,
                    "a percentage from 0 to 100",
                ))
            }
        },
    };
    Ok(SmiRow {
        index,
        uuid: (*uuid).to_owned(),
        name: name.join(", "),
        used,
        total,
        utilization,
        error: (!problems.is_empty())
            .then(|| format!("nvidia-smi reports {}", problems.join(", "))),
    })
}

/// A memory figure in MiB, as bytes. A bracketed value is no figure; unless it says the figure
/// is not measured, it is also a problem for the device.
fn memory(
    line: u64,
    field: &'static str,
    value: &str,
    problems: &mut Vec<String>,
) -> Result<Option<u64>, SmiParseError> {
    if let Some(reason) = bracketed(value) {
        if !NOT_MEASURED.contains(&reason) {
            problems.push(format!("{field} {value}"));
        }
        return Ok(None);
    }
    value
        .parse::<u64>()
        .ok()
        .and_then(|mib| mib.checked_mul(MIB))
        .map(Some)
        .ok_or_else(|| invalid(line, field, value, "a whole number of MiB"))
}

fn bracketed(value: &str) -> Option<&str> {
    value.strip_prefix('[')?.strip_suffix(']')
}

fn truncated(fields: &[&str], line: u64) -> SmiParseError {
    SmiParseError::Truncated {
        line,
        found: fields.len(),
        text: clip(&fields.join(", ")),
    }
}

fn invalid(line: u64, field: &'static str, value: &str, expected: &'static str) -> SmiParseError {
    SmiParseError::Invalid {
        line,
        field,
        value: clip(value),
        expected,
    }
}

/// At most 80 characters of `text`, for error messages.
pub(super) fn clip(text: &str) -> String {
    match text.char_indices().nth(80) {
        Some((end, _)) => format!("{}...", &text[..end]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const H100_X1: &str = include_str!("../../../tests/fixtures/smi/h100_x1.txt");
    const H100_X8: &str = include_str!("../../../tests/fixtures/smi/h100_x8.txt");
    const GB10: &str = include_str!("../../../tests/fixtures/smi/gb10_memory_not_available.txt");
    const UNKNOWN_ERROR: &str = include_str!("../../../tests/fixtures/smi/unknown_error.txt");
    const NAME_WITH_COMMAS: &str = include_str!("../../../tests/fixtures/smi/name_with_commas.txt");
    const TRUNCATED: &str = include_str!("../../../tests/fixtures/smi/truncated.txt");
    const WITH_UNITS: &str = include_str!("../../../tests/fixtures/smi/with_units.txt");
    const DRIVER_MISMATCH: &str = include_str!("../../../tests/fixtures/smi/driver_mismatch.txt");

    const H100_TOTAL: u64 = 85_520_809_984; // 81559 MiB

    #[test]
    fn one_h100_is_read_in_bytes() {
        let rows = parse_query_gpu(H100_X1).unwrap();
        assert_eq!(
            rows,
            vec![SmiRow {
                index: 0,
                uuid: "GPU-5f8e3a7c-2b1d-4e6f-9a0b-c3d4e5f60718".into(),
                name: "NVIDIA H100 80GB HBM3".into(),
                used: Some(1_293_942_784), // 1234 MiB
                total: Some(H100_TOTAL),
                utilization: Some(0.07),
                error: None,
            }]
        );
    }

    #[test]
    fn eight_h100s_keep_their_order_and_figures() {
        let rows = parse_query_gpu(H100_X8).unwrap();
        assert_eq!(rows.len(), 8);
        let indexes: Vec<u32> = rows.iter().map(|r| r.index).collect();
        assert_eq!(indexes, (0..8).collect::<Vec<_>>());
        assert_eq!(rows[1].uuid, "GPU-0a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9");
        assert_eq!(rows[1].used, Some(70_988 * MIB));
        assert_eq!(rows[7].used, Some(0), "an idle device is zero, not absent");
        assert_eq!(rows[7].utilization, Some(0.0));
        assert!(rows
            .iter()
            .all(|r| r.total == Some(H100_TOTAL) && r.error.is_none()));
    }

    #[test]
    fn not_available_memory_is_none_without_error() {
        let rows = parse_query_gpu(GB10).unwrap();
        assert_eq!(rows[0].name, "NVIDIA GB10");
        assert_eq!((rows[0].used, rows[0].total), (None, None));
        assert_eq!(rows[0].utilization, Some(0.12));
        assert_eq!(rows[0].error, None);
    }

    #[test]
    fn a_bracketed_error_fails_only_its_device() {
        let rows = parse_query_gpu(UNKNOWN_ERROR).unwrap();
        assert_eq!(rows[0].error, None);
        assert_eq!(rows[1].used, None);
        assert_eq!(rows[1].total, Some(H100_TOTAL));
        assert_eq!(rows[1].utilization, None, "[Not Supported] is no figure");
        assert_eq!(
            rows[1].error.as_deref(),
            Some("nvidia-smi reports memory.used [Unknown Error]")
        );
    }

    #[test]
    fn a_name_with_commas_is_joined_back() {
        let rows = parse_query_gpu(NAME_WITH_COMMAS).unwrap();
        assert_eq!(rows[0].name, "NVIDIA Graphics Device, Rev. A1, ES");
        assert_eq!(rows[0].used, Some(512 * MIB));
        assert_eq!(rows[0].total, Some(49_140 * MIB));
        assert_eq!(rows[0].utilization, Some(0.03));
    }

    #[test]
    fn truncated_output_names_the_line() {
        let err = parse_query_gpu(TRUNCATED).unwrap_err();
        assert!(
            matches!(
                err,
                SmiParseError::Truncated {
                    line: 3,
                    found: 3,
                    ..
                }
            ),
            "{err:?}"
        );
        let message = err.to_string();
        assert!(message.contains("line 3 has 3 fields where 6"), "{message}");
        assert!(message.contains("'2, GPU-19d7e2a4"), "{message}");
        assert!(message.contains("NVIDIA H1'"), "{message}");
    }

    #[test]
    fn five_fields_are_truncated_not_a_nameless_device() {
        let err = parse_query_gpu("0, GPU-1, 1234, 81559, 7\n").unwrap_err();
        assert!(err.to_string().contains("line 1 has 5 fields"), "{err}");
    }

    #[test]
    fn units_in_the_memory_column_are_garbage() {
        let err = parse_query_gpu(WITH_UNITS).unwrap_err();
        assert_eq!(
            err.to_string(),
            "nvidia-smi line 1: memory.used is '1234 MiB', not a whole number of MiB"
        );
    }

    #[test]
    fn garbage_in_each_column_names_the_field() {
        let cases = [
            ("x, GPU-1, T4, 1, 2, 3", "index is 'x', not a device index"),
            ("0, , T4, 1, 2, 3", "uuid is '', not a device UUID"),
            ("0, GPU-1, T4, 1, -2, 3", "memory.total is '-2', not"),
            (
                "0, GPU-1, T4, 1, 2, 300",
                "utilization.gpu is '300', not a percentage",
            ),
            (
                "0, GPU-1, T4, 99999999999999999, 2, 3",
                "memory.used is '99999999999999999'",
            ),
        ];
        for (text, expected) in cases {
            let message = parse_query_gpu(text).unwrap_err().to_string();
            assert!(message.contains(expected), "{text}: {message}");
            assert!(message.starts_with("nvidia-smi line 1: "), "{message}");
        }
    }

    #[test]
    fn an_error_message_instead_of_csv_is_truncated_output() {
        let err = parse_query_gpu(DRIVER_MISMATCH).unwrap_err();
        let message = err.to_string();
        assert!(message.contains("line 1 has 1 fields"), "{message}");
        assert!(
            message.contains("Driver/library version mismatch"),
            "{message}"
        );
    }

    #[test]
    fn empty_output_is_an_error() {
        for text in ["", "\n", "  \n\n"] {
            assert_eq!(parse_query_gpu(text), Err(SmiParseError::Empty), "{text:?}");
        }
        assert_eq!(
            SmiParseError::Empty.to_string(),
            "nvidia-smi printed no device lines"
        );
    }

    #[test]
    fn blank_lines_are_skipped_and_line_numbers_stay_true() {
        let err =
            parse_query_gpu("\n0, GPU-1, T4, 1, 2, 3\n\n1, GPU-2, T4, one, 2, 3\n").unwrap_err();
        assert!(err.to_string().contains("line 4: memory.used"), "{err}");
    }

    #[test]
    fn long_garbage_is_clipped() {
        let value = "9".repeat(500);
        let message = parse_query_gpu(&format!("0, GPU-1, T4, {value}, 2, 3"))
            .unwrap_err()
            .to_string();
        assert!(message.len() < 200, "{message}");
        assert!(message.contains("..."), "{message}");
    }
}
