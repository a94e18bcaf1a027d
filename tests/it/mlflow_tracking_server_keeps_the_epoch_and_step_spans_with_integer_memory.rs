//! An MLflow tracking server receives the `train` example's spans over OTLP/HTTP (its
//! `/v1/traces` endpoint with the `x-mlflow-experiment-id` header, set through the standard
//! per-signal OTel variables) and gives them back through its REST API: one trace per epoch,
//! the steps under their epoch, the memory attributes still integers, the run id as a tag.

use gpuspan_test_support as support;

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

use serde_json::{json, Value};
use support::example::run_train;
use support::fake_nvml::{FakeNvml, MIB};
use support::http::{encode, get, post_json};
use support::mlflow::int_attribute;
use support::servers::{free_port, tools, Server};

const USED_MIB: u64 = 2500;
const EPOCHS: usize = 2;
const STEPS: usize = 3;
const RUN_ID: &str = "mlflow-run";

#[test]
fn spans_sent_over_otlp_http_come_back_from_the_rest_api() {
    let tools = tools();
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let addr = format!("127.0.0.1:{port}").parse().unwrap();
    let db = dir.path().join("mlflow.db");
    let mut command = Command::new(&tools.mlflow);
    command
        .args(["server", "--host", "127.0.0.1", "--port", &port.to_string()])
        .args(["--workers", "1"])
        .arg("--backend-store-uri")
        .arg(format!("sqlite:///{}", db.display()))
        .arg("--default-artifact-root")
        .arg(dir.path().join("artifacts"))
        .current_dir(dir.path())
        .env("MLFLOW_SERVER_ENABLE_JOB_EXECUTION", "false")
        .env("MLFLOW_DISABLE_TELEMETRY", "true")
        .env("DO_NOT_TRACK", "true");
    let mut mlflow = Server::start("mlflow server", command, &dir.path().join("mlflow.log"));
    // Creating the database and importing MLflow takes 15 s on an idle 2-core machine.
    mlflow.wait_for("200 from /health", Duration::from_secs(240), |_| {
        get(addr, "/health").ok().filter(|r| r.status == 200)
    });

    let created = post_json(
        addr,
        "/api/2.0/mlflow/experiments/create",
        &json!({ "name": "gpuspan" }),
    )
    .unwrap();
    assert_eq!(created.status, 200, "{}", created.body);
    let experiment = created.json()["experiment_id"]
        .as_str()
        .expect("experiment_id")
        .to_string();

    let fake = FakeNvml::build();
    let out = run_train(
        &[
            "--epochs",
            &EPOCHS.to_string(),
            "--steps",
            &STEPS.to_string(),
            "--batch-size",
            "8",
        ],
        &[
            (
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                &format!("http://{addr}/v1/traces"),
            ),
            ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf"),
            (
                "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
                &format!("x-mlflow-experiment-id={experiment}"),
            ),
            ("OTEL_METRICS_EXPORTER", "none"),
            ("OTEL_SERVICE_NAME", "train-to-mlflow"),
            ("GPUSPAN_RUN_ID", RUN_ID),
            ("GPUSPAN_RUN_DIR", dir.path().to_str().unwrap()),
            ("GPUSPAN_NVML_LIB", fake.path().to_str().unwrap()),
            ("FAKE_NVML_USED_MIB", &USED_MIB.to_string()),
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "train failed:\n{stderr}");
    assert!(
        !stderr.contains("could not export"),
        "train could not export to MLflow:\n{stderr}\nMLflow:\n{}",
        mlflow.output_tail()
    );

    let search = json!({
        "locations": [{ "type": "MLFLOW_EXPERIMENT", "mlflow_experiment": { "experiment_id": experiment } }],
        "max_results": 100,
    });
    let infos = mlflow.wait_for(
        "trace per epoch from /api/3.0/mlflow/traces/search",
        Duration::from_secs(30),
        |_| {
            let found = post_json(addr, "/api/3.0/mlflow/traces/search", &search).ok()?;
            let traces = found.json()["traces"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            (traces.len() >= EPOCHS).then_some(traces)
        },
    );
    assert_eq!(infos.len(), EPOCHS, "one MLflow trace per epoch: {infos:?}");

    let used = (USED_MIB * MIB) as i64;
    let mut epoch_indexes = Vec::new();
    for info in &infos {
        assert_eq!(info["state"], "OK", "{info}");
        assert_eq!(
            info["tags"]["ml.run.id"], RUN_ID,
            "the run id is a tag: {info}"
        );
        assert_eq!(info["tags"]["service.name"], "train-to-mlflow", "{info}");
        let trace_id = info["trace_id"].as_str().expect("trace_id");
        let response = get(
            addr,
            &format!("/api/3.0/mlflow/traces/get?trace_id={}", encode(trace_id)),
        )
        .unwrap();
        assert_eq!(response.status, 200, "{}", response.body);
        let spans = response.json()["trace"]["spans"]
            .as_array()
            .cloned()
            .expect("the trace has spans");
        let named =
            |name: &str| -> Vec<&Value> { spans.iter().filter(|s| s["name"] == name).collect() };
        let (epochs, steps) = (named("epoch"), named("step"));
        assert_eq!(epochs.len(), 1, "one epoch span per trace: {spans:?}");
        assert_eq!(steps.len(), STEPS, "the epoch's steps are in its trace");
        let epoch = epochs[0];
        assert!(
            epoch.get("parent_span_id").is_none_or(|p| p == ""),
            "the epoch is the trace's root: {epoch}"
        );
        epoch_indexes.push(int_attribute(epoch, "ml.epoch").unwrap());

        let mut step_indexes = Vec::new();
        for step in &steps {
            assert_eq!(
                step["parent_span_id"], epoch["span_id"],
                "a step's parent is its epoch"
            );
            step_indexes.push(int_attribute(step, "ml.step").unwrap());
        }
        step_indexes.sort();
        assert_eq!(step_indexes, (0..STEPS as i64).collect::<Vec<_>>());

        for span in epochs.iter().chain(&steps) {
            let mut memory = BTreeMap::new();
            for key in [
                "gpu.memory.start",
                "gpu.memory.peak",
                "gpu.memory.end",
                "process.memory.peak",
            ] {
                memory.insert(key, int_attribute(span, key).unwrap());
            }
            assert_eq!(memory["gpu.memory.peak"], used, "{memory:?}");
            assert_eq!(memory["gpu.memory.start"], used, "{memory:?}");
            assert_eq!(memory["gpu.memory.end"], used, "{memory:?}");
            assert!(memory["process.memory.peak"] > 0, "{memory:?}");
        }
    }
    epoch_indexes.sort();
    assert_eq!(epoch_indexes, [0, 1]);
    drop(mlflow);
}
