//! The same macros measure steps of an async training loop on a tokio runtime.

use gpuspan_test_support as support;

use std::time::Duration;

use support::receiver::Receiver;
use support::scripted::scripted;
use support::setup;
use tracing_subscriber::layer::SubscriberExt;

const MB: u64 = 1 << 20;

/// Waits for two more readings without blocking the runtime.
async fn sampled(script: &support::scripted::Script) {
    let target = script.reads() + 2;
    while script.reads() < target {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

async fn train(script: &support::scripted::Script) {
    for epoch in 0..2u32 {
        let _e = gpuspan::epoch_span!(epoch);
        for step in 0..3u32 {
            let _s = gpuspan::step_span!(step);
            script.set(0, (200 + u64::from(step)) * MB);
            sampled(script).await;
            script.set(0, 100 * MB);
            sampled(script).await;
        }
    }
}

#[test]
fn steps_of_an_async_loop_get_their_peaks() {
    let receiver = Receiver::start_http();
    let (source, script) = scripted(1, 100 * MB);
    let telemetry = setup::to_receiver(&receiver)
        .memory_source(source)
        .sample_interval(Duration::from_millis(2))
        .build()
        .unwrap();
    let subscriber = tracing_subscriber::registry().with(telemetry.layer());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    tracing::subscriber::with_default(subscriber, || runtime.block_on(train(&script)));
    // Shutting down from inside a runtime must work too.
    runtime.block_on(async { telemetry.shutdown().unwrap() });

    let epochs = receiver.spans_named("epoch");
    let steps = receiver.spans_named("step");
    assert_eq!(epochs.len(), 2);
    assert_eq!(steps.len(), 6);
    for step in &steps {
        let n = step.int_attr("ml.step").unwrap() as u64;
        assert_eq!(
            step.int_attr("gpu.memory.peak"),
            Some(((200 + n) * MB) as i64)
        );
        assert!(epochs.iter().any(|e| step.is_child_of(e)));
    }
}
