//! Synchronising with gpuspan's sampler through the fake NVML library, and picking apart
//! what it exported.
//!
//! The sampler reads every device in scope once per tick, in order, with
//! `nvmlDeviceGetMemoryInfo_v2`, and publishes the tick's figures before it starts the next
//! one. The fake counts those calls, so a test can wait for readings instead of sleeping.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use gpuspan::{Builder, Telemetry};
use tracing_subscriber::layer::SubscriberExt;

use crate::fake_nvml::FakeNvml;
use crate::receiver::{ReceivedPoint, ReceivedSpan};

/// The NVML function the sampler calls once per device per tick.
pub const MEMORY_INFO: &str = "nvmlDeviceGetMemoryInfo_v2";

/// How long a wait for the sampler may take before the test fails: far more than any
/// loaded machine needs for a few millisecond-interval ticks.
pub const PATIENCE: Duration = Duration::from_secs(30);

/// Waits until the sampler, reading `devices` devices per tick, has completed and published
/// `ticks` readings of every device that all began after this call.
///
/// Call counts after the current one all start after it (the fake counts under the lock it
/// reads under). Within the next `devices` calls a tick begins; `ticks` whole ticks later,
/// one more call proves the last of them was published, since a tick publishes before the
/// next one reads.
pub fn wait_for_ticks(fake: &FakeNvml, devices: u64, ticks: u64) {
    assert!(
        devices > 0,
        "the sampler reads no device: nothing to wait for"
    );
    let target = fake.call_count(MEMORY_INFO) + (ticks + 1) * devices;
    let deadline = Instant::now() + PATIENCE;
    loop {
        let calls = fake.call_count(MEMORY_INFO);
        if calls >= target {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the sampler stopped reading the fake NVML library ({calls} of {target} calls)"
        );
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// Waits until `telemetry`'s sampler, listing `devices` devices' processes, has listed every
/// device `lists` more times after this call, then for the ticks that publish the last
/// list. Process lists run on a cadence of their own: at every tick while the driver
/// answers at once, a few times a second when a list costs what a real driver's does.
pub fn wait_for_lists(telemetry: &Telemetry, fake: &FakeNvml, devices: u64, lists: u64) {
    let taken = || telemetry.sampler_stats().map_or(0, |s| s.process_lists);
    // The list under way may have begun before this call.
    let target = taken() + (lists + 1) * devices;
    let deadline = Instant::now() + PATIENCE;
    while taken() < target {
        assert!(
            Instant::now() < deadline,
            "the sampler stopped listing processes ({} of {target} lists)",
            taken()
        );
        std::thread::sleep(Duration::from_micros(500));
    }
    wait_for_ticks(fake, devices, 1);
}

/// Runs `f` with `telemetry`'s layer as this thread's subscriber, as `setup::run` does for a
/// builder, for telemetry that had to be built elsewhere (inside an environment override).
pub fn run_built<R>(telemetry: Telemetry, f: impl FnOnce(&Telemetry) -> R) -> (Telemetry, R) {
    let subscriber = tracing_subscriber::registry().with(telemetry.layer());
    let result = tracing::subscriber::with_default(subscriber, || f(&telemetry));
    (telemetry, result)
}

/// Builds `builder` and runs `f` under it; see `setup::run`.
pub fn run<R>(builder: Builder, f: impl FnOnce(&Telemetry) -> R) -> (Telemetry, R) {
    run_built(builder.build().expect("gpuspan builds"), f)
}

/// The points of one device (by `hw.id`), oldest collection first.
pub fn device_points<'a>(points: &'a [ReceivedPoint], uuid: &str) -> Vec<&'a ReceivedPoint> {
    let mut mine: Vec<&ReceivedPoint> = points
        .iter()
        .filter(|p| p.str_attr("hw.id") == Some(uuid))
        .collect();
    mine.sort_by_key(|p| p.time_unix_nano);
    mine
}

/// The point of one device (by `hw.id`) from the latest collection of its metric, if that
/// collection had one for it.
pub fn latest_device_point<'a>(
    points: &'a [ReceivedPoint],
    uuid: &str,
) -> Option<&'a ReceivedPoint> {
    let latest = points.iter().map(|p| p.time_unix_nano).max()?;
    points
        .iter()
        .find(|p| p.time_unix_nano == latest && p.str_attr("hw.id") == Some(uuid))
}

/// The `hw.id`s with a point in the latest collection of a metric.
pub fn latest_device_ids(points: &[ReceivedPoint]) -> BTreeSet<String> {
    let Some(latest) = points.iter().map(|p| p.time_unix_nano).max() else {
        return BTreeSet::new();
    };
    points
        .iter()
        .filter(|p| p.time_unix_nano == latest)
        .filter_map(|p| p.str_attr("hw.id").map(str::to_owned))
        .collect()
}

/// The NVML indexes `i` of a span's `gpu.<i>.*` attributes.
pub fn per_device_indexes(span: &ReceivedSpan) -> BTreeSet<u32> {
    span.attributes
        .keys()
        .filter_map(|key| key.strip_prefix("gpu.")?.split('.').next()?.parse().ok())
        .collect()
}

/// The span of step `n` among `steps`; fails when that step was not exported.
pub fn step_span(steps: &[ReceivedSpan], n: i64) -> &ReceivedSpan {
    steps
        .iter()
        .find(|s| s.int_attr("ml.step") == Some(n))
        .unwrap_or_else(|| panic!("step {n} is not among the exported steps"))
}

/// `start`, `end` and `peak` of a `<prefix>.start/end/peak` attribute triple, where all three
/// are integers.
pub fn triple(span: &ReceivedSpan, prefix: &str) -> Option<(u64, u64, u64)> {
    let get = |what: &str| {
        span.int_attr(&format!("{prefix}.{what}"))
            .map(|v| u64::try_from(v).expect("a byte count is not negative"))
    };
    Some((get("start")?, get("end")?, get("peak")?))
}
