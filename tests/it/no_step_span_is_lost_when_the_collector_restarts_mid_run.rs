//! A collector outage in the middle of a run loses nothing. The `train` example ships over
//! OTLP/gRPC to the collector built from the official Go modules (collector/otelcol.yaml),
//! which exports to Jaeger v2. Once Jaeger shows the first steps, the collector is stopped
//! (by its PID) for 2 s and started again on the same ports while training goes on. Jaeger
//! ends up with every epoch and step span, and the example exits without reporting a loss.

use gpuspan_test_support as support;

use std::fs::File;
use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

use support::example::Train;
use support::fake_nvml::FakeNvml;
use support::go_stack::BaseStack;

const EPOCHS: usize = 12;
const STEPS: usize = 100;
/// Each step's work; sized so that the run lasts well beyond the outage on a busy 2-core
/// machine (the test fails, saying so, if the run ends first).
const BATCH_SIZE: &str = "64";
const HIDDEN: &str = "256";
const OUTAGE: Duration = Duration::from_secs(2);
const SERVICE: &str = "train-through-an-outage";

/// The example process, killed by its PID if the test ends before it does.
struct Training(Child);

impl Training {
    fn exited(&mut self) -> Option<ExitStatus> {
        self.0.try_wait().expect("polling train")
    }

    fn wait(&mut self, timeout: Duration) -> ExitStatus {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.exited() {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "train did not finish within {timeout:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Training {
    fn drop(&mut self) {
        if self.exited().is_none() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

#[test]
fn every_epoch_and_step_reaches_jaeger_and_no_loss_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    // Tempo's stand-in is held to the end, so the collector's second backend stays up.
    let BaseStack {
        mut jaeger,
        tempo: _tempo,
        mut collector,
    } = BaseStack::start(dir.path());

    let fake = FakeNvml::build();
    let (stdout, stderr) = (dir.path().join("train.out"), dir.path().join("train.err"));
    let mut command = Train::new(EPOCHS, STEPS, dir.path())
        .args(&["--batch-size", BATCH_SIZE, "--hidden", HIDDEN])
        .otlp(&collector.otlp_endpoint("grpc"), "grpc")
        .named(SERVICE, "outage-run")
        .env("GPUSPAN_NVML_LIB", fake.path().to_str().unwrap())
        .command();
    command
        .stdout(File::create(&stdout).unwrap())
        .stderr(File::create(&stderr).unwrap());
    let started = Instant::now();
    let mut training = Training(command.spawn().expect("starting train"));

    // The run is shipping: the first batch of steps is in Jaeger.
    let first = jaeger.wait_for_spans(SERVICE, Duration::from_secs(60), |spans| {
        spans.iter().any(|s| s.operation == "step")
    });
    assert!(
        first.iter().any(|s| s.operation == "step"),
        "no step reached Jaeger before the outage; train's stderr:\n{}\ncollector:\n{}",
        std::fs::read_to_string(&stderr).unwrap_or_default(),
        collector.log_tail()
    );
    assert!(
        training.exited().is_none(),
        "train finished ({:?}) before the outage began: make the run longer",
        started.elapsed()
    );

    collector.stop();
    std::thread::sleep(OUTAGE);
    assert!(
        training.exited().is_none(),
        "train finished ({:?}) during the outage, so nothing was sent while the collector \
         was down: make the run longer",
        started.elapsed()
    );
    collector.restart();
    let restarted_at = started.elapsed();

    let status = training.wait(Duration::from_secs(300));
    let took = started.elapsed();
    let stderr = std::fs::read_to_string(&stderr).unwrap();

    let spans = jaeger.wait_for_spans(SERVICE, Duration::from_secs(60), |spans| {
        let training = spans
            .iter()
            .filter(|s| s.operation == "epoch" || s.operation == "step");
        training.count() >= EPOCHS + EPOCHS * STEPS
    });
    let steps = spans.iter().filter(|s| s.operation == "step").count();
    let epochs = spans.iter().filter(|s| s.operation == "epoch").count();
    assert_eq!(
        (epochs, steps),
        (EPOCHS, EPOCHS * STEPS),
        "(epoch, step) spans in Jaeger after a {OUTAGE:?} outage at {restarted_at:?} of a \
         {took:?} run; train's stderr:\n{stderr}"
    );
    assert!(
        status.success(),
        "train exited with {status} after the outage:\n{stderr}"
    );
    assert!(
        ["could not export", "not exported", "lost"]
            .iter()
            .all(|word| !stderr.contains(word)),
        "train reported a loss although every span arrived:\n{stderr}"
    );
}
