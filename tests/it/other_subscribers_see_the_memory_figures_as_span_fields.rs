//! A macro span is a `tracing` span: a `fmt` layer next to gpuspan's prints its memory
//! figures as fields when it closes, the same figures the exported span carries.

use gpuspan_test_support as support;

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use support::fake_nvml::{FakeNvml, MIB};
use support::receiver::Receiver;
use support::sampling::wait_for_ticks;
use tracing_subscriber::fmt::format::FmtSpan;
use tracing_subscriber::layer::SubscriberExt;

/// What the `fmt` layer writes, kept for the test.
#[derive(Clone, Default)]
struct Lines(Arc<Mutex<Vec<u8>>>);

impl Write for Lines {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn a_fmt_layer_prints_the_step_figures_the_exporter_sends() {
    let fake = FakeNvml::build();
    fake.set_memory(0, 700 * MIB + 3, 80 * 1024 * MIB);
    let receiver = Receiver::start_grpc();
    let telemetry = support::setup::to_receiver(&receiver)
        .nvml_lib(fake.path())
        .sample_interval(Duration::from_millis(2))
        .build()
        .expect("gpuspan builds");
    let lines = Lines::default();
    let writer = lines.clone();
    let fmt = tracing_subscriber::fmt::layer()
        .with_ansi(false)
        .with_span_events(FmtSpan::CLOSE)
        .with_writer(move || writer.clone());
    let subscriber = tracing_subscriber::registry()
        .with(telemetry.layer())
        .with(fmt);
    tracing::subscriber::with_default(subscriber, || {
        let _s = gpuspan::step_span!(3_u64);
        wait_for_ticks(&fake, 1, 2);
        fake.set_memory(0, 900 * MIB + 5, 80 * 1024 * MIB);
        wait_for_ticks(&fake, 1, 2);
    });
    telemetry.shutdown().expect("clean shutdown");

    let text = String::from_utf8(lines.0.lock().unwrap().clone()).expect("utf-8");
    let close = text
        .lines()
        .find(|l| l.contains("close"))
        .unwrap_or_else(|| panic!("no close line in {text:?}"));
    let span = &receiver.spans_named("step")[0];
    for key in [
        "gpu.memory.start",
        "gpu.memory.end",
        "gpu.memory.peak",
        "gpu.memory.delta",
        "process.memory.peak",
    ] {
        let exported = span.int_attr(key).expect(key);
        assert!(
            close.contains(&format!("{key}={exported}")),
            "{key}={exported} not in the fmt line {close:?}"
        );
    }
    assert_eq!(
        span.int_attr("gpu.memory.start"),
        Some((700 * MIB + 3) as i64)
    );
    assert_eq!(
        span.int_attr("gpu.memory.end"),
        Some((900 * MIB + 5) as i64)
    );
    assert!(close.contains("ml.step=3"), "{close:?}");
    // On the exported span only: constant per run, kept off every printed line.
    assert_eq!(span.str_attr("gpu.memory.source"), Some("nvml"));
    assert!(span.int_attr("gpu.memory.samples").is_some_and(|n| n >= 2));
}
