// A test binary of its own: it expects one export thread in the process.
//! gpuspan's export threads run at a lower priority than the program (Linux `nice`, per
//! thread), so on busy cores the training thread is served first; the sampler keeps the
//! program's priority, since its schedule is what catches short spikes. This is what `top
//! -H` or `ps -L -o nice,comm` shows a user.

#![cfg(target_os = "linux")]

use gpuspan_test_support as support;

use support::receiver::{Protocol, Receiver};

/// The nice value in a `/proc/.../stat` line: field 19 of the line, the 17th after the
/// command name's closing parenthesis.
fn nice(stat: &str) -> i64 {
    let after = &stat[stat.rfind(')').expect("a stat line") + 2..];
    after
        .split(' ')
        .nth(16)
        .and_then(|n| n.parse().ok())
        .expect("a nice value")
}

/// The name and nice value of every thread of this process.
fn threads() -> Vec<(String, i64)> {
    let mut threads = Vec::new();
    for entry in std::fs::read_dir("/proc/self/task").expect("/proc/self/task") {
        let dir = entry.expect("a task").path();
        let (Ok(name), Ok(stat)) = (
            std::fs::read_to_string(dir.join("comm")),
            std::fs::read_to_string(dir.join("stat")),
        ) else {
            continue;
        };
        threads.push((name.trim().to_owned(), nice(&stat)));
    }
    threads
}

fn nice_of(threads: &[(String, i64)], name: &str) -> Vec<i64> {
    threads
        .iter()
        .filter(|(n, _)| n == name)
        .map(|(_, nice)| *nice)
        .collect()
}

#[test]
fn the_export_threads_are_nicer_than_the_program_and_the_sampler_is_not() {
    let receiver = Receiver::start(Protocol::Grpc);
    let telemetry = support::setup::to_receiver(&receiver)
        .build()
        .expect("gpuspan builds");
    // The export runtime's thread starts with the first export.
    {
        let subscriber = tracing_subscriber::layer::SubscriberExt::with(
            tracing_subscriber::registry(),
            telemetry.layer(),
        );
        tracing::subscriber::with_default(subscriber, || {
            let _s = gpuspan::step_span!(0);
        });
    }
    telemetry.flush().expect("flush");
    let threads = threads();
    let own = nice(&std::fs::read_to_string("/proc/thread-self/stat").expect("own stat"));
    let expected = (own + 10).min(19);
    let spans = nice_of(&threads, "gpuspan-spans");
    let export = nice_of(&threads, "gpuspan-export");
    let sampler = nice_of(&threads, "gpuspan-sampler");
    assert_eq!(spans, vec![expected], "threads: {threads:?}");
    assert!(
        !export.is_empty() && export.iter().all(|&n| n == expected),
        "threads: {threads:?}"
    );
    assert!(
        !sampler.is_empty() && sampler.iter().all(|&n| n == own),
        "the sampler keeps the program's priority; threads: {threads:?}"
    );
    telemetry.shutdown().expect("shutdown");
}
