//! `gpuspan diff BASE NEW` on two runs written to the byte: equal runs pass with exit 0; a
//! forward pass that peaks 5 % higher fails a 2 % limit with exit 1 and the row marked, and
//! passes a limit of exactly 5 %; limits by figure gate each figure on its own, the batch
//! fit's bytes per sample and the allocator's split among them.

use std::path::Path;
use std::process::Command;

use gpuspan_test_support::commands::outcome;
use gpuspan_test_support::traces::{Mem, Trace, GIB, MIB};

/// Two epochs of three steps: step `k` (0 to 5, across the epochs) starts at 2 GiB + k MiB
/// and ends 1 MiB higher, peaking at 3 GiB; its forward pass peaks at `forward_peak`.
fn run(dir: &Path, forward_peak: i64) {
    let mut trace = Trace::new();
    for epoch in 0..2 {
        let steps: Vec<(i64, Mem)> = (0..3)
            .map(|step| {
                let k = epoch * 3 + step;
                let mem = Mem {
                    start: 2 * GIB + k * MIB,
                    peak: 3 * GIB,
                    end: 2 * GIB + (k + 1) * MIB,
                };
                (step, mem)
            })
            .collect();
        trace.epoch(epoch, &steps, |_, step| {
            Some(Mem {
                start: step.start,
                peak: forward_peak,
                end: step.start + 512 * MIB,
            })
        });
    }
    trace.write_run(dir);
}

fn diff(args: &[&str]) -> (i32, String, String) {
    outcome(
        Command::new(env!("CARGO_BIN_EXE_gpuspan"))
            .arg("diff")
            .args(args),
    )
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// The lines that open what `gpuspan diff` prints for [`pair`]'s runs, then a blank line.
fn named(base: &str, new: &str) -> String {
    let base = format!("base: {base} (14 spans with memory figures)\n");
    base + &format!("new:  {new} (14 spans with memory figures)\n\n")
}

/// The base and new runs in a temporary directory; `grown` is the new run's forward peak.
fn pair(grown: i64) -> (tempfile::TempDir, String, String) {
    let root = tempfile::tempdir().unwrap();
    let (base, new) = (root.path().join("base"), root.path().join("new"));
    run(&base, 5 * GIB / 2);
    run(&new, grown);
    let (base, new) = (path(&base).to_owned(), path(&new).to_owned());
    (root, base, new)
}

#[test]
fn equal_runs_pass_with_every_change_zero() {
    let (_root, base, new) = pair(5 * GIB / 2);
    let (code, stdout, stderr) = diff(&[&base, &new, "--max-increase", "5%"]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    let expected = named(&base, &new)
        + "phase    device  compared  figure     base      new  change  limit
step     all            6  peak    3.0 GiB  3.0 GiB     0 B  5%: ok
step     all            6  growth  6.0 MiB  6.0 MiB     0 B
forward  all            6  peak    2.5 GiB  2.5 GiB     0 B  5%: ok
forward  all            6  growth  517 MiB  517 MiB     0 B
epoch    all            2  peak    3.0 GiB  3.0 GiB     0 B  5%: ok
epoch    all            2  growth  6.0 MiB  6.0 MiB     0 B

worst step in base: epoch 0 step 0, 3.0 GiB (trace 000000000000000000000000d1ff0000)
worst step in new: epoch 0 step 0, 3.0 GiB (trace 000000000000000000000000d1ff0000)
within the limits
";
    assert_eq!(stdout, expected);
    assert_eq!(stderr, "");
}

#[test]
fn a_forward_pass_5_percent_higher_fails_a_2_percent_limit_and_passes_5() {
    // 2.5 GiB + 5 % = 2.625 GiB: 128 MiB more.
    let (_root, base, new) = pair(5 * GIB / 2 + 128 * MIB);
    let expected = named(&base, &new)
        + "phase    device  compared  figure     base      new             change  limit
step     all            6  peak    3.0 GiB  3.0 GiB                0 B  2%: ok
step     all            6  growth  6.0 MiB  6.0 MiB                0 B
forward  all            6  peak    2.5 GiB  2.6 GiB  +128 MiB (+5.0 %)  2%: past
forward  all            6  growth  517 MiB  517 MiB                0 B
epoch    all            2  peak    3.0 GiB  3.0 GiB                0 B  2%: ok
epoch    all            2  growth  6.0 MiB  6.0 MiB                0 B

worst step in base: epoch 0 step 0, 3.0 GiB (trace 000000000000000000000000d1ff0000)
worst step in new: epoch 0 step 0, 3.0 GiB (trace 000000000000000000000000d1ff0000)
past the limit: forward peak +128 MiB (+5.0 %) (limit 2%)
1 figure past the limit
";
    let (code, stdout, stderr) = diff(&[&base, &new, "--max-increase", "2%"]);
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert_eq!(stdout, expected);

    // Exactly 5 % is within a 5 % limit; a byte more is not.
    let (code, stdout, _) = diff(&[&base, &new, "--max-increase", "5%"]);
    assert_eq!(code, 0, "{stdout}");
    assert!(stdout.ends_with("within the limits\n"), "{stdout}");
    let (code, _, _) = diff(&[&base, &new, "--max-increase", "134217727B"]);
    assert_eq!(code, 1);
    let (code, _, _) = diff(&[&base, &new, "--max-increase", "128MiB"]);
    assert_eq!(code, 0);
    // Without a limit, the comparison only reports.
    let (code, stdout, _) = diff(&[&base, &new]);
    assert_eq!(code, 0);
    assert!(stdout.ends_with("compared (no limit set)\n"), "{stdout}");
}

#[test]
fn limits_by_figure_gate_each_figure_alone() {
    let (_root, base, new) = pair(5 * GIB / 2 + 128 * MIB);
    // Growth is unchanged: a limit on it alone passes; adding one on the peak fails.
    let (code, stdout, _) = diff(&[&base, &new, "--max-increase", "growth=0B"]);
    assert_eq!(code, 0, "{stdout}");
    let (code, stdout, _) = diff(&[
        &base,
        &new,
        "--max-increase",
        "growth=0B",
        "--max-increase",
        "peak=100MiB",
    ]);
    assert_eq!(code, 1, "{stdout}");
    assert!(
        stdout.contains("past the limit: forward peak +128 MiB (+5.0 %) (limit 100MiB)\n"),
        "{stdout}"
    );
    let (code, stdout, stderr) = diff(&[&base, &new, "--max-increase", "peak=5%,peak=1GiB"]);
    assert_eq!((code, stdout.as_str()), (2, ""));
    assert_eq!(
        stderr,
        "gpuspan diff: --max-increase \"peak=5%,peak=1GiB\": peak is limited twice; expected a \
         limit on the peak such as 5% or 512MiB, or limits by figure such as \
         peak=5%,growth=256MiB (figures: peak, growth, allocator_peak, non_allocator_peak, \
         bytes_per_sample, energy)\n"
    );
}

#[test]
fn markdown_names_the_worst_step_of_each_run_and_its_trace() {
    let (_root, base, new) = pair(5 * GIB / 2 + 128 * MIB);
    let (code, stdout, _) = diff(&[&base, &new, "--max-increase", "2%", "--markdown"]);
    assert_eq!(code, 1);
    let expected = format!(
        "### gpuspan diff: 1 figure past the limit

| phase | device | compared | figure | base | new | change | limit |
|---|---|---:|---|---:|---:|---:|---|
| step | all | 6 | peak | 3.0 GiB | 3.0 GiB | 0 B | 2%: ok |
| step | all | 6 | growth | 6.0 MiB | 6.0 MiB | 0 B |  |
| forward | all | 6 | peak | 2.5 GiB | 2.6 GiB | **+128 MiB (+5.0 %)** | **2%: past** |
| forward | all | 6 | growth | 517 MiB | 517 MiB | 0 B |  |
| epoch | all | 2 | peak | 3.0 GiB | 3.0 GiB | 0 B | 2%: ok |
| epoch | all | 2 | growth | 6.0 MiB | 6.0 MiB | 0 B |  |

**Base's worst step:** epoch 0 step 0, 3.0 GiB (trace `000000000000000000000000d1ff0000`)  
**New's worst step:** epoch 0 step 0, 3.0 GiB (trace `000000000000000000000000d1ff0000`)  

base: `{base}`, new: `{new}`
"
    );
    assert_eq!(stdout, expected);
}

#[test]
fn json_holds_every_figure_of_every_row_and_the_verdict() {
    let (_root, base, new) = pair(5 * GIB / 2 + 128 * MIB);
    let (code, stdout, _) = diff(&[&base, &new, "--max-increase", "2%", "--json"]);
    assert_eq!(code, 1);
    let json: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(json["gpuspan_diff"], 1);
    assert_eq!(json["passed"], false);
    assert_eq!(
        json["max_increase"],
        serde_json::json!([{ "figure": "peak", "limit": "2%" }])
    );
    assert_eq!(json["base"]["path"], base.as_str());
    assert_eq!(json["base"]["spans"], 14);
    assert_eq!(json["new"]["worst"]["phase"], "step");
    assert_eq!(json["new"]["worst"]["epoch"], 0);
    assert_eq!(json["new"]["worst"]["step"], 0);
    assert_eq!(json["new"]["worst"]["peak"], 3 * GIB);
    assert_eq!(
        json["new"]["worst"]["trace_id"],
        "000000000000000000000000d1ff0000"
    );
    let rows = json["rows"].as_array().unwrap();
    let phases: Vec<&str> = rows.iter().map(|r| r["phase"].as_str().unwrap()).collect();
    assert_eq!(phases, ["step", "forward", "epoch"]);
    let forward = &rows[1];
    assert_eq!(forward["device"], "all");
    assert_eq!(forward["rank"], serde_json::Value::Null);
    assert_eq!(
        (forward["compared"].as_u64(), forward["only_base"].as_u64()),
        (Some(6), Some(0))
    );
    let peak = &forward["figures"][0];
    assert_eq!(peak["figure"], "peak");
    assert_eq!(peak["base"], 5 * GIB / 2);
    assert_eq!(peak["new"], 5 * GIB / 2 + 128 * MIB);
    assert_eq!(peak["change"], 128 * MIB);
    assert_eq!(peak["percent"], 5.0);
    assert_eq!(peak["limit"], "2%");
    assert_eq!(peak["past_limit"], true);
    assert_eq!(forward["figures"][1]["figure"], "growth");
    assert_eq!(forward["figures"][1]["past_limit"], false);
    assert_eq!(json["only_base"], serde_json::json!([]));
}

/// Four steps of batch 16 and 32: a step peaks at 1 GiB + `per_sample` a sample; the
/// allocator's pool is 64 MiB over what it allocated, and the process holds
/// `non_allocator` beyond the pool. The devices' total is 8 GiB (`limits.json`).
fn batch_run(dir: &Path, per_sample: i64, non_allocator: i64) {
    let mut trace = Trace::new();
    for step in 0..4 {
        let batch = if step % 2 == 0 { 16 } else { 32 };
        let peak = GIB + per_sample * batch;
        let allocated = GIB / 2 + per_sample * batch;
        let reserved = allocated + 64 * MIB;
        let process = reserved + non_allocator;
        let id = trace.reserve_id();
        trace.span(
            "step",
            &id,
            None,
            Some(Mem {
                start: GIB,
                peak,
                end: GIB,
            }),
            &[
                ("ml.step", step),
                ("batch_size", batch),
                ("gpu.allocator.allocated.peak", allocated),
                ("gpu.allocator.reserved.peak", reserved),
                ("gpu.process.memory.start", GIB),
                ("gpu.process.memory.peak", process),
                ("gpu.process.memory.end", GIB),
            ],
        );
    }
    trace.write_run(dir);
    std::fs::write(
        dir.join("limits.json"),
        format!(
            r#"{{"devices":[{{"index":0,"total_bytes":{},"budget_bytes":null}}]}}"#,
            8 * GIB
        ),
    )
    .unwrap();
}

#[test]
fn the_bytes_per_sample_and_the_memory_beyond_the_allocator_are_held_to_their_limits() {
    let root = tempfile::tempdir().unwrap();
    let (base, new) = (root.path().join("base"), root.path().join("new"));
    batch_run(&base, 8 * MIB, 300 * MIB);
    batch_run(&new, 9 * MIB, 400 * MIB);
    let (code, stdout, stderr) = diff(&[
        path(&base),
        path(&new),
        "--max-increase",
        "bytes_per_sample=10%,non_allocator_peak=64MiB,allocator_peak=1GiB",
    ]);
    assert_eq!(code, 1, "{stdout}{stderr}");
    // Peaks of 1 GiB + 128 / 256 MiB against 1 GiB + 144 / 288 MiB; within 8 GiB the
    // largest batch goes from 7 GiB / 8 MiB = 896 to 7 GiB / 9 MiB = 796.
    let expected = format!(
        "base: {} (4 spans with memory figures)
new:  {} (4 spans with memory figures)

phase  device  compared  figure                 base      new              change  limit
step   all            4  peak                1.2 GiB  1.3 GiB  +32.0 MiB (+2.5 %)
step   all            4  growth                  0 B      0 B                 0 B
step   all            4  allocator_peak      768 MiB  800 MiB  +32.0 MiB (+4.2 %)  1GiB: ok
step   all            4  non_allocator_peak  300 MiB  400 MiB  +100 MiB (+33.3 %)  64MiB: past
step   all            4  bytes_per_sample    8.0 MiB  9.0 MiB  +1.0 MiB (+12.5 %)  10%: past
step   all            4  max_batch_size          896      796      -100 (-11.2 %)

worst step in base: step 1, 1.2 GiB (trace 000000000000000000000000d1ff0000)
worst step in new: step 1, 1.3 GiB (trace 000000000000000000000000d1ff0000)
past the limit: step non_allocator_peak +100 MiB (+33.3 %) (limit 64MiB)
past the limit: step bytes_per_sample +1.0 MiB (+12.5 %) (limit 10%)
2 figures past the limit
",
        base.display(),
        new.display()
    );
    assert_eq!(stdout, expected);
}
