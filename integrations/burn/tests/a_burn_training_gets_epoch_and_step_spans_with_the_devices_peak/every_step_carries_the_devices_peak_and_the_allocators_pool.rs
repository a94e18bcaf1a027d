//! Each epoch and iteration of a burn training is a span with the fake device's spike as its
//! peak, burn's own log is still written, and on a CubeCL backend each step carries the pool
//! its allocator reports.

use super::*;

#[test]
fn every_epoch_and_iteration_is_a_span_with_the_devices_peak_in_it_and_burns_log_is_kept() {
    let root = tempfile::tempdir().unwrap();
    let output = train("plain", root.path(), &[]);
    let spans = read_spans(&root.path().join("runs").join("plain"));

    let epochs = named(&spans, "epoch");
    let numbers: Vec<i64> = epochs.iter().map(|e| int(e, "ml.epoch").unwrap()).collect();
    assert_eq!(numbers, vec![1, 2, 3], "burn counts epochs from 1");

    let steps = named(&spans, "step");
    assert_eq!(steps.len(), EPOCHS * ITERATIONS as usize);
    for (n, step) in steps.iter().enumerate() {
        let n = n as u64;
        let (epoch, iteration) = (n / ITERATIONS + 1, n % ITERATIONS + 1);
        assert_eq!(epoch_of(&epochs, step), epoch as i64, "step {n}");
        assert_eq!(int(step, "ml.step"), Some(iteration as i64), "step {n}");
        assert_eq!(
            int(step, "gpu.memory.peak"),
            Some(spike("plain", n) as i64),
            "step {n}"
        );
        assert_eq!(int(step, "gpu.memory.start"), Some(BASE as i64), "step {n}");
        assert_eq!(int(step, "gpu.memory.end"), Some(BASE as i64), "step {n}");
        assert_eq!(
            int(step, "gpu.allocator.reserved.peak"),
            None,
            "burn's CPU backend reports no allocator: nothing is made up"
        );
    }
    for epoch in &epochs {
        let highest = spike(
            "plain",
            int(epoch, "ml.epoch").unwrap() as u64 * ITERATIONS - 1,
        );
        assert_eq!(int(epoch, "gpu.memory.peak"), Some(highest as i64));
    }

    let validations = named(&spans, "validation");
    assert_eq!(validations.len(), EPOCHS);
    for (i, validation) in validations.iter().enumerate() {
        assert_eq!(epoch_of(&epochs, validation), i as i64 + 1);
        assert_eq!(int(validation, "gpu.memory.peak"), Some(BASE as i64));
    }

    let log = std::fs::read_to_string(root.path().join("artifacts/experiment.log")).unwrap();
    assert_eq!(log.matches(": Iteration ").count(), steps.len(), "{log}");
    assert!(
        log.lines().any(|line| line.ends_with(
            " INFO burn_train::learner::supervised::strategies::single::epoch: Iteration 4"
        )),
        "burn's lines read as burn writes them:\n{log}"
    );
    assert!(
        log.contains("Executing validation step for epoch 3"),
        "{log}"
    );

    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(!stdout.contains("interrupted"), "{stdout}");
}

#[test]
fn on_a_cubecl_backend_each_step_carries_the_allocators_pool_at_its_edges() {
    let drivers = ["/usr/share/vulkan/icd.d", "/etc/vulkan/icd.d"];
    assert!(
        drivers
            .iter()
            .any(|dir| std::fs::read_dir(dir).is_ok_and(|mut d| d.next().is_some())),
        "burn's wgpu backend needs a Vulkan driver: Mesa's software one is Debian's \
         mesa-vulkan-drivers (what .ci/run installs)"
    );
    let root = tempfile::tempdir().unwrap();
    let output = train("wgpu", root.path(), &[]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    // (in use, reserved) as each train step started, read by the step itself.
    let pools: Vec<(i64, i64)> = stdout
        .lines()
        .filter_map(|line| line.strip_prefix("pool at step "))
        .map(|rest| {
            let figures: Vec<i64> = rest
                .split_whitespace()
                .skip(1)
                .map(|f| f.parse().unwrap())
                .collect();
            (figures[0], figures[1])
        })
        .collect();
    assert_eq!(pools.len(), EPOCHS * ITERATIONS as usize, "{stdout}");
    assert!(pools.iter().all(|&(_, reserved)| reserved > 0), "{pools:?}");

    let spans = read_spans(&root.path().join("runs").join("wgpu"));
    let steps = named(&spans, "step");
    assert_eq!(steps.len(), pools.len());
    for (n, step) in steps.iter().enumerate() {
        let allocated = int(step, "gpu.allocator.allocated.peak");
        let reserved = int(step, "gpu.allocator.reserved.peak");
        assert!(allocated.is_some() && reserved.is_some(), "step {n}");
        // Read at its start and at the next one's (within an epoch, where no other work
        // comes between). The pool only grows, so its reserved peak is exact. The device
        // runs behind the host and frees as it catches up, so the bytes in use read at a
        // span's edge are at least what the step read a moment later, and never above the
        // pool.
        if !(n as u64 + 1).is_multiple_of(ITERATIONS) {
            let (now, next) = (pools[n], pools[n + 1]);
            assert_eq!(reserved, Some(now.1.max(next.1)), "step {n}");
            let allocated = allocated.unwrap();
            assert!(
                allocated >= now.0.max(next.0) && allocated <= next.1,
                "step {n}: {allocated} in use against {now:?} and {next:?}"
            );
        }
    }
}
