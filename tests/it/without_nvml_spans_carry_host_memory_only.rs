//! When NVML cannot be used (initialisation fails, the library is not there, the devices
//! cannot be counted), gpuspan runs with no GPU source: `memory_source()` is `none`, spans
//! say so in `gpu.memory.source` and carry host memory (`process.memory.*`) but no GPU
//! memory attribute, and no GPU metric series is exported.

use gpuspan_test_support as support;

use std::path::Path;
use std::time::{Duration, Instant};

use support::fake_nvml::{code, FakeNvml};
use support::receiver::{Receiver, StatusCode};
use support::sampling::{self, PATIENCE};
use support::setup;

/// Runs a step with NVML loaded from `lib`, and checks what a run without a GPU source
/// records.
fn assert_host_memory_only(lib: &Path) {
    let receiver = Receiver::start_grpc();
    let builder = setup::to_receiver(&receiver)
        .nvml_lib(lib)
        .sample_interval(Duration::from_millis(2));
    let (telemetry, ()) = sampling::run(builder, |telemetry| {
        assert_eq!(telemetry.memory_source(), Some("none"));
        let _step = gpuspan::step_span!(0);
        // The sampler still runs (for host memory): wait for two readings of it.
        let target = telemetry.sampler_stats().unwrap().samples + 2;
        let deadline = Instant::now() + PATIENCE;
        while telemetry.sampler_stats().unwrap().samples < target {
            assert!(Instant::now() < deadline, "the sampler stopped");
            std::thread::sleep(Duration::from_micros(200));
        }
    });
    telemetry.shutdown().expect("clean shutdown");

    let steps = receiver.spans_named("step");
    assert_eq!(steps.len(), 1);
    let step = &steps[0];
    assert_eq!(step.str_attr("gpu.memory.source"), Some("none"));
    assert_eq!(
        step.status_code,
        StatusCode::Unset,
        "{}",
        step.status_message
    );
    let gpu: Vec<&String> = step
        .attributes
        .keys()
        .filter(|key| key.starts_with("gpu."))
        .filter(|key| *key != "gpu.memory.source" && *key != "gpu.memory.samples")
        .collect();
    assert!(
        gpu.is_empty(),
        "no GPU memory without a GPU source: {gpu:?}"
    );
    for key in ["start", "end", "peak"] {
        let value = step.int_attr(&format!("process.memory.{key}"));
        assert!(
            value.is_some_and(|v| v > 0),
            "process.memory.{key}: {value:?}"
        );
    }

    let names: Vec<String> = receiver
        .metric_points()
        .into_iter()
        .map(|point| point.name)
        .collect();
    assert!(
        names.iter().any(|n| n == "process.memory.usage"),
        "{names:?}"
    );
    assert!(
        !names
            .iter()
            .any(|n| n.starts_with("hw.gpu.") || n == "gpu.memory.peak"),
        "no GPU series without a GPU: {names:?}"
    );
}

#[test]
fn nvml_failing_to_initialise_leaves_host_memory_only() {
    let fake = FakeNvml::build();
    fake.set_error("nvmlInit_v2", None, code::DRIVER_NOT_LOADED);
    assert_host_memory_only(fake.path());
    assert!(fake.call_count("nvmlInit_v2") >= 1, "NVML was tried");
    assert_eq!(fake.init_count(), 0);
}

#[test]
fn a_missing_nvml_library_leaves_host_memory_only() {
    let dir = tempfile::tempdir().unwrap();
    assert_host_memory_only(&dir.path().join("no-such-dir/libnvidia-ml.so.1"));
}

#[test]
fn nvml_failing_to_count_devices_leaves_host_memory_only() {
    let fake = FakeNvml::build();
    fake.set_error("nvmlDeviceGetCount_v2", None, code::UNKNOWN);
    assert_host_memory_only(fake.path());
    assert_eq!(
        fake.init_count(),
        0,
        "NVML is shut down again when it cannot be used"
    );
}
