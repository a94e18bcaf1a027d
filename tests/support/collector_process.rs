//! `gpuspan collect` as a child process on free loopback ports, for the tests of what it
//! holds in memory: its peak and present resident size read from `/proc`, and its summary
//! once stopped with SIGTERM. Dropping it kills the child.

use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, ChildStderr, ExitStatus, Stdio};

use crate::example::clean_command;
use crate::fake_nvml::FakeNvml;
use crate::receiver::unused_port;

/// One MiB in bytes.
pub const MIB: u64 = 1 << 20;

/// A running `gpuspan collect`.
pub struct CollectorProcess {
    child: Child,
    stderr: BufReader<ChildStderr>,
    /// Where it receives OTLP/gRPC.
    pub grpc: SocketAddr,
    /// Where it receives OTLP/HTTP.
    pub http: SocketAddr,
    /// The line it printed when it started listening.
    pub banner: String,
    /// The fake GPUs and the directory of a collector started with its own.
    own: Option<(FakeNvml, tempfile::TempDir)>,
}

/// Resident memory of a process, in bytes.
#[derive(Debug, Clone, Copy)]
pub struct Memory {
    /// `VmHWM`: the peak resident set since it started.
    pub peak: u64,
    /// `VmRSS`: the resident set now.
    pub now: u64,
}

impl CollectorProcess {
    /// Starts `binary collect` with `args` after the listening addresses, in `dir` (its run
    /// directory under it), with a clean environment plus `envs`; returns once it listens.
    pub fn start(binary: &str, args: &[&str], envs: &[(&str, &str)], dir: &Path) -> Self {
        let grpc: SocketAddr = ([127, 0, 0, 1], unused_port()).into();
        let http: SocketAddr = ([127, 0, 0, 1], unused_port()).into();
        let (grpc_arg, http_arg) = (grpc.to_string(), http.to_string());
        let mut all = vec!["collect", "--grpc", &grpc_arg, "--http", &http_arg];
        all.extend_from_slice(args);
        let runs = dir.join("runs");
        let runs = runs.to_string_lossy();
        let mut environment = vec![("GPUSPAN_RUN_DIR", runs.as_ref())];
        environment.extend_from_slice(envs);
        let mut child = clean_command(binary, &all, &environment)
            .current_dir(dir)
            .stderr(Stdio::piped())
            .spawn()
            .expect("start gpuspan collect");
        let mut stderr = BufReader::new(child.stderr.take().expect("piped stderr"));
        let banner = read_banner(&mut stderr);
        let mut process = Self {
            child,
            stderr,
            grpc,
            http,
            banner: banner.clone().unwrap_or_default(),
            own: None,
        };
        if let Err(before) = banner {
            let _ = process.child.kill();
            panic!("gpuspan collect did not start: {before}");
        }
        process
    }

    /// `binary collect` as [`CollectorProcess::start`] starts it, on fake GPUs and in a
    /// directory of its own, forwarding over gRPC to an address where nothing listens, so
    /// that what it takes in stays in its queue; its own metrics are not exported.
    pub fn forwarding_nowhere(binary: &str, args: &[&str], envs: &[(&str, &str)]) -> Self {
        let fake = FakeNvml::build();
        let dir = tempfile::tempdir().expect("a temporary directory");
        let lib = fake.path().to_string_lossy().into_owned();
        let nowhere = crate::receiver::unused_endpoint();
        let mut environment = vec![
            ("GPUSPAN_NVML_LIB", lib.as_str()),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &nowhere),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ("OTEL_METRICS_EXPORTER", "none"),
        ];
        environment.extend_from_slice(envs);
        let mut process = Self::start(binary, args, &environment, dir.path());
        process.own = Some((fake, dir));
        process
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Its peak and present resident size.
    pub fn memory(&self) -> Memory {
        let pid = self.pid();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
            .unwrap_or_else(|e| panic!("/proc/{pid}/status: {e} (did the collector die?)"));
        let field = |name: &str| -> u64 {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|rest| rest.split_whitespace().next())
                .and_then(|kib| kib.parse::<u64>().ok())
                .unwrap_or_else(|| panic!("no {name} in /proc/{pid}/status"))
                * 1024
        };
        Memory {
            peak: field("VmHWM:"),
            now: field("VmRSS:"),
        }
    }

    /// Whether it is still running.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Stops it with SIGTERM and returns its exit status and everything it printed after
    /// its first line.
    pub fn stop(mut self) -> (ExitStatus, String) {
        // SAFETY: signalling our own child process.
        unsafe {
            libc::kill(self.pid() as libc::pid_t, libc::SIGTERM);
        }
        let status = self.child.wait().expect("wait for gpuspan collect");
        let mut rest = String::new();
        let _ = self.stderr.read_to_string(&mut rest);
        (status, rest)
    }

    /// Stops it with SIGTERM, checks it ended with exit code 0, and returns the line of its
    /// summary that counts the spans (`N spans received, ...`).
    pub fn summary(self) -> String {
        let (status, rest) = self.stop();
        assert!(status.success(), "{status}: {rest}");
        rest.lines()
            .find(|l| l.contains("spans received"))
            .unwrap_or_else(|| panic!("no summary: {rest}"))
            .to_owned()
    }
}

impl Drop for CollectorProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Reads `gpuspan collect`'s stderr up to its banner (the line saying where it listens) and
/// returns it, trimmed. A warning may come first (a sampler too slow for its interval on a
/// busy machine). `Err` with everything it printed when it ended without one.
pub fn read_banner(stderr: &mut impl BufRead) -> Result<String, String> {
    let mut before = String::new();
    loop {
        let mut line = String::new();
        match stderr.read_line(&mut line) {
            Ok(0) | Err(_) => return Err(before),
            Ok(_) if line.contains("gpuspan collect: OTLP") => {
                return Ok(line.trim_end().to_owned())
            }
            Ok(_) => before.push_str(&line),
        }
    }
}
