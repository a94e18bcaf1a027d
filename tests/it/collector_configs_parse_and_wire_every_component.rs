//! The configurations in collector/ are valid as written: every YAML and JSON file parses;
//! in each OpenTelemetry Collector configuration (alone, or with the overlays it is meant to
//! be combined with) every declared receiver, processor, exporter and extension is used by
//! the service and every one the service uses is declared; the compose stack publishes only
//! on loopback and mounts files that exist; Prometheus's own checker accepts its config.

use gpuspan_test_support as support;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_yaml::{Mapping, Value};
use support::go_stack::EXAMPLE_CONFIGURATIONS;

fn collector_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("collector")
}

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files(&path, out);
        } else {
            out.push(path);
        }
    }
}

fn load(name: &str) -> Value {
    let path = collector_dir().join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{name} is not YAML: {e}"))
}

/// Merges `overlay` into `base` as the collector merges several `--config` files: maps key
/// by key, recursively; anything else (lists included) is replaced.
fn merge(base: &mut Value, overlay: &Value) {
    match (base, overlay) {
        (Value::Mapping(base), Value::Mapping(overlay)) => {
            for (key, value) in overlay {
                match base.get_mut(key) {
                    Some(existing) => merge(existing, value),
                    None => {
                        base.insert(key.clone(), value.clone());
                    }
                }
            }
        }
        (base, overlay) => *base = overlay.clone(),
    }
}

fn keys(config: &Value, section: &str) -> BTreeSet<String> {
    config
        .get(section)
        .and_then(Value::as_mapping)
        .map(|m| {
            m.keys()
                .filter_map(|k| k.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

fn names(list: Option<&Value>) -> Vec<String> {
    list.and_then(Value::as_sequence)
        .map(|s| {
            s.iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// Every wiring problem of a collector configuration, as sentences.
fn wiring_problems(name: &str, config: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    let empty = Mapping::new();
    let service = config.get("service").and_then(Value::as_mapping);
    let pipelines = service
        .and_then(|s| s.get("pipelines"))
        .and_then(Value::as_mapping)
        .unwrap_or(&empty);
    if pipelines.is_empty() {
        problems.push(format!("{name}: no service.pipelines"));
    }

    let mut used = std::collections::BTreeMap::<&str, BTreeSet<String>>::new();
    for (id, pipeline) in pipelines {
        let id = id.as_str().unwrap_or_default();
        let signal = id.split('/').next().unwrap_or_default();
        if !["traces", "metrics", "logs"].contains(&signal) {
            problems.push(format!(
                "{name}: pipeline {id} is not traces, metrics or logs"
            ));
        }
        for section in ["receivers", "processors", "exporters"] {
            let listed = names(pipeline.get(section));
            if section != "processors" && listed.is_empty() {
                problems.push(format!("{name}: pipeline {id} has no {section}"));
            }
            for component in &listed {
                if !keys(config, section).contains(component) {
                    problems.push(format!(
                        "{name}: pipeline {id} uses {section} {component}, which is not declared"
                    ));
                }
            }
            used.entry(section).or_default().extend(listed);
        }
        let processors = names(pipeline.get("processors"));
        if processors.first().map(String::as_str) != Some("memory_limiter") {
            problems.push(format!(
                "{name}: pipeline {id} does not start with memory_limiter: {processors:?}"
            ));
        }
        if processors.last().map(String::as_str) != Some("batch") {
            problems.push(format!(
                "{name}: pipeline {id} does not end with batch: {processors:?}"
            ));
        }
    }
    for section in ["receivers", "processors", "exporters"] {
        for declared in keys(config, section) {
            if !used.get(section).is_some_and(|u| u.contains(&declared)) {
                problems.push(format!(
                    "{name}: {section} {declared} is declared but in no pipeline"
                ));
            }
        }
    }
    if !keys(config, "connectors").is_empty() {
        problems.push(format!("{name}: connectors are not checked here"));
    }
    let extensions = names(service.and_then(|s| s.get("extensions")));
    let declared_extensions = keys(config, "extensions");
    for extension in &extensions {
        if !declared_extensions.contains(extension) {
            problems.push(format!(
                "{name}: service uses extension {extension}, which is not declared"
            ));
        }
    }
    for extension in &declared_extensions {
        if !extensions.contains(extension) {
            problems.push(format!(
                "{name}: extension {extension} is declared but not in service.extensions"
            ));
        }
    }
    problems
}

#[test]
fn every_yaml_and_json_file_parses() {
    let mut all = Vec::new();
    files(&collector_dir(), &mut all);
    let mut parsed = 0;
    for path in &all {
        let text = std::fs::read_to_string(path).unwrap();
        match path.extension().and_then(|e| e.to_str()) {
            Some("yaml" | "yml") => {
                let value: Value = serde_yaml::from_str(&text)
                    .unwrap_or_else(|e| panic!("{} is not YAML: {e}", path.display()));
                assert!(value.is_mapping(), "{} is not a mapping", path.display());
                parsed += 1;
            }
            Some("json") => {
                serde_json::from_str::<serde_json::Value>(&text)
                    .unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()));
                parsed += 1;
            }
            _ => {}
        }
    }
    assert!(
        parsed >= 10,
        "only {parsed} configuration files in collector/"
    );
}

#[test]
fn every_collector_component_is_declared_and_in_a_pipeline() {
    let mut problems = Vec::new();
    for files in EXAMPLE_CONFIGURATIONS {
        let mut config = load(files[0]);
        for overlay in &files[1..] {
            merge(&mut config, &load(overlay));
        }
        problems.extend(wiring_problems(&files.join(" + "), &config));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_default_configuration_sends_to_jaeger_tempo_and_prometheus_only() {
    let config = load("otelcol.yaml");
    let exporters = keys(&config, "exporters");
    assert_eq!(
        exporters,
        BTreeSet::from([
            "otlp/jaeger".into(),
            "otlp/tempo".into(),
            "prometheus".into()
        ])
    );
    // Addresses come from variables (tests point them at their own servers); the defaults
    // are the compose stack's.
    for (path, variable, default) in [
        (
            &config["exporters"]["otlp/jaeger"],
            "JAEGER_ENDPOINT",
            "jaeger:4317",
        ),
        (
            &config["exporters"]["otlp/tempo"],
            "TEMPO_ENDPOINT",
            "tempo:4317",
        ),
        (
            &config["exporters"]["prometheus"],
            "PROMETHEUS_LISTEN",
            "0.0.0.0:8889",
        ),
        (
            &config["receivers"]["otlp"]["protocols"]["grpc"],
            "OTLP_GRPC_LISTEN",
            "0.0.0.0:4317",
        ),
        (
            &config["receivers"]["otlp"]["protocols"]["http"],
            "OTLP_HTTP_LISTEN",
            "0.0.0.0:4318",
        ),
        (
            &config["extensions"]["health_check"],
            "HEALTH_CHECK_LISTEN",
            "0.0.0.0:13133",
        ),
    ] {
        assert_eq!(
            path["endpoint"],
            format!("${{env:{variable}:-{default}}}").as_str(),
            "otelcol.yaml: {variable} with the compose stack's address as its default"
        );
    }
    let pipelines = &config["service"]["pipelines"];
    assert_eq!(
        names(pipelines["traces"].get("exporters")),
        ["otlp/jaeger", "otlp/tempo"]
    );
    assert_eq!(names(pipelines["metrics"].get("exporters")), ["prometheus"]);

    // The optional destinations take their secrets from the environment only.
    let weave = load("otelcol.weave.yaml");
    assert_eq!(
        weave["exporters"]["otlphttp/weave"]["headers"]["wandb-api-key"],
        "${env:WANDB_API_KEY}"
    );
    let mlflow = load("otelcol.mlflow.yaml");
    assert_eq!(
        mlflow["exporters"]["otlphttp/mlflow"]["headers"]["x-mlflow-experiment-id"],
        "${env:MLFLOW_EXPERIMENT_ID:-0}"
    );
}

#[test]
fn the_agent_listens_on_loopback_and_forwards_to_the_gateway() {
    let agent = load("agent.yaml");
    for (protocol, variable, default) in [
        ("grpc", "OTLP_GRPC_LISTEN", "127.0.0.1:4317"),
        ("http", "OTLP_HTTP_LISTEN", "127.0.0.1:4318"),
    ] {
        assert_eq!(
            agent["receivers"]["otlp"]["protocols"][protocol]["endpoint"],
            format!("${{env:{variable}:-{default}}}").as_str(),
            "{protocol}: on loopback unless told"
        );
    }
    assert_eq!(
        agent["exporters"]["otlp/gateway"]["endpoint"],
        "${env:GATEWAY_ENDPOINT}"
    );
    let gateway = load("gateway.yaml");
    assert_eq!(
        names(gateway["service"]["pipelines"]["traces"].get("exporters")),
        ["otlp/jaeger", "otlp/tempo"]
    );
}

#[test]
fn the_compose_stack_publishes_on_loopback_and_mounts_files_that_exist() {
    let compose = load("docker-compose.yaml");
    let services = compose["services"].as_mapping().expect("services");
    for wanted in ["otelcol", "jaeger", "tempo", "prometheus", "grafana"] {
        assert!(
            services.contains_key(wanted),
            "no {wanted} service in docker-compose.yaml"
        );
    }
    for (name, service) in services {
        let name = name.as_str().unwrap();
        let image = service["image"].as_str().unwrap_or_default();
        let tag = image.rsplit_once(':').map(|(_, tag)| tag).unwrap_or("");
        assert!(
            !tag.is_empty() && tag != "latest" && !tag.contains('/'),
            "{name}: image {image:?} is not pinned to a version"
        );
        for port in names(service.get("ports")) {
            assert!(
                port.starts_with("127.0.0.1:"),
                "{name}: port {port} is published beyond loopback"
            );
        }
        for volume in names(service.get("volumes")) {
            let source = volume.split(':').next().unwrap();
            if source.starts_with("./") {
                let path = collector_dir().join(source);
                assert!(
                    path.exists(),
                    "{name}: mounts {source}, which does not exist"
                );
            }
        }
    }
}

#[test]
fn promtool_accepts_the_prometheus_configuration() {
    let tools = support::servers::tools();
    let out = Command::new(&tools.promtool)
        .args(["check", "config", "--syntax-only"])
        .arg(collector_dir().join("prometheus.yml"))
        .output()
        .expect("running promtool");
    assert!(
        out.status.success(),
        "promtool rejects collector/prometheus.yml:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A gRPC receiver takes 4 MiB per request by default (the next collector's, Jaeger's,
/// Tempo's) and refuses a larger one whole: a batch processor without a cap would lose a
/// burst of spans (`cargo bench --bench agent_gateway` lost 25,000 of 30,000 that way).
#[test]
fn every_batch_is_capped_well_under_a_grpc_request_limit() {
    for file in ["otelcol.yaml", "agent.yaml", "gateway.yaml"] {
        let config = load(file);
        let batch = &config["processors"]["batch"];
        let size = batch["send_batch_size"].as_u64();
        let cap = batch["send_batch_max_size"].as_u64();
        assert!(
            cap.is_some_and(|c| c <= 2048) && size <= cap,
            "{file}: batch {size:?}, at most {cap:?}: cap it at 2,048 spans or fewer"
        );
    }
}
