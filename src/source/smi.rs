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

mod parse;
mod query;

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::{Device, DeviceReading, DeviceScope, MemorySource};
pub(crate) use parse::parse_query_gpu;
#[cfg(test)]
pub(crate) use parse::SmiParseError;
use parse::SmiRow;
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

/// The shortest interval between two runs. Each run starts a process that initialises NVML
/// (tens of milliseconds of CPU, more with many devices); twice a second keeps that to a few
/// percent of one core.
pub(crate) const MIN_INTERVAL: Duration = Duration::from_millis(500);

/// How long one run may take before it is killed. A healthy run takes well under a second.
pub(crate) const TIMEOUT: Duration = Duration::from_secs(2);

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

#[cfg(test)]
mod tests {
    use super::parse::MIB;
    use super::*;
    use std::process::Command;
    use std::time::Instant;

    const H100_X1: &str = include_str!("../../tests/fixtures/smi/h100_x1.txt");
    const H100_X8: &str = include_str!("../../tests/fixtures/smi/h100_x8.txt");

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
