//! Energy read back from either representation of a span.

use opentelemetry::{Array, KeyValue, StringValue, Value};
use opentelemetry_proto::tonic::common::v1::{
    any_value, AnyValue, ArrayValue, KeyValue as ProtoKeyValue,
};
use opentelemetry_sdk::trace::SpanEvents;

use crate::names::{attribute as attr, clock_event};
use crate::record::{EnergyFigures, GpuId, SpanRecord};

/// The energy a span carries reads the same from the exporter's span (the summary
/// printed at shutdown) and from the run directory's OTLP/JSON (`gpuspan report`).
#[test]
fn energy_and_throttling_read_alike_from_the_exporter_and_the_run_directory() {
    let attributes = vec![
        KeyValue::new(attr::ML_STEP, 11_i64),
        KeyValue::new(attr::GPU_ENERGY, 56.5),
        KeyValue::new(attr::GPU_ENERGY_ESTIMATED, true),
        KeyValue::new(attr::GPU_POWER_AVG, 282.5),
        KeyValue::new(attr::GPU_ENERGY_PER_SAMPLE, 7.0625),
        KeyValue::new("gpu.1.energy", 20.0),
        KeyValue::new("gpu.0.energy", 36.5),
        KeyValue::new(
            attr::GPU_THROTTLE_REASONS,
            Value::Array(Array::String(vec![
                StringValue::from("sw_power_cap"),
                StringValue::from("hw_slowdown"),
            ])),
        ),
        KeyValue::new(attr::GPU_THROTTLE_SHARE, 1.0),
        KeyValue::new(attr::GPU_CLOCK_SM_MIN, 1210_i64),
    ];
    let mut events = SpanEvents::default();
    events.events.push(opentelemetry::trace::Event::new(
        clock_event::THROTTLED,
        std::time::SystemTime::UNIX_EPOCH,
        Vec::new(),
        0,
    ));
    let mut data = crate::figures::tests::span("step", attributes.clone());
    data.events = events;
    let exported = SpanRecord::from_span_data(&data);
    let expected = EnergyFigures {
        joules: Some(56.5),
        estimated: true,
        power_watts: Some(282.5),
        per_sample: Some(7.0625),
        scope: None,
        devices: vec![(GpuId::gpu(0), 36.5), (GpuId::gpu(1), 20.0)],
        throttle_reasons: vec!["sw_power_cap".into(), "hw_slowdown".into()],
        throttle_share: Some(1.0),
        sm_clock_min_mhz: Some(1210),
        throttled: true,
    };
    assert_eq!(exported.energy, expected);

    let proto = |value: &Value| {
        let value = match value {
            Value::I64(v) => any_value::Value::IntValue(*v),
            Value::F64(v) => any_value::Value::DoubleValue(*v),
            Value::Bool(v) => any_value::Value::BoolValue(*v),
            Value::Array(Array::String(items)) => any_value::Value::ArrayValue(ArrayValue {
                values: items
                    .iter()
                    .map(|s| AnyValue {
                        value: Some(any_value::Value::StringValue(s.to_string())),
                    })
                    .collect(),
            }),
            other => any_value::Value::StringValue(other.to_string()),
        };
        Some(AnyValue { value: Some(value) })
    };
    let span = opentelemetry_proto::tonic::trace::v1::Span {
        name: "step".into(),
        attributes: attributes
            .iter()
            .map(|kv| ProtoKeyValue {
                key: kv.key.to_string(),
                value: proto(&kv.value),
                ..Default::default()
            })
            .collect(),
        events: vec![opentelemetry_proto::tonic::trace::v1::span::Event {
            name: clock_event::THROTTLED.into(),
            ..Default::default()
        }],
        ..Default::default()
    };
    assert_eq!(SpanRecord::from_otlp(&span).energy, expected);
    // A span with none of them has no figure, and is not throttled.
    let bare = opentelemetry_proto::tonic::trace::v1::Span {
        name: "step".into(),
        ..Default::default()
    };
    assert_eq!(
        SpanRecord::from_otlp(&bare).energy,
        EnergyFigures::default()
    );
}

/// A span read one attribute at a time (`SpanReader`, as `gpuspan diff` decodes a traces
/// file) is the record `SpanRecord::from_otlp` makes of the same span: the first of a
/// repeated key counts, per-device figures and energy land, other keys are passed over.
#[test]
fn a_span_read_attribute_by_attribute_is_the_record_from_otlp_makes() {
    let int = |key: &str, v: i64| (key.to_owned(), any_value::Value::IntValue(v));
    let text = |key: &str, v: &str| (key.to_owned(), any_value::Value::StringValue(v.into()));
    let float = |key: &str, v: f64| (key.to_owned(), any_value::Value::DoubleValue(v));
    let attributes = vec![
        int(attr::ML_STEP, 7),
        int(attr::GPU_MEMORY_START, 10),
        int(attr::GPU_MEMORY_PEAK, 30),
        int(attr::GPU_MEMORY_PEAK, 99),
        int(attr::GPU_MEMORY_END, 20),
        int("gpu.1.memory.peak", 12),
        text(attr::GPU_MEMORY_SOURCE, "nvml"),
        text(attr::BATCH_SIZE, "64"),
        float(attr::GPU_ENERGY, 56.5),
        text("code.function.name", "train"),
    ];
    let span = opentelemetry_proto::tonic::trace::v1::Span {
        trace_id: vec![0xab; 16],
        span_id: vec![2; 8],
        parent_span_id: vec![1; 8],
        name: "step".to_owned(),
        start_time_unix_nano: 1_000,
        end_time_unix_nano: 2_000,
        attributes: attributes
            .iter()
            .map(|(key, value)| ProtoKeyValue {
                key: key.clone(),
                value: Some(AnyValue {
                    value: Some(value.clone()),
                }),
                ..ProtoKeyValue::default()
            })
            .collect(),
        ..Default::default()
    };
    let mut reader = super::SpanReader::default();
    for (key, value) in &attributes {
        match value {
            any_value::Value::IntValue(v) => reader.int(key, *v),
            any_value::Value::StringValue(s) => reader.text(key, s),
            any_value::Value::DoubleValue(v) => reader.float(key, *v),
            _ => unreachable!(),
        }
    }
    let read = reader.finish(
        "step".to_owned(),
        ([0xab; 16], [2; 8], Some([1; 8])),
        (1_000, 2_000),
        None,
    );
    let expected = SpanRecord::from_otlp(&span);
    assert_eq!(format!("{read:?}"), format!("{expected:?}"));
    assert_eq!(read.gpu.map(|m| m.peak), Some(30));
    assert_eq!(read.batch_size, Some(64));
    assert_eq!(read.devices[0].id, GpuId::gpu(1));
}

/// Figures no device reads (a share above 1, a negative power, NaN joules) are no figure.
#[test]
fn a_throttle_share_outside_zero_to_one_and_a_negative_power_are_read_as_no_figure() {
    let read = |attributes: &[(&str, f64)]| {
        let mut reader = super::SpanReader::default();
        for (key, value) in attributes {
            reader.float(key, *value);
        }
        reader
            .finish("step".into(), ([0; 16], [0; 8], None), (0, 1), None)
            .energy
    };
    let energy = read(&[
        (attr::GPU_THROTTLE_SHARE, 1.5),
        (attr::GPU_POWER_AVG, -3.0),
        (attr::GPU_ENERGY, f64::NAN),
        ("gpu.1.energy", f64::INFINITY),
    ]);
    assert_eq!(energy, EnergyFigures::default());
    let energy = read(&[(attr::GPU_THROTTLE_SHARE, 0.25), (attr::GPU_ENERGY, 1e300)]);
    assert_eq!(
        (energy.throttle_share, energy.joules),
        (Some(0.25), Some(1e300))
    );
}
