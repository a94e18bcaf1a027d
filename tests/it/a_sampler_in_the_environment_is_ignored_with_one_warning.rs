//! gpuspan keeps every span it makes: the per-epoch summary, the leak rules, the batch-size
//! fit and the peaks need every step. A ratio or "off" sampler in `OTEL_TRACES_SAMPLER` is
//! ignored with one warning line that says so; `always_on` and `parentbased_always_on` are
//! taken without a word.

use gpuspan_test_support as support;

use support::example::run_train;
use support::receiver::Receiver;

/// Runs `train` (2 epochs of 5 steps) with `sampler` in the environment; returns its
/// standard error.
fn train_with(receiver: &Receiver, sampler: &[(&str, &str)]) -> String {
    let mut env = vec![
        ("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint()),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc".to_owned()),
        (
            "GPUSPAN_NVML_LIB",
            "/nonexistent/libnvidia-ml.so.1".to_owned(),
        ),
        ("PATH", "/nonexistent".to_owned()),
    ];
    env.extend(sampler.iter().map(|(k, v)| (*k, (*v).to_owned())));
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let out = run_train(&["--epochs", "2", "--steps", "5"], &env);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    stderr
}

fn sampler_warnings(stderr: &str) -> Vec<&str> {
    stderr
        .lines()
        .filter(|line| line.contains("OTEL_TRACES_SAMPLER"))
        .collect()
}

#[test]
fn a_ratio_of_zero_still_delivers_every_step_and_says_why_once() {
    for sampler in ["traceidratio", "parentbased_traceidratio", "always_off"] {
        let receiver = Receiver::start_grpc();
        let stderr = train_with(
            &receiver,
            &[
                ("OTEL_TRACES_SAMPLER", sampler),
                ("OTEL_TRACES_SAMPLER_ARG", "0.0"),
            ],
        );
        assert_eq!(
            receiver.spans_named("step").len(),
            10,
            "{sampler}: {stderr}"
        );
        assert_eq!(
            receiver.spans_named("epoch").len(),
            2,
            "{sampler}: {stderr}"
        );
        let warnings = sampler_warnings(&stderr);
        assert_eq!(warnings.len(), 1, "{sampler}: {stderr}");
        let warning = warnings[0];
        assert!(warning.starts_with("gpuspan: warning:"), "{warning}");
        assert!(warning.contains(sampler), "{warning}");
        assert!(warning.contains("ignore"), "{warning}");
        assert!(warning.contains("every step"), "{warning}");
    }
}

#[test]
fn always_on_samplers_are_taken_without_a_warning() {
    for sampler in ["always_on", "parentbased_always_on"] {
        let receiver = Receiver::start_grpc();
        let stderr = train_with(&receiver, &[("OTEL_TRACES_SAMPLER", sampler)]);
        assert_eq!(
            receiver.spans_named("step").len(),
            10,
            "{sampler}: {stderr}"
        );
        assert!(sampler_warnings(&stderr).is_empty(), "{sampler}: {stderr}");
    }
}
