//! With TensorBoard on, the run directory gets an event file that the real `tensorboard`
//! package reads, holding each step's and each epoch's start, peak and end (summed, per
//! device, and host memory), equal to the spans' attributes as 32-bit floats.

use gpuspan_test_support as support;

use std::time::Duration;

use gpuspan::runlog::{Role, SpanRecord};
use gpuspan_cli::report::Run;
use support::pictures;
use support::scripted::scripted;
use support::setup;

const MB: u64 = 1 << 20;

/// Every scalar a span should give: `(tag, value)`.
fn expected(prefix: &str, span: &SpanRecord) -> Vec<(String, i64)> {
    let mut out = Vec::new();
    for (name, memory) in [("gpu.memory", span.gpu), ("process.memory", span.host)] {
        let m = memory.expect("memory figures");
        for (figure, value) in [("start", m.start), ("peak", m.peak), ("end", m.end)] {
            out.push((format!("{prefix}/{name}.{figure}"), value));
        }
    }
    for device in &span.devices {
        for (figure, value) in [
            ("start", device.start),
            ("peak", device.peak),
            ("end", device.end),
        ] {
            out.push((
                format!("{prefix}/gpu.{}.memory.{figure}", device.id),
                value.unwrap(),
            ));
        }
    }
    out
}

#[test]
fn tensorboard_reads_each_scalar_as_the_spans_recorded_it() {
    pictures::tools();
    let runs = tempfile::tempdir().unwrap();
    let (source, script) = scripted(2, 1000 * MB);
    let builder = gpuspan::Telemetry::builder()
        .run_dir(runs.path())
        .run_id("tb")
        .summary(false)
        .tensorboard(true)
        .memory_source(source)
        .sample_interval(Duration::from_millis(2));
    let (telemetry, ()) = setup::run(builder, |_| {
        for epoch in 0..3u64 {
            let _epoch = gpuspan::epoch_span!(epoch);
            for step in 0..4u64 {
                let _step = gpuspan::step_span!(step);
                script.set(0, (1000 + 100 * epoch + 7 * step) * MB + 3);
                script.set(1, (2000 + 10 * step) * MB + 1);
                script.wait_reads(2);
                script.set(0, (1000 + 100 * epoch) * MB);
                script.wait_reads(2);
            }
        }
    });
    telemetry.shutdown().expect("clean shutdown");
    let dir = runs.path().join("tb");
    let events: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("events.out.tfevents.")
        })
        .collect();
    assert_eq!(events.len(), 1, "one event file in {}", dir.display());

    let read = pictures::python("read_tfevents.py", &[&dir]);
    let scalars = read.as_object().expect("tags");
    let run = Run::read(&dir).unwrap();
    let mut wanted = Vec::new();
    let mut steps = 0;
    for span in &run.spans {
        match span.role {
            Role::Step(_) => {
                wanted.extend(
                    expected("step", span)
                        .into_iter()
                        .map(|(t, v)| (t, steps, v, span)),
                );
                steps += 1;
            }
            Role::Epoch(e) => wanted.extend(
                expected("epoch", span)
                    .into_iter()
                    .map(|(t, v)| (t, e, v, span)),
            ),
            _ => {}
        }
    }
    assert_eq!(steps, 12);
    // 12 steps and 3 epochs, each with 3 figures of the sum, 2 devices and host memory.
    assert_eq!(wanted.len(), 15 * 12);
    for (tag, step, value, span) in &wanted {
        let points = scalars[tag.as_str()]
            .as_array()
            .unwrap_or_else(|| panic!("no tag {tag}"));
        let point = points
            .iter()
            .find(|p| p[0].as_i64() == Some(*step))
            .unwrap_or_else(|| panic!("{tag} has no step {step}: {points:?}"));
        assert_eq!(
            point[1].as_f64().unwrap(),
            f64::from(*value as f32),
            "{tag} at {step}"
        );
        // TensorBoard keeps the wall time to the microsecond.
        let wall = point[2].as_f64().unwrap();
        assert!(
            (wall - span.end_unix_nanos as f64 / 1e9).abs() < 2e-6,
            "{tag} wall time {wall}"
        );
    }
    let tags: usize = scalars.values().map(|v| v.as_array().unwrap().len()).sum();
    assert_eq!(tags, wanted.len(), "no scalar beyond the spans'");
    // The spike of the last step of epoch 2 on device 0, as TensorBoard shows it.
    let peak = &scalars["step/gpu.0.memory.peak"].as_array().unwrap()[11];
    assert_eq!(
        peak[1].as_f64().unwrap(),
        f64::from(((1200 + 21) * MB + 3) as f32)
    );
}
