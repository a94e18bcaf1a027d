//! Two runs on fake GPUs that draw 200 W and 250 W for the same half second of their epoch:
//! `gpuspan diff` shows the epoch's energy beside its peak memory, 100 J against 125 J,
//! in the table, the Markdown and the JSON alike; it holds energy to a limit only when one
//! is asked for (`energy=10%`).

use gpuspan_test_support as support;

use std::path::Path;
use std::process::Command;

use support::commands::outcome;
use support::power_window::run_epoch;

fn diff(root: &Path, args: &[&str]) -> (i32, String) {
    let (code, stdout, stderr) = outcome(
        Command::new(env!("CARGO_BIN_EXE_gpuspan"))
            .arg("diff")
            .arg(root.join("base"))
            .arg(root.join("new"))
            .args(args),
    );
    (code, stdout + &stderr)
}

#[test]
fn the_epoch_s_energy_is_compared_and_gates_only_when_asked() {
    let root = tempfile::tempdir().unwrap();
    let base = run_epoch(root.path(), "base", 200, 5, |_| {});
    let new = run_epoch(root.path(), "new", 250, 5, |_| {});
    assert_eq!((base.joules(), new.joules()), (100.0, 125.0));

    // A bare limit is the peak's: energy is reported, not held to it.
    let (code, out) = diff(root.path(), &["--max-increase", "5%"]);
    assert_eq!(code, 0, "{out}");
    let rows: Vec<String> = out
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect();
    assert!(
        rows.contains(&"epoch all 1 energy 100.0 J 125.0 J +25.0 J (+25.0 %)".to_owned()),
        "{out}"
    );
    assert!(
        rows.contains(&"epoch all 1 peak 1.0 GiB 1.0 GiB 0 B 5%: ok".to_owned()),
        "{out}"
    );
    assert!(out.ends_with("\nwithin the limits\n"), "{out}");

    // Asked for, it gates.
    let (code, out) = diff(root.path(), &["--max-increase", "energy=10%"]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("past the limit: epoch energy +25.0 J (+25.0 %) (limit 10%)"),
        "{out}"
    );

    let (_, markdown) = diff(root.path(), &["--markdown"]);
    assert!(
        markdown
            .contains("| epoch | all | 1 | energy | 100.0 J | 125.0 J | +25.0 J (+25.0 %) |  |"),
        "{markdown}"
    );

    let (_, json) = diff(root.path(), &["--json"]);
    let json: serde_json::Value = serde_json::from_str(&json).unwrap();
    let energy = json["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|row| row["phase"] == "epoch" && row["device"] == "all")
        .flat_map(|row| row["figures"].as_array().unwrap())
        .find(|f| f["figure"] == "energy")
        .expect("an energy figure");
    assert_eq!(energy["base"], 100_000);
    assert_eq!(energy["new"], 125_000);
    assert_eq!(energy["change"], 25_000);
    assert_eq!(energy["percent"], 25.0);
    assert_eq!(energy["past_limit"], false);
}
