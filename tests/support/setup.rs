//! Running a piece of training code under a gpuspan subscriber scoped to the test thread,
//! so tests in one binary do not share a global subscriber.

use gpuspan::{Builder, Telemetry};
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
