//! A node of 80 GiB devices on the fake NVML, 1 GiB in use on each, for the tests of a rank
//! that runs out of memory: the test fills one device while the ranks train, through the
//! fake's live file (`FAKE_NVML_LIVE_FILE`).

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};

use crate::example::clean_command;
use crate::fake_nvml::FakeNvml;

/// What a filled device holds: 79 GiB, near the end of its 80.
pub const FILLED: u64 = 79 << 30;

/// The node: the fake NVML and its live file.
pub struct FillingNode {
    fake: FakeNvml,
    live: PathBuf,
    devices: String,
}

impl FillingNode {
    /// A node of `devices` devices, its live file in `dir`.
    pub fn new(dir: &Path, devices: u32) -> FillingNode {
        let live = dir.join("live");
        std::fs::write(&live, "").expect("the live file");
        FillingNode {
            fake: FakeNvml::build(),
            live,
            devices: devices.to_string(),
        }
    }

    /// Starts `program` with `args` on the node as a user would (see
    /// [`clean_command`]), writing its runs under `runs`, with `envs` besides the node's;
    /// its stdout and stderr piped.
    pub fn start(
        &self,
        program: impl AsRef<OsStr>,
        args: &[&str],
        runs: &Path,
        envs: &[(&str, &str)],
    ) -> Child {
        let mut all = vec![
            (
                "GPUSPAN_NVML_LIB",
                self.fake.path().to_str().expect("a UTF-8 path"),
            ),
            ("GPUSPAN_RUN_DIR", runs.to_str().expect("a UTF-8 path")),
            ("FAKE_NVML_DEVICES", &self.devices),
            ("FAKE_NVML_TOTAL_MIB", "81920"),
            ("FAKE_NVML_USED_MIB", "1024"),
            (
                "FAKE_NVML_LIVE_FILE",
                self.live.to_str().expect("a UTF-8 path"),
            ),
        ];
        all.extend_from_slice(envs);
        let program = program.as_ref();
        clean_command(program, args, &all)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{program:?} starts: {e}"))
    }

    /// Fills `device` to [`FILLED`] at once: the live file is written aside and renamed
    /// in, so that the fake never reads half of it.
    pub fn fill(&self, device: u32) {
        let aside = self.live.with_extension("new");
        std::fs::write(&aside, format!("used {device} {FILLED}\n")).expect("the live file");
        std::fs::rename(&aside, &self.live).expect("the live file");
    }
}
