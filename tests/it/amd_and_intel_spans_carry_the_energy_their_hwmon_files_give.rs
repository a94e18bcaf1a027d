//! AMD and Intel GPUs give spans their energy through the card's hwmon files, as NVIDIA's
//! give theirs through NVML: an Intel span carries exactly what `energy1_input` moved by, an
//! AMD span the integral of `power1_average` over it (estimated, and saying so), a span
//! open across a counter that went back no energy at all, and an APU's spans say that their
//! figure includes the CPU. The machine is a tree written by the test, whose files change
//! while the steps run.

use gpuspan_test_support as support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use support::cadence::{settle, SETTLE};
use support::receiver::{ReceivedSpan, Receiver};
use support::sampling::step_span;
use support::setup;

/// A machine with one GPU whose hwmon directory the test writes.
struct Machine {
    root: tempfile::TempDir,
}

impl Machine {
    /// An Intel GPU on xe, with the card's energy counter.
    fn xe(energy_uj: u64) -> Self {
        let machine = Self::with_card("DRIVER=xe\nPCI_ID=8086:E20B\nPCI_SLOT_NAME=0000:03:00.0\n");
        let tile = machine.device().join("tile0");
        std::fs::create_dir_all(&tile).unwrap();
        std::fs::write(tile.join("physical_vram_size_bytes"), "12884901888\n").unwrap();
        std::fs::write(machine.hwmon().join("name"), "xe\n").unwrap();
        std::fs::write(machine.hwmon().join("energy1_label"), "card\n").unwrap();
        std::fs::write(machine.hwmon().join("power1_max"), "200000000\n").unwrap();
        machine.set("energy1_input", energy_uj);
        machine
    }

    /// An AMD GPU whose hwmon gives its power only; `apu`: the driver shows the north
    /// bridge's rail, as it does on APUs alone.
    fn amdgpu(power_uw: u64, apu: bool) -> Self {
        let machine =
            Self::with_card("DRIVER=amdgpu\nPCI_ID=1002:15BF\nPCI_SLOT_NAME=0000:c4:00.0\n");
        let device = machine.device();
        std::fs::write(device.join("mem_info_vram_used"), "402653184\n").unwrap();
        std::fs::write(device.join("mem_info_vram_total"), "536870912\n").unwrap();
        let hwmon = machine.hwmon();
        std::fs::write(hwmon.join("name"), "amdgpu\n").unwrap();
        std::fs::write(hwmon.join("in0_label"), "vddgfx\n").unwrap();
        std::fs::write(hwmon.join("in0_input"), "1011\n").unwrap();
        if apu {
            std::fs::write(hwmon.join("in1_label"), "vddnb\n").unwrap();
            std::fs::write(hwmon.join("in1_input"), "892\n").unwrap();
        }
        machine.set("power1_average", power_uw);
        machine
    }

    fn with_card(uevent: &str) -> Self {
        let machine = Self {
            root: tempfile::tempdir().expect("temporary directory"),
        };
        std::fs::create_dir_all(machine.hwmon()).unwrap();
        std::fs::write(machine.device().join("uevent"), uevent).unwrap();
        let fdinfo = machine
            .root
            .path()
            .join(format!("proc/{}/fdinfo", std::process::id()));
        std::fs::create_dir_all(fdinfo).unwrap();
        machine
    }

    fn sysfs(&self) -> PathBuf {
        self.root.path().join("sys")
    }

    fn device(&self) -> PathBuf {
        self.sysfs().join("class/drm/card0/device")
    }

    fn hwmon(&self) -> PathBuf {
        self.device().join("hwmon/hwmon3")
    }

    /// Writes one of the hwmon files as the kernel would show it next.
    fn set(&self, file: &str, value: u64) {
        replace(&self.hwmon().join(file), &format!("{value}\n"));
    }

    fn builder(&self, receiver: &Receiver) -> gpuspan::Builder {
        setup::on_written_machine(receiver, self.root.path())
    }
}

/// Writes aside and renames, so a read never sees half a file.
fn replace(path: &Path, text: &str) {
    let aside = path.with_extension("new");
    std::fs::write(&aside, text).unwrap();
    std::fs::rename(&aside, path).unwrap();
}

/// Asserts that a span has no energy figure, nor a power figure made of it.
fn assert_no_energy(span: &ReceivedSpan, why: &str) {
    assert_eq!(span.double_attr("gpu.energy"), None, "{why}");
    assert_eq!(span.double_attr("gpu.power.avg"), None, "{why}");
}

fn duration(span: &ReceivedSpan) -> Duration {
    Duration::from_nanos(span.end_time_unix_nano - span.start_time_unix_nano)
}

/// Asserts that the sampler kept its cadence through enough of the steps (`judged`) to
/// judge them.
fn assert_enough_judged<T: std::fmt::Debug>(judged: &[T]) {
    assert!(
        judged.len() >= 2,
        "the sampler fell behind in most runs: too busy a machine to judge ({judged:?})"
    );
}

#[test]
fn an_intel_span_carries_exactly_what_energy1_input_moved_by() {
    const START: u64 = 7_400_000_017;
    let machine = Machine::xe(START);
    let receiver = Receiver::start_grpc();
    // Per step, what the counter moves by, in two writes while the step is open.
    let moves: [(u64, u64); 3] = [(3_141_593, 2_718_282), (41_000_001, 9), (1, 250_000_000)];
    let (telemetry, judged) = setup::run(machine.builder(&receiver), |telemetry| {
        assert_eq!(telemetry.memory_source(), Some("drm-fdinfo"));
        let mut counter = START;
        let mut judged = Vec::new();
        let mut on_time = settle(telemetry, SETTLE);
        for (n, (first, second)) in moves.iter().enumerate() {
            let span = gpuspan::step_span!(n, batch_size = 16);
            on_time &= settle(telemetry, Duration::from_millis(40));
            counter += first;
            machine.set("energy1_input", counter);
            on_time &= settle(telemetry, Duration::from_millis(60));
            counter += second;
            machine.set("energy1_input", counter);
            on_time &= settle(telemetry, SETTLE);
            drop(span);
            if on_time {
                judged.push((n as i64, first + second));
            }
            on_time = true;
        }
        judged
    });
    telemetry.shutdown().expect("clean shutdown");

    assert_enough_judged(&judged);
    let steps = receiver.spans_named("step");
    assert_eq!(steps.len(), moves.len());
    for (n, microjoules) in judged {
        let span = step_span(&steps, n);
        let joules = microjoules as f64 / 1e6;
        assert_eq!(span.double_attr("gpu.energy"), Some(joules), "step {n}");
        assert_eq!(span.bool_attr("gpu.energy.estimated"), None, "step {n}");
        assert_eq!(span.str_attr("gpu.energy.scope"), None, "step {n}");
        let seconds = duration(span).as_secs_f64();
        assert_eq!(span.double_attr("gpu.power.avg"), Some(joules / seconds));
        assert_eq!(
            span.double_attr("gpu.energy.per_sample"),
            Some(joules / 16.0)
        );
    }
}

#[test]
fn a_counter_that_went_back_gives_the_span_open_across_it_no_energy() {
    let machine = Machine::xe(90_000_000);
    let receiver = Receiver::start_grpc();
    let (telemetry, on_time) = setup::run(machine.builder(&receiver), |telemetry| {
        let mut on_time = settle(telemetry, SETTLE);
        {
            let _step = gpuspan::step_span!(0);
            machine.set("energy1_input", 95_000_000);
            on_time &= settle(telemetry, SETTLE);
            // The driver reloaded: the counter starts again near zero.
            machine.set("energy1_input", 1_500);
            on_time &= settle(telemetry, SETTLE);
            machine.set("energy1_input", 2_000_000);
            on_time &= settle(telemetry, SETTLE);
        }
        // The next span, after the reset, has its figure again.
        let _step = gpuspan::step_span!(1);
        machine.set("energy1_input", 2_500_000);
        on_time &= settle(telemetry, SETTLE);
        machine.set("energy1_input", 4_000_000);
        on_time &= settle(telemetry, SETTLE);
        on_time
    });
    telemetry.shutdown().expect("clean shutdown");

    let steps = receiver.spans_named("step");
    let across = step_span(&steps, 0);
    assert_no_energy(across, "never zero, never negative");
    assert_eq!(across.double_attr("gpu.energy.per_sample"), None);
    if on_time {
        assert_eq!(step_span(&steps, 1).double_attr("gpu.energy"), Some(2.0));
    } else {
        eprintln!("the sampler fell behind: the step after the reset is not judged");
    }
}

#[test]
fn an_amd_span_takes_the_integral_of_power1_average_within_5_percent_and_says_so() {
    let machine = Machine::amdgpu(180_000_000, false);
    let receiver = Receiver::start_http();
    // Per step, the power in its first and second half, in W.
    let profile: [(u64, u64); 3] = [(180, 180), (120, 150), (300, 260)];
    let (telemetry, judged) = setup::run(machine.builder(&receiver), |telemetry| {
        assert_eq!(telemetry.memory_source(), Some("amdgpu-sysfs"));
        let mut judged = Vec::new();
        for (n, (first, second)) in profile.iter().enumerate() {
            machine.set("power1_average", first * 1_000_000);
            let mut on_time = settle(telemetry, SETTLE);
            let span = gpuspan::step_span!(n);
            let opened = Instant::now();
            on_time &= settle(telemetry, Duration::from_millis(200));
            machine.set("power1_average", second * 1_000_000);
            let changed = Instant::now();
            on_time &= settle(telemetry, Duration::from_millis(200));
            let closed = Instant::now();
            drop(span);
            let scripted = *first as f64 * (changed - opened).as_secs_f64()
                + *second as f64 * (closed - changed).as_secs_f64();
            if on_time {
                judged.push((n as i64, scripted));
            }
        }
        judged
    });
    telemetry.shutdown().expect("clean shutdown");

    assert_enough_judged(&judged);
    let steps = receiver.spans_named("step");
    for (n, scripted) in judged {
        let span = step_span(&steps, n);
        let energy = span.double_attr("gpu.energy").expect("an estimate");
        assert_eq!(span.bool_attr("gpu.energy.estimated"), Some(true));
        assert_eq!(span.str_attr("gpu.energy.scope"), None, "a discrete GPU");
        assert!(
            (energy - scripted).abs() <= 0.05 * scripted,
            "step {n}: {energy} J against the scripted {scripted} J"
        );
    }
}

#[test]
fn an_apu_s_spans_say_their_energy_includes_the_cpu() {
    let machine = Machine::amdgpu(28_000_000, true);
    let receiver = Receiver::start_grpc();
    let (telemetry, ()) = setup::run(machine.builder(&receiver), |telemetry| {
        settle(telemetry, SETTLE);
        let _step = gpuspan::step_span!(0);
        settle(telemetry, SETTLE);
    });
    telemetry.shutdown().expect("clean shutdown");

    let steps = receiver.spans_named("step");
    let span = step_span(&steps, 0);
    assert_eq!(span.str_attr("gpu.energy.scope"), Some("socket"));
    assert_eq!(span.bool_attr("gpu.energy.estimated"), Some(true));
    let energy = span.double_attr("gpu.energy").expect("an estimate");
    let scripted = 28.0 * duration(span).as_secs_f64();
    assert!(
        (energy - scripted).abs() <= 0.05 * scripted,
        "{energy} J against the scripted {scripted} J"
    );
}

#[test]
fn a_span_shorter_than_the_power_interval_gets_no_energy_rather_than_zero() {
    let machine = Machine::xe(1_000_000);
    let receiver = Receiver::start_grpc();
    // Read at the start, then not again for a minute.
    let builder = machine
        .builder(&receiver)
        .power_interval(Duration::from_secs(60));
    let (telemetry, ()) = setup::run(builder, |telemetry| {
        settle(telemetry, SETTLE);
        let _step = gpuspan::step_span!(0);
        machine.set("energy1_input", 5_000_000);
        settle(telemetry, Duration::from_millis(300));
    });
    telemetry.shutdown().expect("clean shutdown");

    let steps = receiver.spans_named("step");
    assert_no_energy(
        step_span(&steps, 0),
        "the counter was not read while the step ran: its energy is unknown, not zero",
    );
}
