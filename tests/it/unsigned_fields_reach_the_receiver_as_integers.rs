//! A `u64`, `usize` or `u128` field that fits in an i64 is exported as an OTel integer, on
//! gpuspan's spans and on any other span through its layer, given at creation or recorded
//! later; every other field keeps the value it had. tracing-opentelemetry alone would send
//! such a number as its Debug string, which backends cannot sum and the batch-size fit
//! cannot read.

use gpuspan_test_support as support;

use opentelemetry_proto::tonic::common::v1::any_value::Value;
use support::receiver::{AttrValue, Receiver};

/// Every value the span called `name` carries for `key`, from the raw requests, so a key
/// sent twice shows twice.
fn raw_values(receiver: &Receiver, name: &str, key: &str) -> Vec<Option<Value>> {
    let mut values = Vec::new();
    for request in receiver.raw_trace_requests() {
        for resource in &request.resource_spans {
            for scope in &resource.scope_spans {
                for span in scope.spans.iter().filter(|s| s.name == name) {
                    values.extend(
                        span.attributes
                            .iter()
                            .filter(|kv| kv.key == key)
                            .map(|kv| kv.value.as_ref().and_then(|v| v.value.clone())),
                    );
                }
            }
        }
    }
    values
}

#[test]
fn unsigned_numbers_that_fit_are_integers_and_the_rest_is_unchanged() {
    let receiver = Receiver::start_grpc();
    let builder = support::setup::to_receiver(&receiver);
    let (telemetry, ()) = support::setup::run(builder, |_| {
        let batch: u64 = 64;
        let samples: usize = 640;
        {
            let _s = gpuspan::step_span!(0, batch_size = batch, samples = samples);
        }
        {
            let _s = gpuspan::step_span!(1, batch_size = samples / 10);
        }
        // Any span through the layer, with every kind of value beside the unsigned ones.
        let error = std::io::Error::other("disk full");
        let load = tracing::info_span!(
            "load",
            files = 3usize,
            bytes = 1u128 << 40,
            huge = u64::MAX,
            signed = -5i64,
            ratio = 0.5,
            ok = true,
            name = "shard-7",
            shown = %"as display",
            debugged = ?vec![1, 2],
            otel.name = "load-renamed",
            later = tracing::field::Empty,
            later_huge = tracing::field::Empty,
        );
        load.record("later", 7u64);
        load.record("later_huge", u64::MAX);
        drop(load);
        // A field of the error kind keeps tracing-opentelemetry's treatment of errors.
        let failed = tracing::info_span!(
            "failed",
            count = 2u64,
            error = &error as &(dyn std::error::Error + 'static)
        );
        drop(failed);
    });
    telemetry.shutdown().expect("delivered");

    for (step, batch) in [(0, 64), (1, 64)] {
        let spans = receiver.spans_named("step");
        let span = spans
            .iter()
            .find(|s| s.int_attr("ml.step") == Some(step))
            .expect("step span");
        assert_eq!(
            span.attributes["batch_size"],
            AttrValue::Int(batch),
            "step {step}"
        );
    }
    assert_eq!(
        raw_values(&receiver, "step", "batch_size"),
        vec![Some(Value::IntValue(64)); 2],
        "batch_size sent once per step, as an integer"
    );
    assert_eq!(
        raw_values(&receiver, "step", "samples"),
        vec![Some(Value::IntValue(640))]
    );

    let load = &receiver.spans_named("load-renamed")[0];
    let a = &load.attributes;
    assert_eq!(a["files"], AttrValue::Int(3));
    assert_eq!(a["bytes"], AttrValue::Int(1 << 40));
    assert_eq!(
        a["huge"],
        AttrValue::Str(u64::MAX.to_string()),
        "too big for an i64"
    );
    assert_eq!(a["signed"], AttrValue::Int(-5));
    assert_eq!(a["ratio"], AttrValue::Double(0.5));
    assert_eq!(a["ok"], AttrValue::Bool(true));
    assert_eq!(a["name"], AttrValue::Str("shard-7".into()));
    assert_eq!(a["shown"], AttrValue::Str("as display".into()));
    assert_eq!(a["debugged"], AttrValue::Str("[1, 2]".into()));
    assert_eq!(a["later"], AttrValue::Int(7));
    assert_eq!(a["later_huge"], AttrValue::Str(u64::MAX.to_string()));
    assert!(!a.contains_key("otel.name"));
    for key in ["files", "bytes", "later", "name"] {
        assert_eq!(
            raw_values(&receiver, "load-renamed", key).len(),
            1,
            "{key} sent twice"
        );
    }

    let failed = &receiver.spans_named("failed")[0];
    assert_eq!(
        failed.attributes["error"],
        AttrValue::Str("disk full".into())
    );
    assert!(failed.attributes.contains_key("exception.message"));
}
