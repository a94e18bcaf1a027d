//! `gpuspan report --svg FILE --png FILE` draws a run as an SVG picture and a PNG rendered
//! without a browser, at the width asked for, with the device, the spike and the steps.

use gpuspan_test_support as support;

use std::process::Command;
use std::time::Duration;

use support::commands::succeeded;
use support::scripted::scripted;
use support::setup;

const MB: u64 = 1 << 20;

#[test]
fn svg_and_png_show_the_run() {
    let runs = tempfile::tempdir().unwrap();
    let (source, script) = scripted(1, 1000 * MB);
    let builder = gpuspan::Telemetry::builder()
        .run_dir(runs.path())
        .run_id("pictures")
        .summary(false)
        .memory_source(source)
        .sample_interval(Duration::from_millis(2));
    let (telemetry, ()) = setup::run(builder, |_| {
        let _epoch = gpuspan::epoch_span!(0);
        for step in 0..6u64 {
            let _step = gpuspan::step_span!(step);
            script.set(0, (1000 + if step == 3 { 3000 } else { 10 * step }) * MB);
            script.wait_reads(3);
            script.set(0, 1000 * MB);
            script.wait_reads(3);
        }
    });
    telemetry.shutdown().unwrap();
    let dir = runs.path().join("pictures");
    let svg = dir.join("run.svg");
    let png = dir.join("run.png");
    succeeded(
        Command::new(env!("CARGO_BIN_EXE_gpuspan"))
            .arg("report")
            .arg(&dir)
            .arg("--svg")
            .arg(&svg)
            .arg("--png")
            .arg(&png)
            .args(["--width", "900"]),
    );

    let svg = std::fs::read_to_string(&svg).unwrap();
    assert!(
        svg.starts_with("<svg") && svg.contains("width=\"900\""),
        "{}",
        &svg[..200]
    );
    assert!(svg.contains("gpu 0 · Scripted GPU"));
    assert!(svg.contains(">epoch 0<"), "the epoch bar is labelled");
    // The spike's 4000 MiB tops the lane: its axis has a tick at 4e9 bytes (3.7 GiB),
    // which the saw tooth alone (up to 1050 MiB) would not reach.
    assert!(svg.contains(">3.7 GiB<"), "axis labels");

    let png = std::fs::read(&png).unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    let width = u32::from_be_bytes(png[16..20].try_into().unwrap());
    let height = u32::from_be_bytes(png[20..24].try_into().unwrap());
    assert_eq!(width, 900);
    assert!(height > 200, "{height}");
    assert!(
        png.len() > 5_000,
        "a picture, not an empty image ({} bytes)",
        png.len()
    );
}
