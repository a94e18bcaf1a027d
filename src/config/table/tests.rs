//! The table's rows: defaults that read as their values and the per-signal precedence.
//! What holds across every row of the whole table is tested in `telemetry::settings`.

use super::*;

/// The default text people read names the value code falls back to.
fn says_its_default<T: PartialEq + std::fmt::Debug>(row: &Defaulted<T>) {
    let text = row.setting.default;
    assert_eq!(
        row.read(text).ok(),
        Some((row.value)()),
        "{}: the default text {text:?} is not the default value",
        row.setting.name
    );
}

#[test]
fn every_default_text_reads_as_the_default_value() {
    says_its_default(&DISABLED);
    says_its_default(&INSECURE);
    says_its_default(&SAMPLE_INTERVAL);
    says_its_default(&PROTOCOL);
    says_its_default(&TIMEOUT);
    says_its_default(&COMPRESSION);
    says_its_default(&RUN_DIR);
    says_its_default(&METRIC_EXPORT_INTERVAL);
    says_its_default(&EXPORT_QUEUE);
    says_its_default(&SUMMARY);
    says_its_default(&FLUSH_ON_SIGNAL);
}

#[test]
fn a_signal_reads_its_own_variable_before_the_one_for_every_signal() {
    let vars = ENDPOINT.setting.vars;
    assert_eq!(
        vars.precedence(Some(Signal::Metrics)),
        [
            OTEL_EXPORTER_OTLP_METRICS_ENDPOINT,
            OTEL_EXPORTER_OTLP_ENDPOINT
        ]
    );
    assert_eq!(
        vars.precedence(Some(Signal::Traces)),
        [
            OTEL_EXPORTER_OTLP_TRACES_ENDPOINT,
            OTEL_EXPORTER_OTLP_ENDPOINT
        ]
    );
}
