//! The collector built from the official Go modules accepts every example configuration that
//! uses only its components (collector/otelcol.yaml alone and with each overlay,
//! collector/agent.yaml and collector/gateway.yaml), as `otelcol validate` checks them: every
//! component known, every
//! setting and every processor statement valid. A configuration with a broken transform
//! statement is refused, naming it, so the check is not vacuous.

use gpuspan_test_support as support;

use std::path::PathBuf;
use std::process::{Command, Output};

use support::go_stack::{go_tools, repo, EXAMPLE_CONFIGURATIONS};

/// The variables the configurations read without a default, set as a user would.
const ENV: &[(&str, &str)] = &[
    ("WANDB_API_KEY", "key"),
    ("WANDB_ENTITY", "team"),
    ("WANDB_PROJECT", "project"),
    ("GATEWAY_ENDPOINT", "127.0.0.1:4317"),
    ("NODE_NAME", "node-a"),
];

fn validate(configs: &[PathBuf]) -> Output {
    let mut command = Command::new(&go_tools().otelcol);
    command.arg("validate");
    for config in configs {
        command.arg(format!("--config={}", config.display()));
    }
    command.envs(ENV.iter().copied());
    command.output().expect("running otelcol-gpuspan validate")
}

fn in_collector_dir(names: &[&str]) -> Vec<PathBuf> {
    names
        .iter()
        .map(|n| repo().join("collector").join(n))
        .collect()
}

#[test]
fn every_example_configuration_is_valid() {
    for names in EXAMPLE_CONFIGURATIONS {
        let out = validate(&in_collector_dir(names));
        assert!(
            out.status.success(),
            "otelcol validate rejects {}:\n{}{}",
            names.join(" + "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn a_broken_processor_statement_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let broken = dir.path().join("broken.yaml");
    std::fs::write(
        &broken,
        "processors:\n  transform/run_labels:\n    metric_statements:\n      - context: datapoint\n        statements:\n          - set(attributes[\"x\"], no_such_function())\n",
    )
    .unwrap();
    let mut configs = in_collector_dir(&["otelcol.yaml"]);
    configs.push(broken);
    let out = validate(&configs);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the broken statement was accepted");
    assert!(
        stderr.contains("no_such_function"),
        "the error names the statement:\n{stderr}"
    );
}
