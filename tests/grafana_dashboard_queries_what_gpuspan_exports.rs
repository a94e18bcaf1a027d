//! The Grafana dashboard in collector/ asks for what gpuspan really exports: every metric
//! its PromQL names is served by gpuspan's Prometheus endpoint (the names the collector's
//! Prometheus exporter gives the same OTLP metrics), every label it uses comes from gpuspan
//! or from the collector's transform, and every span attribute its TraceQL selects is on
//! gpuspan's epoch or step spans.

use gpuspan_test_support as support;

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::Duration;

use gpuspan::Exporter;
use serde_json::Value;
use support::receiver::Receiver;
use support::scripted::scripted;

const MB: u64 = 1 << 20;

fn dashboard() -> Value {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("collector/grafana/dashboards/gpuspan.json");
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

/// (datasource uid, query) of every panel target and template variable.
fn queries(dashboard: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().into_iter().flatten() {
            let uid = target["datasource"]["uid"]
                .as_str()
                .or(panel["datasource"]["uid"].as_str())
                .unwrap_or_default();
            for key in ["expr", "query"] {
                if let Some(query) = target[key].as_str() {
                    out.push((uid.to_string(), query.to_string()));
                }
            }
            if let Some(legend) = target["legendFormat"].as_str() {
                out.push(("legend".into(), legend.to_string()));
            }
        }
    }
    for variable in dashboard["templating"]["list"].as_array().unwrap() {
        let uid = variable["datasource"]["uid"].as_str().unwrap_or_default();
        if let Some(query) = variable["query"]["query"].as_str() {
            out.push((uid.to_string(), query.to_string()));
        }
    }
    out
}

fn identifier(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Metric names of a PromQL query: identifiers before a `{` selector, and the first
/// argument of `label_values(...)`.
fn metric_names(promql: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for (i, _) in promql.match_indices('{') {
        let name: String = promql[..i]
            .chars()
            .rev()
            .take_while(|&c| identifier(c))
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        if !name.is_empty() {
            names.insert(name);
        }
    }
    if let Some(args) = promql.strip_prefix("label_values(") {
        names.insert(args.split(',').next().unwrap().trim().to_string());
    }
    names
}

/// Labels a PromQL query or legend uses: `by (..)`, selector matchers, `{{label}}` in a
/// legend, and label_values's second argument.
fn label_names(text: &str) -> BTreeSet<String> {
    let mut labels = BTreeSet::new();
    for part in text.split("{{").skip(1) {
        labels.insert(part.split("}}").next().unwrap().trim().to_string());
    }
    for part in text.split("by (").skip(1) {
        for label in part.split(')').next().unwrap().split(',') {
            labels.insert(label.trim().to_string());
        }
    }
    for part in text.split('{').skip(1) {
        if part.starts_with('{') {
            continue;
        }
        for matcher in part.split('}').next().unwrap().split(',') {
            let label: String = matcher
                .trim()
                .chars()
                .take_while(|&c| identifier(c))
                .collect();
            if !label.is_empty() {
                labels.insert(label);
            }
        }
    }
    if let Some(args) = text.strip_prefix("label_values(") {
        if let Some(label) = args.split(',').nth(1) {
            labels.insert(label.trim_end_matches(')').trim().to_string());
        }
    }
    labels.retain(|l| !l.is_empty());
    labels
}

/// Labels the collector's transform processor adds from resource attributes.
fn collector_labels() -> BTreeSet<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("collector/otelcol.yaml");
    let text = std::fs::read_to_string(path).unwrap();
    text.split("set(attributes[\"")
        .skip(1)
        .map(|s| s.split('"').next().unwrap().replace('.', "_"))
        .collect()
}

fn scrape(addr: SocketAddr) -> String {
    let mut stream = TcpStream::connect(addr).unwrap();
    write!(
        stream,
        "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    response
}

#[test]
fn metric_names_labels_and_span_attributes_exist() {
    let receiver = Receiver::start_grpc();
    let (source, script) = scripted(2, 500 * MB);
    let builder = support::setup::to_receiver(&receiver)
        .memory_source(source)
        .sample_interval(Duration::from_millis(2))
        .metrics_exporter(Exporter::None)
        .prometheus_addr("127.0.0.1:0".parse().unwrap());
    let (telemetry, ()) = support::setup::run(builder, |_| {
        let _e = gpuspan::epoch_span!(0);
        let _s = gpuspan::step_span!(0);
        script.wait_reads(3);
    });
    let scraped = scrape(telemetry.prometheus_addr().expect("the endpoint is up"));
    telemetry.shutdown().unwrap();
    let served: BTreeSet<&str> = scraped
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split(['{', ' ']).next())
        .collect();

    let dashboard = dashboard();
    let queries = queries(&dashboard);
    let from_collector = collector_labels();
    let mut problems = Vec::new();
    let mut prometheus_queries = 0;
    for (uid, query) in &queries {
        if uid == "prometheus" {
            prometheus_queries += 1;
            for name in metric_names(query) {
                if !served.contains(name.as_str()) {
                    problems.push(format!("metric {name} (in {query}) is not served"));
                }
            }
        }
        if uid == "prometheus" || uid == "legend" {
            for label in label_names(query) {
                let known = scraped.contains(&format!("{label}=\""))
                    || from_collector.contains(&label)
                    || ["job", "instance", "le"].contains(&label.as_str());
                if !known {
                    problems.push(format!(
                        "label {label} (in {query}) comes neither from gpuspan nor from the collector"
                    ));
                }
            }
        }
    }
    assert!(prometheus_queries >= 5, "{queries:?}");

    let spans = receiver.wait_for_spans(
        |spans| {
            ["epoch", "step"]
                .iter()
                .all(|n| spans.iter().any(|s| s.name == *n))
        },
        Duration::from_secs(10),
    );
    let named = |name: &str| {
        spans
            .iter()
            .find(|s| s.name == name)
            .unwrap_or_else(|| panic!("no {name} span reached the receiver"))
    };
    let (epoch, step) = (named("epoch"), named("step"));
    let traceql: Vec<&String> = queries
        .iter()
        .filter(|(uid, _)| uid == "tempo")
        .map(|(_, q)| q)
        .collect();
    assert!(!traceql.is_empty(), "no Tempo query in the dashboard");
    for query in traceql {
        for part in query.split("span.").skip(1) {
            let attribute: String = part
                .chars()
                .take_while(|&c| identifier(c) || c == '.')
                .collect();
            if epoch.int_attr(&attribute).is_none() && step.int_attr(&attribute).is_none() {
                problems.push(format!(
                    "span attribute {attribute} is on no epoch or step span"
                ));
            }
        }
        if query.contains("resource.ml.run.id") && epoch.resource_str_attr("ml.run.id").is_none() {
            problems.push("the spans have no ml.run.id resource attribute".into());
        }
    }
    assert!(
        problems.is_empty(),
        "{}\n\ngpuspan serves:\n{scraped}",
        problems.join("\n")
    );
}
