//! Whether gpuspan's sampler kept its cadence while a test waited for it to read a machine
//! the test wrote: its reads are timed, so a test judges only what it read on time.

use std::time::Duration;

use gpuspan::Telemetry;

/// How long a test waits after writing a file before it counts on the sampler having read
/// it: several of the sampler's 20 ms power reads.
pub const SETTLE: Duration = Duration::from_millis(120);

/// Sleeps `time`, then says whether the sampler kept its cadence meanwhile (no gap of a
/// power read's worth beyond it): a run where it did not is too busy a machine to judge.
pub fn settle(telemetry: &Telemetry, time: Duration) -> bool {
    let before = telemetry.sampler_stats().expect("a sampler").max_gap;
    std::thread::sleep(time);
    let after = telemetry.sampler_stats().expect("a sampler").max_gap;
    after == before || after < time / 2
}
