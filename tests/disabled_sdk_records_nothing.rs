// A test binary of its own: it sets variables every build reads, and counts the process's threads.
//! `OTEL_SDK_DISABLED=true` starts no thread, writes no file, sends nothing, and the macros
//! still compile and run.

use gpuspan_test_support as support;

use support::receiver::Receiver;

/// The names of this process's threads that are gpuspan's (`gpuspan-sampler`,
/// `gpuspan-spans`, ...): the other tests of this binary start and end threads of their own.
fn gpuspan_threads() -> Vec<String> {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
        .map(|name| name.trim().to_owned())
        .filter(|name| name.starts_with("gpuspan"))
        .collect()
}

#[test]
fn otel_sdk_disabled_records_nothing() {
    let receiver = Receiver::start_grpc();
    let run_root = tempfile::tempdir().unwrap();
    temp_env::with_vars(
        [
            ("OTEL_SDK_DISABLED", Some("true")),
            (
                "OTEL_EXPORTER_OTLP_ENDPOINT",
                Some(receiver.endpoint().as_str()),
            ),
            ("GPUSPAN_RUN_DIR", Some(run_root.path().to_str().unwrap())),
        ],
        || {
            let before = gpuspan_threads();
            let telemetry = gpuspan::Telemetry::builder().build().unwrap();
            assert_eq!(gpuspan_threads(), before, "no sampler or exporter thread");
            assert!(telemetry.layer::<tracing_subscriber::Registry>().is_none());
            assert_eq!(telemetry.run_dir(), None);
            assert_eq!(telemetry.sampler_stats(), None);
            for epoch in 0..2 {
                let e = gpuspan::epoch_span!(epoch);
                for step in 0..10 {
                    let s = gpuspan::step_span!(step);
                    assert!(s.memory().is_none());
                }
                assert!(e.memory().is_none());
            }
            gpuspan::record_allocator(1, 2);
            telemetry.shutdown().unwrap();
        },
    );
    assert_eq!(receiver.trace_requests(), 0);
    assert_eq!(receiver.metric_requests(), 0);
    assert_eq!(
        std::fs::read_dir(run_root.path()).unwrap().count(),
        0,
        "no run directory"
    );
}

#[test]
fn code_can_disable_what_the_environment_enables() {
    temp_env::with_var("OTEL_SDK_DISABLED", Some("false"), || {
        let telemetry = gpuspan::Telemetry::builder()
            .disabled(true)
            .build()
            .unwrap();
        assert_eq!(telemetry.run_id(), None);
    });
}
