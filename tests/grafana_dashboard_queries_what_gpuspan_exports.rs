// A test binary of its own: it sets variables every build in the process reads.
//! The Grafana dashboard in collector/ asks for what gpuspan really exports: every metric
//! its PromQL names is served by gpuspan's Prometheus endpoint (the names the collector's
//! Prometheus exporter gives the same OTLP metrics), every label it uses comes from gpuspan
//! or from the collector's transform, and every span attribute its TraceQL selects is on
//! gpuspan's epoch or step spans. A real Prometheus (Debian's), scraping gpuspan on a GPU
//! split into MIG instances, answers the dashboard's own per-device queries with one line
//! per device, each named as gpuspan names it and with its own figures.

use gpuspan_test_support as support;

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::Duration;

use gpuspan::Telemetry;

use gpuspan::settings::Exporter;

use gpuspan::source::GpuId;
use serde_json::Value;
use support::fake_nvml::FakeNvml;
use support::prometheus_server::{value, Prometheus};
use support::receiver::Receiver;
use support::sampling::wait_for_ticks;
use support::scripted::scripted_ids;

const MB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;
/// The metrics a dashboard query draws one line per device from.
const PER_DEVICE: [&str; 3] = [
    "hw_gpu_memory_usage_bytes",
    "hw_gpu_memory_limit_bytes",
    "gpu_memory_peak_bytes",
];

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

/// (PromQL, legend format) of every Prometheus panel target.
fn prometheus_targets(dashboard: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().into_iter().flatten() {
            if let Some(expr) = target["expr"].as_str() {
                let legend = target["legendFormat"].as_str().unwrap_or_default();
                out.push((expr.to_string(), legend.to_string()));
            }
        }
    }
    out
}

/// A legend as Grafana renders it for one series: `{{label}}` becomes the label's value,
/// or nothing when the series has no such label.
fn render_legend(legend: &str, labels: &Value) -> String {
    let mut out = String::new();
    let mut rest = legend;
    while let Some((before, after)) = rest.split_once("{{") {
        out.push_str(before);
        let (label, tail) = after.split_once("}}").unwrap_or((after, ""));
        out.push_str(labels[label.trim()].as_str().unwrap_or_default());
        rest = tail;
    }
    out.push_str(rest);
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

/// The arguments of every call of `function` in a PromQL query, split at the commas of
/// that call (not of calls nested in it), trimmed.
fn call_arguments(promql: &str, function: &str) -> Vec<Vec<String>> {
    let mut calls = Vec::new();
    for (start, _) in promql.match_indices(&format!("{function}(")) {
        let mut arguments = vec![String::new()];
        let (mut depth, mut quoted) = (0, false);
        for c in promql[start + function.len() + 1..].chars() {
            match c {
                '"' => quoted = !quoted,
                '(' | '{' | '[' if !quoted => depth += 1,
                ')' | '}' | ']' if !quoted && depth == 0 => break,
                ')' | '}' | ']' if !quoted => depth -= 1,
                ',' if !quoted && depth == 0 => {
                    arguments.push(String::new());
                    continue;
                }
                _ => {}
            }
            arguments.last_mut().unwrap().push(c);
        }
        calls.push(arguments.iter().map(|a| a.trim().to_string()).collect());
    }
    calls
}

/// (labels the query makes, labels it reads) through `label_join(v, dst, sep, src...)` and
/// `label_replace(v, dst, replacement, src, regex)`.
fn label_functions(promql: &str) -> (BTreeSet<String>, BTreeSet<String>) {
    let unquote = |a: &String| a.trim_matches('"').to_string();
    let (mut made, mut read) = (BTreeSet::new(), BTreeSet::new());
    for arguments in call_arguments(promql, "label_join") {
        made.extend(arguments.get(1).map(unquote));
        read.extend(arguments.iter().skip(3).map(unquote));
    }
    for arguments in call_arguments(promql, "label_replace") {
        made.extend(arguments.get(1).map(unquote));
        read.extend(arguments.get(3).map(unquote));
    }
    read.retain(|label| !made.contains(label));
    (made, read)
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
    // A whole GPU and a MIG instance, so every label of either kind is served.
    let (source, script) = scripted_ids(&[GpuId::gpu(0), GpuId::mig(1, 0)], 500 * MB);
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
    let made_by_dashboard: BTreeSet<String> = queries
        .iter()
        .flat_map(|(_, query)| label_functions(query).0)
        .collect();
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
            let mut labels = label_names(query);
            labels.extend(label_functions(query).1);
            for label in labels {
                let known = scraped.contains(&format!("{label}=\""))
                    || from_collector.contains(&label)
                    || made_by_dashboard.contains(&label)
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

/// GPU 0 split into two MIG instances of 16 GiB, GPU 1 whole: the dashboard's per-device
/// panels draw three lines, `gpu 0.mig0`, `gpu 0.mig1` and `gpu 1`, never the parent's, and
/// the share of the limit is each instance's own.
#[test]
fn every_device_and_every_mig_instance_gets_a_line_of_its_own() {
    let fake = FakeNvml::build();
    fake.set_device_count(2);
    // The parent's figures count both instances again: never a line of their own.
    fake.set_memory(0, 60 * GIB, 141 * GIB);
    fake.set_memory(1, 5 * GIB, 141 * GIB);
    fake.set_mig(0, 2, 16 * GIB);
    let slots = [fake.mig_slot(0, 0), fake.mig_slot(0, 1)];
    fake.set_memory(slots[0], 2 * GIB, 16 * GIB);
    fake.set_memory(slots[1], 3 * GIB, 16 * GIB);

    let builder = Telemetry::builder()
        .nvml_lib(fake.path())
        .sample_interval(Duration::from_millis(2))
        .traces_exporter(Exporter::None)
        .metrics_exporter(Exporter::None)
        .run_id("dashboard-run")
        .summary(false)
        .prometheus_addr("127.0.0.1:0".parse().unwrap());
    let telemetry = temp_env::with_vars(
        [
            ("GPUSPAN_DEVICES", None::<&str>),
            ("CUDA_VISIBLE_DEVICES", None),
        ],
        || builder.build(),
    )
    .expect("gpuspan builds");
    // Instance 1 spikes to 12 GiB and falls back before Prometheus's first scrape.
    wait_for_ticks(&fake, 3, 2);
    fake.set_memory(slots[1], 12 * GIB, 16 * GIB);
    wait_for_ticks(&fake, 3, 2);
    fake.set_memory(slots[1], 3 * GIB, 16 * GIB);
    wait_for_ticks(&fake, 3, 2);

    let target = telemetry.prometheus_addr().expect("the endpoint is up");
    let dir = tempfile::tempdir().unwrap();
    // The collector's transform labels every series with the run's `ml.run.id`; here
    // Prometheus adds the same label to what it scrapes.
    let run_label = [("ml_run_id", "dashboard-run")];
    let mut prometheus =
        Prometheus::scraping(target, Duration::from_secs(1), &run_label, dir.path());
    prometheus.wait_for_series(
        "hw_gpu_memory_usage_bytes for the two instances and GPU 1",
        "hw_gpu_memory_usage_bytes",
        3,
    );
    // The spike is in the first scrape's peak window; from the second on, the latest
    // window's peak is the memory now.
    prometheus.wait_for_series("a second scrape", "count_over_time(up[10m]) >= 2", 1);

    let gib = |n: u64| (n * GIB) as f64;
    let mut checked = 0;
    for (expr, legend) in prometheus_targets(&dashboard()) {
        if !PER_DEVICE.iter().any(|metric| expr.contains(metric)) {
            continue;
        }
        let promql = expr
            .replace("$run", "dashboard-run")
            .replace("$__range", "10m");
        let series = prometheus.wait_for_series(&format!("three series for {promql}"), &promql, 3);
        let expected: [f64; 3] = if expr.contains(" / ") {
            [2.0 / 16.0, 12.0 / 16.0, 5.0 / 141.0]
        } else if expr.contains("hw_gpu_memory_limit_bytes") {
            [gib(16), gib(16), gib(141)]
        } else {
            // The usage now, and the peak of the latest scrape's window.
            [gib(2), gib(3), gib(5)]
        };
        let mut lines: Vec<(String, String, f64)> = series
            .iter()
            .map(|s| {
                let device = s["metric"]["gpu"].as_str().unwrap_or("(none)").to_string();
                (device, render_legend(&legend, &s["metric"]), value(s))
            })
            .collect();
        lines.sort_by(|a, b| a.0.cmp(&b.0));
        let devices: Vec<&str> = lines.iter().map(|(d, _, _)| d.as_str()).collect();
        assert_eq!(devices, ["0.mig0", "0.mig1", "1"], "{promql}: {series:?}");
        let legends: BTreeSet<&String> = lines.iter().map(|(_, l, _)| l).collect();
        assert_eq!(legends.len(), 3, "{promql}: legends {lines:?}");
        for ((device, rendered, got), want) in lines.iter().zip(expected) {
            assert!(
                rendered.contains(&format!("gpu {device}")),
                "{promql}: legend {rendered:?} does not name gpu {device}"
            );
            assert_eq!(*got, want, "{promql}: gpu {device}");
        }
        checked += 1;
    }
    assert_eq!(checked, 5, "the dashboard's per-device queries");

    drop(prometheus);
    telemetry.shutdown().unwrap();
}
