//! Running a piece of training code under a gpuspan subscriber scoped to the test thread,
//! so tests in one binary do not share a global subscriber.

use std::path::Path;
use std::time::Duration;

use gpuspan::{Builder, ShutdownError, Telemetry};
use tracing_subscriber::layer::SubscriberExt;

use crate::receiver::{Protocol, Receiver};

/// Builds `builder`, runs `f` with its layer as this thread's subscriber, and returns the
/// telemetry (still running: shut it down to flush) with `f`'s result.
pub fn run<R>(builder: Builder, f: impl FnOnce(&Telemetry) -> R) -> (Telemetry, R) {
    let telemetry = builder.build().expect("gpuspan builds");
    let subscriber = tracing_subscriber::registry().with(telemetry.layer());
    let result = tracing::subscriber::with_default(subscriber, || f(&telemetry));
    (telemetry, result)
}

/// A builder that exports to `receiver` and nowhere else, with a fixed run id, and with no
/// GPU source unless the test gives one (`memory_source`, `nvml_lib` with the fake, or
/// `sysfs_root` with a written tree), so
/// tests read the same on a machine that has a GPU.
pub fn to_receiver(receiver: &Receiver) -> Builder {
    let protocol = match receiver.protocol() {
        Protocol::Grpc => gpuspan::Protocol::Grpc,
        Protocol::Http => gpuspan::Protocol::HttpProtobuf,
    };
    Telemetry::builder()
        .endpoint(receiver.endpoint())
        .protocol(protocol)
        .service_name("gpuspan-test")
        .run_id("test-run")
        .summary(false)
        .nvml_lib("/nonexistent/libnvidia-ml.so.1")
        .sysfs_root("/nonexistent/sys")
}

/// [`to_receiver`] reading a machine the test wrote under `root` (`root/sys` and
/// `root/proc`), every 2 ms.
pub fn on_written_machine(receiver: &Receiver, root: &Path) -> Builder {
    to_receiver(receiver)
        .sysfs_root(root.join("sys"))
        .procfs_root(root.join("proc"))
        .sample_interval(Duration::from_millis(2))
}

/// [`to_receiver`] reading the fake NVML library at `lib` every 2 ms.
pub fn on_fake_nvml(receiver: &Receiver, lib: &Path) -> Builder {
    to_receiver(receiver)
        .nvml_lib(lib)
        .sample_interval(Duration::from_millis(2))
}

/// Trains an epoch of `steps` steps under `builder` and shuts down: the spans delivered
/// and lost, and how shutdown went.
pub fn train_and_shut_down(
    builder: Builder,
    steps: u64,
) -> ((u64, u64), Result<(), ShutdownError>) {
    let (telemetry, ()) = run(builder, |_| {
        let _e = gpuspan::epoch_span!(0u32);
        for step in 0..steps {
            let _s = gpuspan::step_span!(step);
        }
    });
    let tally = telemetry.export_tally();
    let result = telemetry.shutdown();
    let spans = tally.spans();
    ((spans.delivered, spans.lost), result)
}
