//! What gpuspan's integration tests share: a fake NVML library read through the real
//! `nvml-wrapper`, an in-process OTLP receiver, the third-party servers the collector tests
//! start, and helpers to run the `train` example and gpuspan's sampler.
//!
//! A crate of its own so that it is compiled once, not once per test binary.

use std::path::{Path, PathBuf};

pub mod cadence;
pub mod collector_process;
pub mod commands;
pub mod counting_alloc;
pub mod example;
pub mod fake_nvml;
pub mod filling_node;
pub mod go_stack;
pub mod http;
pub mod idle_ticker;
pub mod jaeger_api;
pub mod json_collector;
pub mod mlflow;
pub mod otlp_json;
pub mod otlp_requests;
pub mod pictures;
pub mod power_window;
pub mod prometheus_server;
pub mod prometheus_text;
pub mod protocols;
pub mod python_otel;
pub mod raw_http;
pub mod receiver;
pub mod rotel_debug;
pub mod sampling;
pub mod scripted;
pub mod servers;
pub mod setup;
pub mod signalled;
pub mod terminal;
pub mod throttle;
pub mod tls;
pub mod traces;

/// The repository root, where the test data and scripts are.
pub fn repo_root() -> &'static Path {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    // This crate lives at `tests/support`.
    manifest.parent().and_then(Path::parent).unwrap_or(manifest)
}

/// A directory for files the tests build (`<target>/tmp`, as Cargo's `CARGO_TARGET_TMPDIR`
/// for integration tests), found from the running test binary at `<target>/<profile>/deps/`.
pub fn target_tmp_dir() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.parent()?.parent()?.join("tmp")))
        .unwrap_or_else(std::env::temp_dir)
}

/// The name the test harness gives the test function `function` of the module at
/// `module_path` (`module_path!()` where the test is), as `--exact` wants it: the module
/// path without the test binary's own name, then the function. For a test that runs its
/// own binary again, whether its file is a test binary of its own or a module of one.
pub fn test_name(module_path: &str, function: &str) -> String {
    match module_path.split_once("::") {
        Some((_binary, module)) => format!("{module}::{function}"),
        None => function.to_owned(),
    }
}
