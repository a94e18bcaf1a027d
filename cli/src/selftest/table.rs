//! The selftest's table: each device's row of what was allocated against what the spans
//! saw, the energy it drew meanwhile, and what the sampler paid.

use std::fmt::Write as _;

use gpuspan::runlog::{GpuId, Memory, SpanRecord};

use super::{util, Options, Outcome, Spans, Tested, GRANULARITY};

/// The device's start, peak and end on `span`: its own figures with several devices in
/// scope, the sum with one.
fn device_memory(span: &SpanRecord, id: GpuId, in_scope: usize) -> Option<Memory> {
    if in_scope == 1 {
        return span.gpu;
    }
    let device = span.devices.iter().find(|d| d.id == id)?;
    Some(Memory {
        start: device.start?,
        peak: device.peak?,
        end: device.end?,
    })
}

pub(super) fn mib(value: u64) -> String {
    util::mib(value as f64, 0)
}

/// One device's cells (context, allocated, held rise, spike rise, process rise) and what
/// failed.
struct Row {
    cells: [String; 5],
    failures: Vec<String>,
}

/// Checks one device's spans: the held allocation in the span's peak and in this process's
/// figures, the two-interval spike in its span's peak.
fn check(
    test: &Tested,
    held: Option<&SpanRecord>,
    spike: Option<&SpanRecord>,
    in_scope: usize,
) -> Row {
    let mut failures = Vec::new();
    let mut rise =
        |what: &str, span: Option<&SpanRecord>, allocation: &Result<u64, String>, process: bool| {
            let size = match allocation {
                Ok(size) => *size,
                Err(why) => {
                    failures.push(why.clone());
                    return "-".to_owned();
                }
            };
            let Some(span) = span else {
                failures.push(format!("the {what} span was not exported"));
                return "-".to_owned();
            };
            let memory = if process {
                span.process_gpu
            } else {
                device_memory(span, test.id, in_scope)
            };
            match saw(memory, size) {
                Some((rise, true)) => mib(rise),
                Some((rise, false)) => {
                    failures.push(format!("the {what} peak missed the allocation"));
                    mib(rise)
                }
                // A driver that lists no processes leaves the process figures out.
                None if process => "not listed".to_owned(),
                None => {
                    failures.push(format!("the {what} span has no device memory"));
                    "-".to_owned()
                }
            }
        };
    let held_rise = rise("held", held, &test.allocated, false);
    let spike_rise = rise("spike", spike, &test.spike, false);
    let process_rise = rise("process", held, &test.allocated, true);
    failures.dedup();
    Row {
        cells: [
            test.context.map_or("-".into(), mib),
            test.allocated.as_ref().map_or("-".into(), |&b| mib(b)),
            held_rise,
            spike_rise,
            process_rise,
        ],
        failures,
    }
}

/// Whether a rise from start to peak saw `allocated` bytes, to within the granularity.
fn saw(memory: Option<Memory>, allocated: u64) -> Option<(u64, bool)> {
    let memory = memory?;
    let rise = u64::try_from(memory.peak.saturating_sub(memory.start)).unwrap_or(0);
    Some((rise, rise + GRANULARITY >= allocated))
}

pub(super) fn report(
    tested: &[Tested],
    spans: &Spans,
    in_scope: usize,
    stats: Option<&gpuspan::stats::SamplerStats>,
    options: Options,
) -> Outcome {
    let mut table = String::new();
    let _ = writeln!(
        table,
        "gpuspan selftest: {} of {in_scope} device(s) reached through CUDA, {} allocated on \
         each, sampling every {:?}",
        tested.len(),
        mib(options.bytes),
        options.interval
    );
    let _ = writeln!(
        table,
        "{:>4}  {:<24} {:>9} {:>10} {:>10} {:>11} {:>13}  result",
        "gpu", "name", "context", "allocated", "held rise", "spike rise", "process rise"
    );
    let mut passed = !tested.is_empty();
    for (i, test) in tested.iter().enumerate() {
        let row = check(test, spans.held.get(i), spans.spikes.get(i), in_scope);
        let result = if row.failures.is_empty() {
            "ok".to_owned()
        } else {
            format!("FAILED: {}", row.failures.join("; "))
        };
        passed &= row.failures.is_empty();
        let [context, allocated, held, spike, process] = row.cells;
        let _ = writeln!(
            table,
            "{:>4}  {:<24} {context:>9} {allocated:>10} {held:>10} {spike:>11} {process:>13}  \
             {result}",
            test.id.to_string(),
            test.name
        );
    }
    if tested.is_empty() {
        let _ = writeln!(
            table,
            "FAILED: no device in gpuspan's scope is visible to CUDA (CUDA_VISIBLE_DEVICES)"
        );
    }
    for (i, test) in tested.iter().enumerate() {
        if let Some(span) = spans.held.get(i) {
            let _ = writeln!(table, "{}", energy_line(test.id, span, in_scope));
        }
    }
    if let Some(stats) = stats {
        let n = u32::try_from(in_scope.max(1)).unwrap_or(1);
        let scheduled = (stats.samples + stats.missed_ticks).max(1);
        let _ = write!(
            table,
            "NVML: a memory read takes {:.1?} a device",
            stats.memory_read / n
        );
        if let (Some(read), Some(every)) = (stats.process_read, stats.process_interval) {
            let _ = write!(
                table,
                ", a process list {:.1?} a device (lists every {every:.0?})",
                read / n
            );
        }
        let _ = writeln!(
            table,
            "; the sampler kept {:.1} % of its ticks, longest gap {:.1?}",
            100.0 * stats.samples as f64 / scheduled as f64,
            stats.max_gap
        );
    }
    Outcome { table, passed }
}

/// What was drawn while the device's allocation was held, as the span reports it: the
/// device's own figure where the span has one (several devices, each counter read), else
/// the span's, over every device in scope. Reported, not checked: an energy counter moves
/// in steps of 20 to 100 ms, and nothing here knows what the boards drew.
fn energy_line(id: GpuId, span: &SpanRecord, in_scope: usize) -> String {
    let energy = &span.energy;
    let own = energy
        .devices
        .iter()
        .find(|(device, _)| *device == id)
        .map(|(_, joules)| *joules);
    let (who, joules) = match own {
        Some(joules) => (format!("gpu {id}"), Some(joules)),
        None if in_scope > 1 => (format!("the {in_scope} devices in scope"), energy.joules),
        None => (format!("gpu {id}"), energy.joules),
    };
    let seconds = span.seconds();
    match joules {
        Some(joules) => {
            let how = if energy.estimated {
                "estimated from power readings"
            } else {
                "the driver's energy counter"
            };
            let watts = if seconds > 0.0 { joules / seconds } else { 0.0 };
            format!(
                "energy: while gpu {id}'s allocation was held ({seconds:.2} s), {who} drew \
                 {joules:.1} J, {watts:.0} W on average ({how})"
            )
        }
        None => format!(
            "energy: while gpu {id}'s allocation was held, none was read (the driver gives \
             no energy counter or power reading)"
        ),
    }
}
