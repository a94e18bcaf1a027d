//! GPU memory through the `nvidia-smi` command: the fallback when the NVML library cannot be
//! loaded (a container without `libnvidia-ml.so.1` on the loader path, a build without the
//! `nvml` feature) but an `nvidia-smi` executable can be found.
//!
//! Every read runs
//! `nvidia-smi --query-gpu=index,uuid,name,memory.used,memory.total,utilization.gpu
//! --format=csv,noheader,nounits` and parses its output:
//!
//! - Memory is printed in MiB and recorded in bytes.
//! - `[N/A]` and `[Not Supported]` mean the driver does not measure that figure on that device
//!   (memory on unified-memory parts such as GB10, utilization under MIG): the figure is
//!   `None`, not an error. Any other bracketed value in a memory column (`[Unknown Error]`,
//!   `[GPU is lost]`, ...) is an error for that device only.
//! - nvidia-smi does not quote its CSV, so a name that contains commas spreads over several
//!   fields: the first two fields are the index and UUID, the last three the figures, and what
//!   lies between is the name.
//! - Output that cannot be read (truncated lines, text where numbers belong, no lines at all)
//!   is an error on every device, never a guess.
//!
//! Running a process costs milliseconds to seconds, so the source asks to be read at most
//! every [`MIN_INTERVAL`], and a run that does not finish within [`TIMEOUT`] is killed (with
//! everything it started) and reported as an error, so a command stuck in the driver cannot
//! stall the sampler.

mod query;

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::{Device, DeviceReading, DeviceScope, MemorySource};
use query::run_query;
pub(crate) use query::SmiError;

/// The columns queried, in order.
const FIELDS: [&str; 6] = [
    "index",
    "uuid",
    "name",
    "memory.used",
    "memory.total",
    "utilization.gpu",
];

/// Values nvidia-smi prints for a figure the device does not measure.
const NOT_MEASURED: [&str; 2] = ["N/A", "Not Supported"];

/// The shortest interval between two runs. Each run starts a process that initialises NVML
/// (tens of milliseconds of CPU, more with many devices); twice a second keeps that to a few
/// percent of one core.
pub(crate) const MIN_INTERVAL: Duration = Duration::from_millis(500);

/// How long one run may take before it is killed. A healthy run takes well under a second.
pub(crate) const TIMEOUT: Duration = Duration::from_secs(2);

const MIB: u64 = 1024 * 1024;

/// Reads device memory and utilization by running `nvidia-smi`.
#[derive(Debug)]
pub(crate) struct SmiSource {
    program: PathBuf,
    devices: Vec<Device>,
    timeout: Duration,
}

impl SmiSource {
    /// Runs `program` once to discover the devices, and keeps those in `scope`.
    ///
    /// # Errors
    /// The program cannot be run, fails, times out, or prints output that cannot be parsed.
    pub(crate) fn open(program: &Path, scope: &DeviceScope) -> Result<Self, SmiError> {
        let text = run_query(program, TIMEOUT)?;
        let rows = parse_query_gpu(&text)?;
        let devices: Vec<Device> = rows
            .into_iter()
            // `--query-gpu` lists whole GPUs only: MIG instances need NVML.
            .map(|row| Device {
                index: row.index,
                mig: None,
                uuid: row.uuid,
                name: row.name,
                vendor: "NVIDIA".to_owned(),
            })
            .filter(|device| scope.includes(device))
            .collect();
        let devices = scope.pick(devices);
        Ok(Self {
            program: program.to_path_buf(),
            devices,
            timeout: TIMEOUT,
        })
    }
}

impl MemorySource for SmiSource {
    fn name(&self) -> &str {
        "nvidia-smi"
    }

    fn devices(&self) -> &[Device] {
        &self.devices
    }

    fn read(&mut self, out: &mut [DeviceReading]) {
        let rows = run_query(&self.program, self.timeout)
            .and_then(|text| parse_query_gpu(&text).map_err(SmiError::from));
        for (device, reading) in self.devices.iter().zip(out.iter_mut()) {
            *reading = match &rows {
                Err(error) => failed(error.to_string()),
                Ok(rows) => match rows.iter().find(|row| row.uuid == device.uuid) {
                    None => failed(format!("nvidia-smi no longer lists {}", device.uuid)),
                    Some(SmiRow {
                        error: Some(error), ..
                    }) => failed(error.clone()),
                    Some(row) => DeviceReading {
                        used: row.used,
                        total: row.total,
                        utilization: row.utilization,
                        process_used: None,
                        error: None,
                    },
                },
            };
        }
    }

    fn min_interval(&self) -> Option<Duration> {
        Some(MIN_INTERVAL)
    }
}

fn failed(error: String) -> DeviceReading {
    DeviceReading {
        error: Some(error),
        ..DeviceReading::default()
    }
}

/// The first `nvidia-smi` on `PATH` that is an executable file.
pub(crate) fn find_nvidia_smi(path_var: &OsStr) -> Option<PathBuf> {
    find_in(path_var)
}

fn find_in(path_var: &OsStr) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    std::env::split_paths(path_var)
        // A relative entry would depend on the working directory: skip it.
        .filter(|dir| dir.is_absolute())
        .map(|dir| dir.join("nvidia-smi"))
        .find(|path| {
            std::fs::metadata(path)
                .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
        })
}

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
fn clip(text: &str) -> String {
    match text.char_indices().nth(80) {
        Some((end, _)) => format!("{}...", &text[..end]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;
    use std::time::Instant;

    const H100_X1: &str = include_str!("../../tests/fixtures/smi/h100_x1.txt");
    const H100_X8: &str = include_str!("../../tests/fixtures/smi/h100_x8.txt");
    const GB10: &str = include_str!("../../tests/fixtures/smi/gb10_memory_not_available.txt");
    const UNKNOWN_ERROR: &str = include_str!("../../tests/fixtures/smi/unknown_error.txt");
    const NAME_WITH_COMMAS: &str = include_str!("../../tests/fixtures/smi/name_with_commas.txt");
    const TRUNCATED: &str = include_str!("../../tests/fixtures/smi/truncated.txt");
    const WITH_UNITS: &str = include_str!("../../tests/fixtures/smi/with_units.txt");
    const DRIVER_MISMATCH: &str = include_str!("../../tests/fixtures/smi/driver_mismatch.txt");

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

    #[test]
    fn nvidia_smi_is_found_on_path_when_executable() {
        use std::os::unix::fs::PermissionsExt;
        let not_executable = tempfile::tempdir().unwrap();
        let executable = tempfile::tempdir().unwrap();
        std::fs::write(not_executable.path().join("nvidia-smi"), "").unwrap();
        let found = executable.path().join("nvidia-smi");
        std::fs::write(&found, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&found, std::fs::Permissions::from_mode(0o755)).unwrap();
        let path_var = std::env::join_paths([
            "relative/dir".as_ref(),
            not_executable.path(),
            executable.path(),
        ])
        .unwrap();
        assert_eq!(find_in(&path_var), Some(found));
        let path_var = std::env::join_paths([not_executable.path()]).unwrap();
        assert_eq!(find_in(&path_var), None);
    }

    /// A fake `nvidia-smi` in a temporary directory. It checks its arguments, then acts on the
    /// `mode` file next to it: `print` prints the `output` file, `fail` prints it and exits 9,
    /// `hang` starts a long sleep, records its pid in `sleep.pid` and waits for it.
    struct FakeSmi {
        dir: tempfile::TempDir,
        program: PathBuf,
    }

    impl FakeSmi {
        fn new() -> Self {
            use std::os::unix::fs::PermissionsExt;
            let dir = tempfile::tempdir().unwrap();
            let program = dir.path().join("nvidia-smi");
            let script = r#"#!/bin/sh
[ -n "$FAKE_SMI_PROBE" ] && exit 0
dir=$(dirname "$0")
if [ "$1" != "--query-gpu=index,uuid,name,memory.used,memory.total,utilization.gpu" ] \
   || [ "$2" != "--format=csv,noheader,nounits" ] || [ $# -ne 2 ]; then
    echo "unexpected arguments: $*" >&2
    exit 2
fi
case $(cat "$dir/mode") in
    print) cat "$dir/output" ;;
    fail) cat "$dir/output"; exit 9 ;;
    hang) sleep 30 & echo $! > "$dir/sleep.pid"; wait ;;
esac
"#;
            std::fs::write(&program, script).unwrap();
            std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).unwrap();
            // Another test thread may fork while the script is open for writing, and exec then
            // fails with ETXTBSY until that fork execs: run it once until it starts.
            for _ in 0..200 {
                match Command::new(&program).env("FAKE_SMI_PROBE", "1").status() {
                    Ok(_) => break,
                    Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) => {
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    Err(e) => panic!("the fake nvidia-smi does not run: {e}"),
                }
            }
            Self { dir, program }
        }

        fn set(&self, mode: &str, output: &str) {
            std::fs::write(self.dir.path().join("output"), output).unwrap();
            std::fs::write(self.dir.path().join("mode"), mode).unwrap();
        }
    }

    fn read(source: &mut SmiSource) -> Vec<DeviceReading> {
        let mut out = vec![DeviceReading::default(); source.devices().len()];
        source.read(&mut out);
        out
    }

    #[test]
    fn a_fake_nvidia_smi_is_opened_and_read_in_bytes() {
        let fake = FakeSmi::new();
        fake.set("print", H100_X8);
        let mut source = SmiSource::open(&fake.program, &DeviceScope::all()).unwrap();
        assert_eq!(source.name(), "nvidia-smi");
        assert_eq!(source.min_interval(), Some(Duration::from_millis(500)));
        assert_eq!(source.devices().len(), 8);
        assert_eq!(
            source.devices()[3],
            Device {
                index: 3,
                mig: None,
                uuid: "GPU-2c4e6a8b-0d1f-4357-9b8d-a1c3e5f70912".into(),
                name: "NVIDIA H100 80GB HBM3".into(),
                vendor: "NVIDIA".into(),
            }
        );

        fake.set("print", H100_X1);
        let readings = read(&mut source);
        assert_eq!(
            readings[0],
            DeviceReading {
                used: Some(1_293_942_784),
                total: Some(85_520_809_984),
                utilization: Some(0.07),
                process_used: None,
                error: None,
            }
        );
        for reading in &readings[1..] {
            assert_eq!(reading.used, None);
            assert!(
                reading
                    .error
                    .as_deref()
                    .unwrap()
                    .contains("nvidia-smi no longer lists GPU-"),
                "{reading:?}"
            );
        }

        fake.set(
            "print",
            "0, GPU-5f8e3a7c-2b1d-4e6f-9a0b-c3d4e5f60718, NVIDIA H100 80GB HBM3, lots, 81559, 7\n",
        );
        for reading in read(&mut source) {
            assert_eq!((reading.used, reading.total), (None, None));
            let error = reading.error.unwrap();
            assert!(error.contains("line 1: memory.used is 'lots'"), "{error}");
        }

        fake.set(
            "fail",
            "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n",
        );
        for reading in read(&mut source) {
            let error = reading.error.unwrap();
            assert!(error.contains("failed (exit status: 9)"), "{error}");
            assert!(
                error.contains("couldn't communicate with the NVIDIA driver"),
                "{error}"
            );
        }

        fake.set("print", H100_X8);
        let readings = read(&mut source);
        assert!(readings.iter().all(|r| r.error.is_none()), "it recovers");
        assert_eq!(readings[6].used, Some(71_321 * MIB));
    }

    #[test]
    fn open_keeps_the_devices_in_scope() {
        let fake = FakeSmi::new();
        fake.set("print", H100_X8);
        let scope = DeviceScope::parse("2,GPU-6b8d").unwrap();
        let mut source = SmiSource::open(&fake.program, &scope).unwrap();
        let indexes: Vec<u32> = source.devices().iter().map(|d| d.index).collect();
        assert_eq!(indexes, [2, 7]);
        let readings = read(&mut source);
        assert_eq!(readings[0].used, Some(71_002 * MIB));
        assert_eq!(readings[1].used, Some(0));
    }

    #[test]
    fn open_reports_what_went_wrong() {
        let missing = SmiSource::open(Path::new("/nonexistent/nvidia-smi"), &DeviceScope::all());
        let error = missing.unwrap_err().to_string();
        assert!(
            error.contains("/nonexistent/nvidia-smi could not be run"),
            "{error}"
        );

        let fake = FakeSmi::new();
        fake.set("fail", "No devices were found\n");
        let error = SmiSource::open(&fake.program, &DeviceScope::all())
            .unwrap_err()
            .to_string();
        assert!(
            error.ends_with("failed (exit status: 9): No devices were found"),
            "{error}"
        );

        fake.set("print", "");
        let error = SmiSource::open(&fake.program, &DeviceScope::all())
            .unwrap_err()
            .to_string();
        assert_eq!(error, "nvidia-smi printed no device lines");
    }

    #[test]
    fn a_hanging_nvidia_smi_is_killed_within_the_timeout() {
        let fake = FakeSmi::new();
        fake.set("print", H100_X1);
        let mut source = SmiSource::open(&fake.program, &DeviceScope::all()).unwrap();
        source.timeout = Duration::from_millis(300);
        fake.set("hang", "");
        let started = Instant::now();
        let readings = read(&mut source);
        let elapsed = started.elapsed();
        assert!(elapsed >= source.timeout, "{elapsed:?}");
        assert!(
            elapsed < source.timeout + Duration::from_millis(700),
            "{elapsed:?}"
        );
        let error = readings[0].error.as_deref().unwrap();
        assert!(
            error.contains("did not answer within 300ms and was killed"),
            "{error}"
        );
        assert_eq!(readings[0].used, None);

        // What the script started is killed too: gone, or a zombie waiting for init.
        let pid = std::fs::read_to_string(fake.dir.path().join("sleep.pid")).unwrap();
        let stat = format!("/proc/{}/stat", pid.trim());
        let deadline = Instant::now() + Duration::from_secs(2);
        loop {
            match std::fs::read_to_string(&stat) {
                Err(_) => break,
                Ok(text) if text.contains(") Z ") => break,
                Ok(text) if Instant::now() > deadline => panic!("still running: {text}"),
                Ok(_) => std::thread::sleep(Duration::from_millis(10)),
            }
        }
    }
}
