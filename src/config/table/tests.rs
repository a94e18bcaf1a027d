//! The table's rows: every variable in one row, defaults that read as their values, the
//! per-signal precedence and one grammar per kind of value.

use super::*;

/// Read, but not settings: the sampler is ignored with a warning (see `Sampling`).
const NOT_SETTINGS: &[&str] = &[OTEL_TRACES_SAMPLER, OTEL_TRACES_SAMPLER_ARG];

#[test]
fn every_gpuspan_and_otel_variable_read_is_in_one_row() {
    let in_rows: Vec<&str> = crate::telemetry::settings()
        .flat_map(|s| s.vars.names())
        .collect();
    for var in ALL
        .iter()
        .filter(|v| v.starts_with("GPUSPAN_") || v.starts_with("OTEL_"))
        .filter(|v| !NOT_SETTINGS.contains(v))
    {
        let rows = in_rows.iter().filter(|v| *v == var).count();
        assert_eq!(rows, 1, "{var} is in {rows} rows of the settings table");
    }
    for var in &in_rows {
        assert!(ALL.contains(var), "{var} is not in config::vars");
    }
}

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

/// Python's `init()` docstring and the guide show each row's doc: one line, a sentence.
#[test]
fn every_row_says_what_it_does_in_one_line() {
    for setting in crate::telemetry::settings() {
        let doc = setting.doc;
        assert!(
            !doc.is_empty() && !doc.contains('\n') && doc.ends_with('.') && doc.len() <= 100,
            "{}: the doc {doc:?} is not one line of at most 100 characters ending in a period",
            setting.name
        );
    }
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

#[test]
fn a_switch_takes_the_same_words_in_every_row() {
    let rows = crate::telemetry::settings()
        .filter(|s| s.expected == BOOLEAN)
        .count();
    assert!(rows >= 6, "{rows} switches");
    for (text, value) in [("on", true), ("TRUE", true), ("no", false), (" 0 ", false)] {
        assert_eq!(boolean(text), Ok(value), "{text}");
    }
    let error = DISABLED.read("maybe").unwrap_err().to_string();
    assert!(
        error.contains("\"maybe\"") && error.contains("on or off"),
        "{error}"
    );
}
