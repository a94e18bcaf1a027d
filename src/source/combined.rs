//! Two sources read as one, on a machine with GPUs of two kinds (NVIDIA's through NVML,
//! AMD's or Intel's through the kernel's files): every device once, in one tick.

use std::time::Duration;

use super::{Device, DeviceReading, DriverPeak, MemorySource, PowerReading, ProcessLister};

/// `first`'s devices, then `second`'s.
pub(crate) struct Combined {
    first: Box<dyn MemorySource>,
    second: Box<dyn MemorySource>,
    devices: Vec<Device>,
    name: String,
}

impl Combined {
    pub(crate) fn new(first: Box<dyn MemorySource>, second: Box<dyn MemorySource>) -> Self {
        let devices = first
            .devices()
            .iter()
            .chain(second.devices())
            .cloned()
            .collect();
        let name = format!("{}+{}", first.name(), second.name());
        Self {
            first,
            second,
            devices,
            name,
        }
    }

    fn split(&self) -> usize {
        self.first.devices().len()
    }
}

impl MemorySource for Combined {
    fn name(&self) -> &str {
        &self.name
    }

    fn devices(&self) -> &[Device] {
        &self.devices
    }

    fn read(&mut self, out: &mut [DeviceReading]) {
        let split = self.split().min(out.len());
        let (first, second) = out.split_at_mut(split);
        self.first.read(first);
        self.second.read(second);
    }

    fn read_power(&mut self, out: &mut [PowerReading]) {
        let split = self.split().min(out.len());
        let (first, second) = out.split_at_mut(split);
        self.first.read_power(first);
        self.second.read_power(second);
    }

    fn energy_scope(&self) -> Option<&'static str> {
        // An APU's socket figure holds more than a MIG instance's GPU figure: say the wider.
        match (self.first.energy_scope(), self.second.energy_scope()) {
            (Some("socket"), _) | (_, Some("socket")) => Some("socket"),
            (first, second) => first.or(second),
        }
    }

    fn min_interval(&self) -> Option<Duration> {
        self.first.min_interval().max(self.second.min_interval())
    }

    /// The first source's lister for its devices; the second's devices get their process
    /// figure from its own reads (the lister answers nothing for them).
    fn process_lister(&mut self) -> Option<Box<dyn ProcessLister>> {
        let inner = self.first.process_lister()?;
        Some(Box::new(FirstOnly {
            inner,
            len: self.split(),
        }))
    }

    fn take_utilization_time(&mut self) -> Option<Duration> {
        match (
            self.first.take_utilization_time(),
            self.second.take_utilization_time(),
        ) {
            (None, None) => None,
            (a, b) => Some(a.unwrap_or_default() + b.unwrap_or_default()),
        }
    }
}

/// A lister over the first `len` devices only.
struct FirstOnly {
    inner: Box<dyn ProcessLister>,
    len: usize,
}

impl ProcessLister for FirstOnly {
    fn list(&mut self, position: usize) -> Option<u64> {
        (position < self.len)
            .then(|| self.inner.list(position))
            .flatten()
    }

    fn driver_peak(&mut self, position: usize) -> DriverPeak {
        if position < self.len {
            self.inner.driver_peak(position)
        } else {
            DriverPeak::Unsupported
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A source of one device whose energy covers `scope`.
    struct Covering(Option<&'static str>, Vec<Device>);

    impl MemorySource for Covering {
        fn name(&self) -> &str {
            "covering"
        }

        fn devices(&self) -> &[Device] {
            &self.1
        }

        fn read(&mut self, _out: &mut [DeviceReading]) {}

        fn read_power(&mut self, out: &mut [PowerReading]) {
            for reading in out {
                reading.power_mw = Some(1000);
            }
        }

        fn energy_scope(&self) -> Option<&'static str> {
            self.0
        }
    }

    fn covering(scope: Option<&'static str>) -> Box<dyn MemorySource> {
        let device = Device {
            index: 0,
            mig: None,
            uuid: "GPU-0".into(),
            name: "test".into(),
            vendor: "test".into(),
        };
        Box::new(Covering(scope, vec![device]))
    }

    #[test]
    fn the_wider_scope_of_the_two_sources_is_said() {
        let scope = |a, b| Combined::new(covering(a), covering(b)).energy_scope();
        assert_eq!(scope(Some("gpu"), Some("socket")), Some("socket"));
        assert_eq!(scope(Some("socket"), Some("gpu")), Some("socket"));
        assert_eq!(scope(None, Some("gpu")), Some("gpu"));
        assert_eq!(scope(None, None), None);
    }

    #[test]
    fn both_sources_read_their_power_through_their_boxes() {
        let mut combined = Combined::new(covering(None), covering(None));
        let mut out = vec![PowerReading::default(); 2];
        combined.read_power(&mut out);
        assert_eq!(out[0].power_mw, Some(1000));
        assert_eq!(out[1].power_mw, Some(1000));
    }
}
