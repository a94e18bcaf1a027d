// A test binary of its own: it installs the process's global subscriber.
//! `gpuspan::init()` installs the global subscriber from the environment; a second install
//! is an error that says what to do, not a panic.

use gpuspan_test_support as support;

use support::receiver::Receiver;

#[test]
fn init_exports_from_the_environment_and_refuses_a_second_install() {
    let receiver = Receiver::start_grpc();
    let telemetry = temp_env::with_vars(
        [
            (
                "OTEL_EXPORTER_OTLP_ENDPOINT",
                Some(receiver.endpoint().as_str()),
            ),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", Some("grpc")),
            ("OTEL_SERVICE_NAME", Some("from-env")),
            ("GPUSPAN_NVML_LIB", Some("/nonexistent/libnvidia-ml.so.1")),
        ],
        || gpuspan::init().expect("first install"),
    );
    let second = gpuspan::init().expect_err("a second install fails");
    assert!(matches!(second, gpuspan::InitError::AlreadyInstalled));
    assert!(
        second.to_string().contains("Telemetry::layer()"),
        "{second}"
    );

    // The global subscriber works from any thread.
    std::thread::spawn(|| {
        let _e = gpuspan::epoch_span!(0);
        let _s = gpuspan::step_span!(0);
    })
    .join()
    .unwrap();
    telemetry.shutdown().unwrap();

    let step = &receiver.spans_named("step")[0];
    assert!(step.is_child_of(&receiver.spans_named("epoch")[0]));
    assert_eq!(step.str_attr("gpu.memory.source"), Some("none"));
    assert!(step.int_attr("process.memory.peak").unwrap() > 0);
    assert_eq!(step.resource_str_attr("service.name"), Some("from-env"));
}
