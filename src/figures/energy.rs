//! A closed span's energy, power and clocks ([`SpanEnergy`]), and the attributes they
//! become on the export thread, where the span's duration and batch size are known.

use std::time::Duration;

use opentelemetry::{Array, Key, KeyValue, StringValue, Value};

use crate::names::attribute as attr;

/// What the sampler's power reads added up to while a span was open. Read from the span's
/// watermark on the export thread; `None` is "not measured", never zero.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct SpanEnergy {
    /// Whether the source reads energy, power or clocks at all.
    pub read: bool,
    /// The energy counters' increase, summed over the devices in scope, in µJ; `None` when
    /// a counter went back (a driver reload) while the span was open, or none was read.
    pub counted_uj: Option<u64>,
    /// A counter went back or stopped answering while the span was open: no energy figure.
    pub reset: bool,
    /// The power readings taken while the span was open: their sum, in mW.
    pub power_sum_mw: Option<u64>,
    /// How many power readings were taken while the span was open.
    pub power_reads: u64,
    /// The latest power reading as the span closed, in mW.
    pub power_now_mw: Option<u64>,
    /// How many readings of the clock event reasons were taken while the span was open.
    pub clock_reads: u64,
    /// Of those readings, how many found the clocks held down.
    pub throttled_reads: u64,
    /// Bit `i`: the `i`th of `REASONS` was seen while the span was open.
    pub reasons: u32,
    /// The lowest SM clock read, in MHz.
    pub lowest_sm_mhz: Option<u64>,
    /// Per device, only with more than one device in scope: its counter's increase, in µJ.
    pub devices_uj: Vec<Option<u64>>,
}

/// Positions of the power figures: the sampler's running totals after the per-device memory
/// figures (`Shared::power_base`), and what a watermark adds up while its span is open.
pub(crate) mod slot {
    /// The energy counters' increase, summed over the devices, in µJ.
    pub(crate) const ENERGY: usize = 0;
    /// How often a counter went back or stopped answering.
    pub(crate) const RESETS: usize = 1;
    /// The power readings' sum, in mW, and their count.
    pub(crate) const POWER_SUM: usize = 2;
    pub(crate) const POWER_READS: usize = 3;
    /// The latest power reading, in mW.
    pub(crate) const POWER_NOW: usize = 4;
    /// Readings of the clock event reasons with the clocks held down.
    pub(crate) const THROTTLED: usize = 5;
    /// Readings with each of `REASONS`, in its order.
    pub(crate) const REASON0: usize = 6;
    /// The lowest SM clock, upside down ([`lowest_clock`]), so that the highest is the lowest.
    pub(crate) const SM_CLOCK_LOW: usize = REASON0 + super::REASONS.len();
    /// Readings of the clock event reasons (with or without a power reading).
    pub(crate) const CLOCK_READS: usize = SM_CLOCK_LOW + 1;
    /// Each device's counter increase, in µJ.
    pub(crate) const DEVICE_ENERGY0: usize = CLOCK_READS + 1;

    /// A lowest SM clock as [`SM_CLOCK_LOW`] holds it, upside down.
    pub(crate) fn upside_down(mhz: Option<u64>) -> crate::figures::Reading {
        mhz.map(|c| u64::MAX - 1 - c).into()
    }

    /// A lowest SM clock back from the figure that holds it upside down.
    pub(crate) fn lowest_clock(figure: crate::figures::Reading) -> Option<u64> {
        figure.get().map(|v| u64::MAX - 1 - v)
    }
}

/// The power figures of a closed span, on their way to the export thread: the span's
/// watermark, which the sampler added them to while the span was open. Empty where the
/// source reads no energy, power or clocks, and on the spans `gpuspan collect` enriches.
#[derive(Debug, Default)]
pub struct SpanPower(pub(crate) Option<std::sync::Arc<super::Watermark>>);

/// The clock event reasons that hold the clocks down, as `gpu.throttle.reasons` names them,
/// with NVML's bit for each (`nvmlClocksEventReason*`), in the sampler's order.
pub(crate) const REASONS: [(&str, u64); 6] = [
    ("sw_power_cap", 0x4),
    ("hw_slowdown", 0x8),
    ("sync_boost", 0x10),
    ("sw_thermal_slowdown", 0x20),
    ("hw_thermal_slowdown", 0x40),
    ("hw_power_brake", 0x80),
];

/// What the attributes are written with besides the figures.
#[derive(Debug, Clone, Copy)]
pub(crate) struct EnergyContext<'a> {
    /// The span's duration.
    pub(crate) duration: Duration,
    /// The span's `batch_size`, when it has one.
    pub(crate) batch_size: Option<i64>,
    /// The latest time between two moves of the counters: a shorter span's figure comes
    /// from the power readings.
    pub(crate) counter_period: Option<Duration>,
    /// `gpu.energy.scope`, when the figures cover more than the devices.
    pub(crate) scope: Option<&'static str>,
    /// `gpu.<i>.energy` of each device.
    pub(crate) device_keys: &'a [Key],
}

/// The share of a span's power readings with the clocks held down from which it gets one
/// `gpu.throttled` event, unless set otherwise.
pub(crate) const DEFAULT_THROTTLE_THRESHOLD: f64 = 0.5;

/// How long a counter is taken to need between two moves before it has been seen moving
/// twice: NVML's updates come every 20 to 100 ms. The sampler raises it to its own power
/// interval where that is longer, as a counter is never seen moving more often than read.
pub(crate) const ASSUMED_PERIOD: Duration = Duration::from_millis(100);

impl SpanEnergy {
    /// The span's energy in joules, and whether it was estimated from power readings.
    pub(crate) fn joules(&self, context: &EnergyContext<'_>) -> Option<(f64, bool)> {
        if !self.read || self.reset {
            return None;
        }
        let period = context.counter_period.unwrap_or(ASSUMED_PERIOD);
        if let Some(uj) = self.counted_uj.filter(|_| context.duration >= period) {
            return Some((uj as f64 / 1e6, false));
        }
        // The readings' mean while the span was open, else the one current as it closed.
        let mean_mw = match (self.power_sum_mw, self.power_reads) {
            (Some(sum), reads) if reads > 0 => sum as f64 / reads as f64,
            _ => self.power_now_mw? as f64,
        };
        Some((mean_mw / 1000.0 * context.duration.as_secs_f64(), true))
    }

    /// The share of the readings of the reasons taken while the span was open that were
    /// throttled.
    pub(crate) fn throttle_share(&self) -> Option<f64> {
        (self.clock_reads > 0).then(|| self.throttled_reads as f64 / self.clock_reads as f64)
    }

    /// The reasons seen, by name.
    pub(crate) fn reason_names(&self) -> impl Iterator<Item = &'static str> + '_ {
        REASONS
            .iter()
            .enumerate()
            .filter(|(i, _)| self.reasons & (1 << i) != 0)
            .map(|(_, (name, _))| *name)
    }

    /// The throttle attributes (`gpu.throttle.reasons`, `.share`, `gpu.clock.sm.min`),
    /// for the span and its `gpu.throttled` event alike.
    pub(crate) fn throttle_attributes(&self, out: &mut Vec<KeyValue>) {
        if self.reasons != 0 {
            let names: Vec<StringValue> = self.reason_names().map(StringValue::from).collect();
            out.push(KeyValue::new(
                attr::GPU_THROTTLE_REASONS,
                Value::Array(Array::String(names)),
            ));
        }
        if let Some(share) = self.throttle_share() {
            out.push(KeyValue::new(attr::GPU_THROTTLE_SHARE, share));
        }
        if let Some(mhz) = self.lowest_sm_mhz {
            out.push(KeyValue::new(attr::GPU_CLOCK_SM_MIN, super::int(mhz)));
        }
    }

    /// Writes the span's energy and throttle attributes to `out`.
    pub(crate) fn write(&self, context: &EnergyContext<'_>, out: &mut Vec<KeyValue>) {
        if !self.read {
            return;
        }
        if let Some((joules, estimated)) = self.joules(context) {
            out.push(KeyValue::new(attr::GPU_ENERGY, joules));
            if estimated {
                out.push(KeyValue::new(attr::GPU_ENERGY_ESTIMATED, true));
            }
            let seconds = context.duration.as_secs_f64();
            if seconds > 0.0 {
                out.push(KeyValue::new(attr::GPU_POWER_AVG, joules / seconds));
            }
            if let Some(batch) = context.batch_size.filter(|&b| b > 0) {
                out.push(KeyValue::new(
                    attr::GPU_ENERGY_PER_SAMPLE,
                    joules / batch as f64,
                ));
            }
            if let Some(scope) = context.scope {
                out.push(KeyValue::new(attr::GPU_ENERGY_SCOPE, scope));
            }
            // Per device only when the sum came from the counters too.
            if !estimated {
                for (key, uj) in context.device_keys.iter().zip(&self.devices_uj) {
                    if let Some(uj) = uj {
                        out.push(KeyValue::new(key.clone(), *uj as f64 / 1e6));
                    }
                }
            }
        }
        self.throttle_attributes(out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn context(duration: Duration) -> EnergyContext<'static> {
        EnergyContext {
            duration,
            batch_size: Some(8),
            counter_period: Some(Duration::from_millis(100)),
            scope: None,
            device_keys: &[],
        }
    }

    fn energy() -> SpanEnergy {
        SpanEnergy {
            read: true,
            counted_uj: Some(60_000_000),
            power_sum_mw: Some(900_000),
            power_reads: 3,
            power_now_mw: Some(300_000),
            ..SpanEnergy::default()
        }
    }

    #[test]
    fn a_span_of_a_counter_period_or_more_takes_the_counters_increase() {
        let (joules, estimated) = energy()
            .joules(&context(Duration::from_millis(200)))
            .unwrap();
        assert_eq!(joules, 60.0);
        assert!(!estimated);
    }

    #[test]
    fn a_shorter_span_takes_the_mean_power_times_its_duration() {
        let (joules, estimated) = energy()
            .joules(&context(Duration::from_millis(50)))
            .unwrap();
        assert!((joules - 15.0).abs() < 1e-9, "{joules}");
        assert!(estimated);
        let mut none_read = energy();
        none_read.power_reads = 0;
        let (joules, _) = none_read
            .joules(&context(Duration::from_millis(10)))
            .unwrap();
        assert!((joules - 3.0).abs() < 1e-9, "{joules}");
    }

    #[test]
    fn a_counter_that_went_back_gives_no_figure() {
        let mut reset = energy();
        reset.reset = true;
        reset.counted_uj = None;
        assert_eq!(reset.joules(&context(Duration::from_secs(1))), None);
        let mut out = Vec::new();
        reset.write(&context(Duration::from_secs(1)), &mut out);
        assert!(out.iter().all(|kv| kv.key.as_str() != attr::GPU_ENERGY));
    }

    #[test]
    fn power_and_energy_per_sample_follow_the_energy() {
        let mut out = Vec::new();
        energy().write(&context(Duration::from_millis(500)), &mut out);
        let get = |key: &str| {
            out.iter()
                .find(|kv| kv.key.as_str() == key)
                .map(|kv| kv.value.clone())
        };
        assert_eq!(get(attr::GPU_ENERGY), Some(Value::F64(60.0)));
        assert_eq!(get(attr::GPU_POWER_AVG), Some(Value::F64(120.0)));
        assert_eq!(get(attr::GPU_ENERGY_PER_SAMPLE), Some(Value::F64(7.5)));
        assert_eq!(get(attr::GPU_ENERGY_ESTIMATED), None);
    }
}
