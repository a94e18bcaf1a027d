//! An MLflow tracking server for the tests (installed by `tests/collectors/install.sh`): started
//! on a free loopback port with a SQLite store, and read back through its REST API.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::{json, Value};

use crate::http::{encode, get, post_json};
use crate::servers::{free_port, tools, Server};

/// A running tracking server.
pub struct Mlflow {
    pub server: Server,
    pub addr: SocketAddr,
}

impl Mlflow {
    /// Starts the server with its store in `dir` and waits for `/health`.
    pub fn start(dir: &Path) -> Mlflow {
        let port = free_port();
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let mut command = Command::new(&tools().mlflow);
        command
            .args(["server", "--host", "127.0.0.1", "--port", &port.to_string()])
            .args(["--workers", "1"])
            .arg("--backend-store-uri")
            .arg(format!("sqlite:///{}", dir.join("mlflow.db").display()))
            .arg("--default-artifact-root")
            .arg(dir.join("artifacts"))
            .current_dir(dir)
            .env("MLFLOW_SERVER_ENABLE_JOB_EXECUTION", "false")
            .env("MLFLOW_DISABLE_TELEMETRY", "true")
            .env("DO_NOT_TRACK", "true");
        let mut server = Server::start("mlflow server", command, &dir.join("mlflow.log"));
        // Creating the database and importing MLflow takes 15 s on an idle 2-core machine.
        server.wait_for("200 from /health", Duration::from_secs(240), |_| {
            get(addr, "/health").ok().filter(|r| r.status == 200)
        });
        Mlflow { server, addr }
    }

    /// `http://127.0.0.1:PORT/v1/traces`, where MLflow takes OTLP/HTTP traces.
    pub fn traces_url(&self) -> String {
        format!("http://{}/v1/traces", self.addr)
    }

    /// Creates experiment `name` and returns its id.
    pub fn create_experiment(&self, name: &str) -> String {
        let created = post_json(
            self.addr,
            "/api/2.0/mlflow/experiments/create",
            &json!({ "name": name }),
        )
        .unwrap();
        assert_eq!(created.status, 200, "{}", created.body);
        created.json()["experiment_id"]
            .as_str()
            .expect("experiment_id")
            .to_string()
    }

    /// Polls the experiment's trace list until it has at least `count` traces (at most
    /// `timeout`), and returns the trace infos found by then.
    pub fn wait_for_traces(
        &mut self,
        experiment: &str,
        count: usize,
        timeout: Duration,
    ) -> Vec<Value> {
        let search = json!({
            "locations": [{ "type": "MLFLOW_EXPERIMENT", "mlflow_experiment": { "experiment_id": experiment } }],
            "max_results": 100,
        });
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let traces = post_json(self.addr, "/api/3.0/mlflow/traces/search", &search)
                .ok()
                .and_then(|r| r.json()["traces"].as_array().cloned())
                .unwrap_or_default();
            if traces.len() >= count || std::time::Instant::now() > deadline {
                return traces;
            }
            self.server.assert_running();
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// The epochs of a `train` run, one trace each (`infos`, as
    /// [`Mlflow::wait_for_traces`] returns them): asserts that every trace is complete and
    /// tagged with the run's `run_id`, and that the epochs are numbered from 0; returns
    /// each trace's info, epoch span and `steps` step spans, checked as [`epoch_and_steps`]
    /// checks them.
    pub fn epochs(&self, infos: &[Value], run_id: &str, steps: usize) -> Vec<Epoch> {
        let mut epochs = Vec::new();
        for info in infos {
            assert_eq!(info["state"], "OK", "{info}");
            assert_eq!(
                info["tags"]["ml.run.id"], run_id,
                "the run id is a tag: {info}"
            );
            let spans = self.spans(info["trace_id"].as_str().expect("trace_id"));
            let (epoch, step_spans) = epoch_and_steps(&spans, steps);
            epochs.push(Epoch {
                info: info.clone(),
                epoch: epoch.clone(),
                steps: step_spans.into_iter().cloned().collect(),
            });
        }
        let mut indexes: Vec<i64> = epochs
            .iter()
            .map(|e| int_attribute(&e.epoch, "ml.epoch").unwrap())
            .collect();
        indexes.sort();
        assert_eq!(indexes, (0..infos.len() as i64).collect::<Vec<_>>());
        epochs
    }

    /// The spans of trace `trace_id`.
    pub fn spans(&self, trace_id: &str) -> Vec<Value> {
        let response = get(
            self.addr,
            &format!("/api/3.0/mlflow/traces/get?trace_id={}", encode(trace_id)),
        )
        .unwrap();
        assert_eq!(response.status, 200, "{}", response.body);
        response.json()["trace"]["spans"]
            .as_array()
            .cloned()
            .expect("the trace has spans")
    }
}

/// One epoch of a `train` run as MLflow keeps it: its trace's info, and its spans.
pub struct Epoch {
    pub info: Value,
    pub epoch: Value,
    pub steps: Vec<Value>,
}

impl Epoch {
    /// The epoch span, then its step spans.
    pub fn spans(&self) -> impl Iterator<Item = &Value> {
        std::iter::once(&self.epoch).chain(&self.steps)
    }
}

/// Asserts that a span's device memory figures are integers equal to `used`.
pub fn assert_device_memory(span: &Value, used: i64) {
    for key in ["gpu.memory.start", "gpu.memory.peak", "gpu.memory.end"] {
        assert_eq!(int_attribute(span, key), Ok(used), "{key} of {span}");
    }
}

/// The epoch span of one MLflow trace and its step spans, checked as the `train` example
/// sends them: one epoch, `steps` steps, each a child of the epoch, numbered `0..steps`.
pub fn epoch_and_steps(spans: &[Value], steps: usize) -> (&Value, Vec<&Value>) {
    let named =
        |name: &str| -> Vec<&Value> { spans.iter().filter(|s| s["name"] == name).collect() };
    let (epochs, step_spans) = (named("epoch"), named("step"));
    assert_eq!(epochs.len(), 1, "one epoch span per trace: {spans:?}");
    assert_eq!(
        step_spans.len(),
        steps,
        "the epoch's steps are in its trace"
    );
    let epoch = epochs[0];
    let mut step_indexes = Vec::new();
    for step in &step_spans {
        assert_eq!(
            step["parent_span_id"], epoch["span_id"],
            "a step's parent is its epoch"
        );
        step_indexes.push(int_attribute(step, "ml.step").unwrap());
    }
    step_indexes.sort();
    assert_eq!(step_indexes, (0..steps as i64).collect::<Vec<_>>());
    (epoch, step_spans)
}

/// An integer attribute as MLflow returns it: an OTLP `int_value` (a JSON number, or a
/// decimal string as proto3 JSON writes 64-bit integers), or a JSON-encoded value in a
/// `string_value` that must decode to a number. A string that holds the number is an error.
pub fn int_attribute(span: &Value, key: &str) -> Result<i64, String> {
    let value = span["attributes"]
        .as_array()
        .and_then(|attrs| attrs.iter().find(|a| a["key"] == key))
        .map(|a| &a["value"])
        .ok_or_else(|| format!("no attribute {key}"))?;
    if let Some(int) = value.get("int_value").or_else(|| value.get("intValue")) {
        return int
            .as_i64()
            .or_else(|| int.as_str().and_then(|s| s.parse().ok()))
            .ok_or_else(|| format!("{key}: int_value {int} is not an integer"));
    }
    if let Some(text) = value
        .get("string_value")
        .or_else(|| value.get("stringValue"))
        .and_then(Value::as_str)
    {
        let decoded: Value = serde_json::from_str(text)
            .map_err(|_| format!("{key} is the string {text:?}, not a number"))?;
        return decoded
            .as_i64()
            .ok_or_else(|| format!("{key} is stored as {text}, which is not an integer"));
    }
    Err(format!("{key} is {value}, not an integer"))
}
