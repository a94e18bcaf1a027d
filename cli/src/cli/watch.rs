//! `gpuspan watch`: every device's memory on one line, live, through the SDK's own sampler.

use std::time::Duration;

use super::CommandError;

/// Prints a line of every device's memory each `every`, `count` times or until interrupted.
pub(super) fn watch(every: Duration, count: Option<u64>) -> Result<(), CommandError> {
    let telemetry = gpuspan::Telemetry::builder()
        .traces_exporter(gpuspan::settings::Exporter::None)
        .metrics_exporter(gpuspan::settings::Exporter::None)
        .summary(false)
        .build()?;
    if telemetry.devices().is_empty() {
        return Err(CommandError::NoGpu);
    }
    let mut lines = 0;
    while count.is_none_or(|c| lines < c) {
        let _interval = gpuspan::memory_span!("watch");
        std::thread::sleep(every);
        let cells: Vec<String> = telemetry
            .devices()
            .iter()
            .map(|d| {
                let used = d.used.map_or("-".into(), |b| crate::util::mib(b as f64, 0));
                let total = d
                    .total
                    .map_or("-".into(), |b| crate::util::mib(b as f64, 0));
                format!("gpu {}: {used} / {total}", d.device.id())
            })
            .collect();
        println!("{}", cells.join("   "));
        lines += 1;
    }
    Ok(telemetry.shutdown()?)
}
