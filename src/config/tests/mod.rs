//! The settings resolved from code, the environment and the defaults: destinations,
//! exporters, bounds and the errors that name a bad value. The launcher's ranks, jobs and
//! device scopes are in `ranks`.

use super::*;

mod ranks;

pub(super) fn with_env<R>(vars: &[(&str, &str)], f: impl FnOnce() -> R) -> R {
    let mut all: Vec<(&str, Option<&str>)> = vars::ALL.iter().map(|v| (*v, None)).collect();
    for (key, value) in vars {
        all.retain(|(k, _)| k != key);
        all.push((key, Some(value)));
    }
    temp_env::with_vars(all, f)
}

pub(super) fn otlp(destination: &Destination) -> &OtlpTarget {
    match destination {
        Destination::Otlp(target) => target,
        other => panic!("expected OTLP, got {other:?}"),
    }
}

pub(super) fn error_text(vars: &[(&str, &str)]) -> String {
    with_env(vars, || resolve(&CodeSettings::default()))
        .expect_err("the value is rejected")
        .to_string()
}

#[test]
fn defaults_write_a_run_directory() {
    let settings = with_env(&[], || resolve(&CodeSettings::default())).unwrap();
    assert!(!settings.disabled);
    assert_eq!(settings.traces, Destination::RunDir);
    assert_eq!(settings.metrics, Destination::RunDir);
    assert_eq!(settings.sample_interval, DEFAULT_SAMPLE_INTERVAL);
    assert_eq!(settings.run_root, PathBuf::from("gpuspan-runs"));
    assert_eq!(settings.metric_interval, Duration::from_secs(60));
    assert_eq!(settings.devices, DeviceScope::all());
    assert!(settings.service_name.starts_with("unknown_service:"));
}

#[test]
fn env_beats_defaults_and_code_beats_env() {
    let env = [
        ("OTEL_SERVICE_NAME", "from-env"),
        ("GPUSPAN_SAMPLE_INTERVAL", "2ms"),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://env:4318"),
        ("OTEL_EXPORTER_OTLP_TIMEOUT", "2500"),
        (
            "OTEL_EXPORTER_OTLP_HEADERS",
            "x-team=ml,authorization=Bearer%20abc",
        ),
        ("GPUSPAN_RUN_ID", "env-run"),
    ];
    let from_env = with_env(&env, || resolve(&CodeSettings::default())).unwrap();
    assert_eq!(from_env.service_name, "from-env");
    assert_eq!(from_env.sample_interval, Duration::from_millis(2));
    assert_eq!(from_env.run_id, "env-run");
    let traces = otlp(&from_env.traces);
    assert_eq!(traces.endpoint, "http://env:4318/v1/traces");
    assert_eq!(traces.protocol, Protocol::HttpProtobuf);
    assert_eq!(traces.timeout, Duration::from_millis(2500));
    assert_eq!(
        traces.headers,
        vec![
            ("x-team".to_owned(), "ml".to_owned()),
            ("authorization".to_owned(), "Bearer abc".to_owned())
        ]
    );
    assert_eq!(
        otlp(&from_env.metrics).endpoint,
        "http://env:4318/v1/metrics"
    );

    let code = CodeSettings {
        service_name: Some("from-code".into()),
        sample_interval: Some(Duration::from_millis(1)),
        endpoint: Some("http://code:4317".into()),
        protocol: Some(Protocol::Grpc),
        timeout: Some(Duration::from_secs(1)),
        headers: vec![("x-team".into(), "infra".into())],
        run_id: Some("code-run".into()),
        ..CodeSettings::default()
    };
    let from_code = with_env(&env, || resolve(&code)).unwrap();
    assert_eq!(from_code.service_name, "from-code");
    assert_eq!(from_code.sample_interval, Duration::from_millis(1));
    assert_eq!(from_code.run_id, "code-run");
    let traces = otlp(&from_code.traces);
    assert_eq!(
        traces.endpoint, "http://code:4317",
        "gRPC takes the endpoint as is"
    );
    assert_eq!(traces.protocol, Protocol::Grpc);
    assert_eq!(traces.timeout, Duration::from_secs(1));
    assert!(traces.headers.contains(&("x-team".into(), "infra".into())));
    assert!(!traces.headers.contains(&("x-team".into(), "ml".into())));
}

#[test]
fn per_signal_settings_beat_the_general_ones() {
    let env = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://all:4318/"),
        (
            "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
            "http://metrics:9090/custom",
        ),
        ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "grpc"),
        ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "700"),
    ];
    let settings = with_env(&env, || resolve(&CodeSettings::default())).unwrap();
    let traces = otlp(&settings.traces);
    assert_eq!(traces.protocol, Protocol::Grpc);
    assert_eq!(traces.endpoint, "http://all:4318/");
    assert_eq!(traces.timeout, Duration::from_millis(700));
    let metrics = otlp(&settings.metrics);
    assert_eq!(metrics.endpoint, "http://metrics:9090/custom", "used as is");
    assert_eq!(metrics.timeout, Duration::from_secs(10));
}

#[test]
fn exporters_can_be_chosen_per_signal() {
    let env = [
        ("OTEL_TRACES_EXPORTER", "console"),
        ("OTEL_METRICS_EXPORTER", "none"),
    ];
    let settings = with_env(&env, || resolve(&CodeSettings::default())).unwrap();
    assert_eq!(settings.traces, Destination::Console);
    assert_eq!(settings.metrics, Destination::None);
    let env = [("OTEL_TRACES_EXPORTER", "otlp")];
    let settings = with_env(&env, || resolve(&CodeSettings::default())).unwrap();
    assert_eq!(
        otlp(&settings.traces).endpoint,
        "http://localhost:4318/v1/traces"
    );
    assert_eq!(settings.metrics, Destination::RunDir);
}

#[test]
fn every_exporter_the_environment_names_is_where_both_signals_go() {
    for exporter in Exporter::ALL {
        let env = [
            ("OTEL_TRACES_EXPORTER", exporter.as_str()),
            ("OTEL_METRICS_EXPORTER", exporter.as_str()),
        ];
        let settings = with_env(&env, || resolve(&CodeSettings::default())).unwrap();
        for destination in [&settings.traces, &settings.metrics] {
            let reached = match destination {
                Destination::Otlp(_) => Exporter::Otlp,
                Destination::Console => Exporter::Console,
                Destination::None => Exporter::None,
                Destination::RunDir => Exporter::RunDir,
            };
            assert_eq!(reached, exporter, "{destination:?}");
        }
    }
}

#[test]
fn the_environment_can_send_one_signal_to_the_run_directory() {
    let env = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://env:4318"),
        ("OTEL_METRICS_EXPORTER", "run_dir"),
    ];
    let settings = with_env(&env, || resolve(&CodeSettings::default())).unwrap();
    assert_eq!(otlp(&settings.traces).endpoint, "http://env:4318/v1/traces");
    assert_eq!(settings.metrics, Destination::RunDir);
}

#[test]
fn invalid_values_name_the_variable_and_the_value() {
    // Each line: a variable, the value it is set to, and a hint the error must give.
    let cases = "\
        GPUSPAN_SAMPLE_INTERVAL=fast => 5ms
        GPUSPAN_SAMPLE_INTERVAL=10us => at least 100us
        GPUSPAN_POWER_INTERVAL=0 => at least 100us, such as 20ms
        GPUSPAN_POWER_INTERVAL=-20ms => 5ms
        GPUSPAN_POWER_INTERVAL=20 watts => 5ms
        GPUSPAN_POWER_INTERVAL=99999999999999999999s => at most a day
        OTEL_EXPORTER_OTLP_TIMEOUT=10s => milliseconds
        OTEL_EXPORTER_OTLP_PROTOCOL=udp => grpc or http/protobuf
        OTEL_EXPORTER_OTLP_PROTOCOL=http/json => not supported
        OTEL_TRACES_EXPORTER=jaeger => otlp, console or none
        OTEL_SDK_DISABLED=maybe => true or false
        OTEL_METRIC_EXPORT_INTERVAL=-1 => milliseconds
        OTEL_RESOURCE_ATTRIBUTES=team => key=value
        OTEL_EXPORTER_OTLP_ENDPOINT=collector => http://localhost:4317
        GPUSPAN_DEVICES=cuda:0 => 'cuda:0'
        GPUSPAN_PROMETHEUS_ADDR=everywhere => 127.0.0.1:9464
        WORLD_SIZE=eight => whole number
        GPUSPAN_RUN_ID=../escape => without path separators";
    for case in cases.lines() {
        let (setting, hint) = case.trim().split_once(" => ").expect("a case");
        let (var, value) = setting.split_once('=').expect("a setting");
        let mut env = vec![(var, value)];
        if var.starts_with("OTEL_EXPORTER_OTLP_P") || var.ends_with("TIMEOUT") {
            env.push(("OTEL_TRACES_EXPORTER", "otlp"));
        }
        let text = error_text(&env);
        assert!(text.contains(var), "{var}: {text}");
        assert!(text.contains(value), "{var}: {text}");
        assert!(
            text.contains(hint),
            "{var}: expected a hint '{hint}' in: {text}"
        );
    }
}

#[test]
fn an_overflowing_interval_names_the_variable() {
    let text = error_text(&[("GPUSPAN_SAMPLE_INTERVAL", "99999999999999999999s")]);
    assert!(text.contains("GPUSPAN_SAMPLE_INTERVAL"), "{text}");
    assert!(text.contains("99999999999999999999s"), "{text}");
}

#[test]
fn a_grpc_endpoint_without_a_scheme_is_tls_unless_insecure() {
    let grpc = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4317"),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
    ];
    let settings = with_env(&grpc, || resolve(&CodeSettings::default())).unwrap();
    assert_eq!(otlp(&settings.traces).endpoint, "https://collector:4317");
    let insecure = [
        grpc[0],
        grpc[1],
        ("OTEL_EXPORTER_OTLP_METRICS_INSECURE", "true"),
    ];
    let settings = with_env(&insecure, || resolve(&CodeSettings::default())).unwrap();
    assert_eq!(otlp(&settings.traces).endpoint, "https://collector:4317");
    assert_eq!(otlp(&settings.metrics).endpoint, "http://collector:4317");
    // A scheme says it by itself, whatever the variable says (the specification's rule).
    for (url, insecure) in [
        ("https://collector:4317", "true"),
        ("http://collector:4317", "false"),
    ] {
        let env = [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", url),
            grpc[1],
            ("OTEL_EXPORTER_OTLP_INSECURE", insecure),
        ];
        let settings = with_env(&env, || resolve(&CodeSettings::default())).unwrap();
        assert_eq!(otlp(&settings.traces).endpoint, url);
    }
    let text = error_text(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4318")]);
    assert!(
        text.contains("OTEL_EXPORTER_OTLP_ENDPOINT") && text.contains("https://"),
        "{text}"
    );
}

#[test]
fn compression_is_resolved_per_signal_and_code_wins() {
    let env = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://env:4318"),
        ("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip"),
        ("OTEL_EXPORTER_OTLP_METRICS_COMPRESSION", "none"),
    ];
    let settings = with_env(&env, || resolve(&CodeSettings::default())).unwrap();
    assert_eq!(otlp(&settings.traces).compression, Compression::Gzip);
    assert_eq!(otlp(&settings.metrics).compression, Compression::None);
    let code = CodeSettings {
        compression: Some(Compression::None),
        ..CodeSettings::default()
    };
    let settings = with_env(&env, || resolve(&code)).unwrap();
    assert_eq!(otlp(&settings.traces).compression, Compression::None);
    let text = error_text(&[
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://env:4318"),
        ("OTEL_EXPORTER_OTLP_COMPRESSION", "zstd"),
    ]);
    assert!(text.contains("OTEL_EXPORTER_OTLP_COMPRESSION") && text.contains("gzip or none"));
}

#[test]
fn prometheus_addresses_default_to_loopback() {
    let settings = with_env(&[("GPUSPAN_PROMETHEUS_ADDR", "9464")], || {
        resolve(&CodeSettings::default())
    })
    .unwrap();
    assert_eq!(
        settings.prometheus_addr,
        Some("127.0.0.1:9464".parse().unwrap())
    );
    let settings = with_env(&[("GPUSPAN_PROMETHEUS_ADDR", "0.0.0.0:9000")], || {
        resolve(&CodeSettings::default())
    })
    .unwrap();
    assert_eq!(
        settings.prometheus_addr,
        Some("0.0.0.0:9000".parse().unwrap())
    );
}
