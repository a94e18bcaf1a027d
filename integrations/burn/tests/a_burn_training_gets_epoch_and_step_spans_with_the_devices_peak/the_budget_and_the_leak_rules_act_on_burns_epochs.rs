//! The diagnosis on burn's own loop: a reading over the budget stops training through burn's
//! interrupter at the end of that step, and the leak rules and the summary read burn's epochs.

use super::*;

#[test]
fn a_reading_over_the_budget_stops_burns_training_at_the_end_of_that_step() {
    let root = tempfile::tempdir().unwrap();
    let output = train(
        "budget",
        root.path(),
        &[
            ("GPUSPAN_MEMORY_BUDGET", BUDGET),
            ("GPUSPAN_MEMORY_BUDGET_STOP", "true"),
        ],
    );
    let reason = "gpuspan: gpu 0 reached 4.9 GiB, over the memory budget of 4.0 GiB \
                  (GPUSPAN_MEMORY_BUDGET_STOP)";
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains(&format!("interrupted: {reason}")),
        "burn's result says why:\n{stdout}"
    );

    let spans = read_spans(&root.path().join("runs").join("budget"));
    let epochs = named(&spans, "epoch");
    assert_eq!(epochs.len(), 2);
    let steps = named(&spans, "step");
    let last = OVER_BUDGET_STEP as usize;
    assert_eq!(
        steps.len(),
        last + 1,
        "training ends with the step over the budget"
    );
    let over = steps[last];
    assert_eq!(
        (epoch_of(&epochs, over), int(over, "ml.step")),
        (2, Some(2))
    );
    assert_eq!(int(over, "gpu.memory.peak"), Some((5000 * MIB) as i64));
    let event = "gpu.memory.budget_exceeded";
    assert_eq!(
        event_int(over, event, "gpu.memory.peak"),
        Some((5000 * MIB) as i64)
    );
    assert_eq!(event_int(over, event, "gpu.memory.budget"), Some(4 << 30));
    for step in &steps[..last] {
        assert!(step.events.iter().all(|e| e.name != event));
    }
    assert_eq!(
        named(&spans, "validation").len(),
        1,
        "epoch 2 is not validated"
    );

    let log = std::fs::read_to_string(root.path().join("artifacts/experiment.log")).unwrap();
    assert!(
        log.contains(&format!("Training interrupted: {reason}")),
        "burn's log says why:\n{log}"
    );
}

#[test]
fn the_leak_rules_and_the_summary_read_burns_epochs() {
    let root = tempfile::tempdir().unwrap();
    let output = train("leak", root.path(), &[("GPUSPAN_LEAK_WARMUP", "0")]);
    let spans = read_spans(&root.path().join("runs").join("leak"));
    let epochs = named(&spans, "epoch");
    let ends: Vec<Option<i64>> = epochs.iter().map(|e| int(e, "gpu.memory.end")).collect();
    let mib = |m: u64| Some((m * MIB) as i64);
    assert_eq!(ends, vec![mib(1000), mib(1600), mib(2200)]);
    let leaks: Vec<i64> = epochs
        .iter()
        .filter(|e| {
            e.events
                .iter()
                .any(|ev| ev.name == "gpu.memory.leak_suspected")
        })
        .map(|e| int(e, "ml.epoch").unwrap())
        .collect();
    assert_eq!(
        leaks,
        vec![2],
        "1600 MiB is 1.6 times the first epoch's end"
    );

    let summary = String::from_utf8_lossy(&output.stderr);
    let rows: Vec<&str> = summary
        .lines()
        .filter(|line| line.trim_start().starts_with(['1', '2', '3']))
        .collect();
    assert_eq!(rows.len(), 3, "one summary row per burn epoch:\n{summary}");
    assert!(rows
        .iter()
        .all(|row| row.split_whitespace().nth(1) == Some("4")));
    assert!(rows[1].contains("leak? ratio"), "{summary}");
}
