//! Parses what rotel prints with `--debug-log traces --debug-log metrics
//! --debug-log-verbosity detailed`: the collector debug exporter's text layout.
//!
//! ```text
//! ResourceSpans #0
//! Resource attributes:
//!      -> service.name: Str(train-example)
//! ScopeSpans #0
//! Span #0
//!     Trace ID       : 29829c4bfecf3df2b99004d009de68d1
//!     Parent ID      : aac13d8bd510b8be
//!     ID             : f8eadb40693ec56d
//!     Name           : step
//! Attributes:
//!      -> gpu.memory.peak: Int(3145728000)
//! ResourceMetrics #0
//! Metric #0
//! Descriptor:
//!      -> Name: hw.gpu.memory.usage
//!      -> Unit: By
//! NumberDataPoints #0
//! Data point attributes:
//!      -> hw.id: Str(GPU-00000000-0000-0000-0000-000000000000)
//! Value: 3145728000
//! ```
//!
//! Attribute values are kept as printed (`Int(5)`, `Str(x)`, `Double(0.1)`), so a test can
//! tell an integer from a float or a string.

use std::collections::BTreeMap;

/// A span as printed.
#[derive(Debug, Default, Clone)]
pub struct DebugSpan {
    pub trace_id: String,
    pub span_id: String,
    /// Empty for a root span.
    pub parent_id: String,
    pub name: String,
    pub attributes: BTreeMap<String, String>,
    pub resource: BTreeMap<String, String>,
}

impl DebugSpan {
    /// The value of an `Int(..)` attribute; `None` if absent or of another type.
    pub fn int_attr(&self, key: &str) -> Option<i64> {
        int_value(self.attributes.get(key)?)
    }
}

/// A metric data point as printed, with its metric's descriptor.
#[derive(Debug, Default, Clone)]
pub struct DebugPoint {
    pub metric: String,
    pub unit: String,
    pub attributes: BTreeMap<String, String>,
    /// `Value:` of a number point, as printed.
    pub value: String,
}

/// `Int(42)` as 42.
pub fn int_value(printed: &str) -> Option<i64> {
    printed
        .strip_prefix("Int(")?
        .strip_suffix(')')?
        .parse()
        .ok()
}

#[derive(Clone, Copy, PartialEq)]
enum Section {
    None,
    Resource,
    SpanAttributes,
    Descriptor,
    PointAttributes,
}

/// Everything rotel printed: spans and number data points.
#[derive(Debug, Default)]
pub struct DebugOutput {
    pub spans: Vec<DebugSpan>,
    pub points: Vec<DebugPoint>,
}

impl DebugOutput {
    /// Parses rotel's output (ANSI colours already removed).
    pub fn parse(text: &str) -> DebugOutput {
        let mut out = DebugOutput::default();
        let mut section = Section::None;
        let mut resource = BTreeMap::new();
        // The descriptor of the metric being read: (name, unit, data type).
        let mut metric = (String::new(), String::new());
        let mut in_span = false;
        let mut in_point = false;

        for line in text.lines() {
            let trimmed = line.trim();
            if let Some(kv) = trimmed.strip_prefix("-> ") {
                let Some((key, value)) = kv.split_once(": ") else {
                    continue;
                };
                let (key, value) = (key.to_string(), value.to_string());
                match section {
                    Section::Resource => {
                        resource.insert(key, value);
                    }
                    Section::SpanAttributes if in_span => {
                        if let Some(span) = out.spans.last_mut() {
                            span.attributes.insert(key, value);
                        }
                    }
                    Section::Descriptor => match key.as_str() {
                        "Name" => metric.0 = value,
                        "Unit" => metric.1 = value,
                        _ => {}
                    },
                    Section::PointAttributes if in_point => {
                        if let Some(point) = out.points.last_mut() {
                            point.attributes.insert(key, value);
                        }
                    }
                    _ => {}
                }
                continue;
            }
            section = Section::None;
            if trimmed.starts_with("ResourceSpans #") || trimmed.starts_with("ResourceMetrics #") {
                resource = BTreeMap::new();
                in_span = false;
                in_point = false;
            } else if trimmed == "Resource attributes:" {
                section = Section::Resource;
            } else if trimmed.starts_with("Span #") {
                in_span = true;
                in_point = false;
                out.spans.push(DebugSpan {
                    resource: resource.clone(),
                    ..DebugSpan::default()
                });
            } else if trimmed.starts_with("Events:")
                || trimmed.starts_with("Links:")
                || trimmed.starts_with("SpanEvent #")
                || trimmed.starts_with("SpanLink #")
            {
                // What follows belongs to an event or link, not to the span.
                in_span = false;
            } else if trimmed == "Attributes:" && in_span {
                section = Section::SpanAttributes;
            } else if trimmed.starts_with("Metric #") {
                in_span = false;
                in_point = false;
                metric = (String::new(), String::new());
            } else if trimmed == "Descriptor:" {
                section = Section::Descriptor;
            } else if trimmed.starts_with("NumberDataPoints #") {
                in_point = true;
                out.points.push(DebugPoint {
                    metric: metric.0.clone(),
                    unit: metric.1.clone(),
                    ..DebugPoint::default()
                });
            } else if trimmed.starts_with("HistogramDataPoints #")
                || trimmed.starts_with("ExponentialHistogramDataPoints #")
                || trimmed.starts_with("SummaryDataPoints #")
            {
                in_point = false;
            } else if trimmed == "Data point attributes:" && in_point {
                section = Section::PointAttributes;
            } else if let Some(value) = trimmed.strip_prefix("Value: ") {
                if in_point {
                    if let Some(point) = out.points.last_mut() {
                        point.value = value.to_string();
                    }
                }
            } else if in_span {
                if let Some((field, value)) = trimmed.split_once(':') {
                    let span = out.spans.last_mut().expect("in a span");
                    let value = value.trim().to_string();
                    match field.trim() {
                        "Trace ID" => span.trace_id = value,
                        "Parent ID" => span.parent_id = value,
                        "ID" => span.span_id = value,
                        "Name" => span.name = value,
                        _ => {}
                    }
                }
            }
        }
        out
    }

    /// The spans named `name`.
    pub fn spans_named(&self, name: &str) -> Vec<&DebugSpan> {
        self.spans.iter().filter(|s| s.name == name).collect()
    }

    /// The number data points of the metric `name`.
    pub fn points_named(&self, name: &str) -> Vec<&DebugPoint> {
        self.points.iter().filter(|p| p.metric == name).collect()
    }
}
