//! `gpuspan run -- <command>`: a collector on a free local port around one command, and a
//! `run` span over the command with its exit status and its process tree's GPU memory.

use std::ffi::OsString;
use std::io::Read;
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, SystemTime};

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::{AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use opentelemetry_proto::tonic::trace::v1::status::StatusCode;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span, Status};

use super::enrich::Enriched;
use super::job::Job;
use super::{CollectError, CollectStats, Collector};
use crate::signals::forward;
use gpuspan::names::{attribute as attr, span as span_name};
use gpuspan::Protocol;

/// How a command run under the collector ended.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RunOutcome {
    /// The exit code to return: the command's own, or 128 + the signal that ended it.
    pub exit_code: i32,
    /// What the collector did.
    pub stats: CollectStats,
    /// A few lines for the terminal: duration, exit status, GPU memory, spans.
    pub summary: String,
}

/// Runs `command` (program and arguments) with a collector on a free local port, then
/// forwards its spans and a `run` span over it; see docs/collect.md, "Other programs' spans".
///
/// The child gets `OTEL_EXPORTER_OTLP_ENDPOINT` and `OTEL_EXPORTER_OTLP_PROTOCOL` (both
/// protocols are answered on the one port), `OTEL_SERVICE_NAME` from the command where
/// unset, and `TRACEPARENT` naming the `run` span.
///
/// The command runs as a shell with job control runs a job: in a process group of its own,
/// which gets the terminal while it runs when an interactive shell started gpuspan as a job
/// in the foreground (gpuspan leads its group, and that group holds the terminal). A Ctrl-C
/// typed at the terminal then reaches the command's group directly; SIGHUP, SIGINT, SIGQUIT
/// and SIGTERM sent to gpuspan, to its pid or to its whole group (a shell hangs up its jobs
/// so when its terminal closes), are passed on to the command's group. Either way each process there gets the signal once. A Ctrl-Z stops the
/// command and then gpuspan's own group (so the shell sees its job stopped); continuing
/// gpuspan continues the command. Once the command has ended, the four signals have again
/// the dispositions they had before the call (by default, they end the process).
///
/// # Errors
/// The collector could not start, or the command could not be started.
pub fn run(command: &[OsString], protocol: Protocol) -> Result<RunOutcome, CollectError> {
    let Some(program) = command.first() else {
        return Err(CollectError::NoCommand);
    };
    let bootstrap_python = gpuspan::settings::torch()?;
    let loopback: SocketAddr = ([127, 0, 0, 1], 0).into();
    let collector = Collector::builder()
        .grpc_addr(Some(loopback))
        .http_addr(None)
        .service_name("gpuspan-run")
        .start()?;
    let addr = collector.grpc_addr().unwrap_or(loopback);
    let service =
        gpuspan::settings::service_name_variable().unwrap_or_else(|| service_from(command));
    let ids = random_ids();
    let (trace_id, span_id) = (ids[..16].to_vec(), ids[16..24].to_vec());

    let mut child = std::process::Command::new(program);
    child.args(&command[1..]);
    for signal in ["TRACES", "METRICS", "LOGS"] {
        child.env_remove(format!("OTEL_EXPORTER_OTLP_{signal}_ENDPOINT"));
        child.env_remove(format!("OTEL_EXPORTER_OTLP_{signal}_PROTOCOL"));
    }
    child
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", format!("http://{addr}"))
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", protocol.as_str())
        .env("OTEL_SERVICE_NAME", &service)
        .env(
            "TRACEPARENT",
            format!("00-{}-{}-01", hex(&trace_id), hex(&span_id)),
        );
    // A Python command that imports torch gets step spans (see `bootstrap`), unless
    // GPUSPAN_TORCH turns that off; the ranks it starts share one job id.
    let bootstrap = if bootstrap_python {
        let bootstrap = super::bootstrap::Bootstrap::write().map_err(CollectError::Bootstrap)?;
        child.env(
            "PYTHONPATH",
            bootstrap.python_path(std::env::var_os("PYTHONPATH")),
        );
        Some(bootstrap)
    } else {
        None
    };
    if gpuspan::settings::job_id_variable().is_none() {
        child.env(gpuspan::settings::GPUSPAN_JOB_ID, collector.run_id());
    }
    if std::env::var_os("OTEL_EXPERIMENTAL_RESOURCE_DETECTORS").is_none() {
        // The Python SDK reports `process.pid` only with its process detector; the pid
        // is what `gpu.process.memory.*` is looked up by.
        child.env("OTEL_EXPERIMENTAL_RESOURCE_DETECTORS", "otel,process");
    }
    // Caught before the command exists, so a signal sent as soon as it starts is passed on
    // rather than ending gpuspan.
    let catching = forward::Catching::start().ok();
    let start = unix_now();
    let mut job = Job::start(&mut child).map_err(|source| CollectError::Command {
        program: program.to_string_lossy().into_owned(),
        source,
    })?;
    let pid = job.pid();
    collector.timelines().follow_tree(pid);
    let target = catching
        .as_ref()
        .map(|catching| catching.forward_to(pid as libc::pid_t));
    let ended = job.wait_for_end();
    let end = unix_now();
    // While the command is not yet collected, its group's id cannot be reused: the terminal
    // goes back to gpuspan's group, then the signals to the course they had, so a Ctrl-C
    // during the drain below is gpuspan's (by default, it ends it).
    job.take_back();
    drop(target);
    drop(catching);
    let status = ended.and_then(|()| job.reap());
    drop(bootstrap);
    let (exit_code, how) = match &status {
        Ok(status) => exit_of(status),
        Err(e) => (1, format!("could not be waited for ({e})")),
    };

    // Let the sampler pass the end, so the last interval is in the peak.
    let interval = collector.timelines().interval;
    for _ in 0..4 {
        if collector.timelines().latest().is_some_and(|l| l >= end) {
            break;
        }
        std::thread::sleep(interval);
    }
    let tree = collector.timelines().take_tree();
    let mut attributes = vec![
        string(attr::PROCESS_COMMAND_LINE, &command_line(command)),
        int(attr::PROCESS_PID, i64::from(pid)),
        int(attr::PROCESS_EXIT_CODE, i64::from(exit_code)),
    ];
    if let Some(tree) = &tree {
        for (key, value) in [
            (attr::GPU_PROCESS_MEMORY_START, tree.start),
            (attr::GPU_PROCESS_MEMORY_END, tree.end),
            (attr::GPU_PROCESS_MEMORY_PEAK, tree.peak),
        ] {
            if let Some(v) = value {
                attributes.push(int(key, i64::try_from(v).unwrap_or(i64::MAX)));
            }
        }
        if tree.start.or(tree.peak).or(tree.end).is_some() {
            // Recorded at every tick, from lists that may run on a slower cadence.
            let tick = u64::try_from(interval.as_nanos()).unwrap_or(u64::MAX);
            let resolution = collector.timelines().process_resolution_ns(tick);
            let resolution = i64::try_from(resolution).unwrap_or(i64::MAX);
            attributes.push(int(attr::GPU_PROCESS_MEMORY_RESOLUTION, resolution));
        }
        debug_assert_eq!(tree.root(), pid);
    }
    let mut span = Span {
        trace_id,
        span_id,
        name: span_name::RUN.into(),
        kind: SpanKind::Internal as i32,
        start_time_unix_nano: start,
        end_time_unix_nano: end,
        attributes,
        status: Some(Status {
            message: if exit_code == 0 {
                String::new()
            } else {
                how.clone()
            },
            code: if exit_code == 0 {
                StatusCode::Unset
            } else {
                StatusCode::Error
            } as i32,
        }),
        ..Default::default()
    };
    let mut counts = Enriched::default();
    collector
        .enricher()
        .span(&mut span, None, collector.timelines(), &mut counts);
    let memory = describe_memory(&span);
    collector.queue_ready(ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(Resource {
                attributes: vec![
                    string(attr::SERVICE_NAME, &service),
                    int(attr::PROCESS_PID, i64::from(pid)),
                ],
                ..Default::default()
            }),
            scope_spans: vec![ScopeSpans {
                scope: Some(InstrumentationScope {
                    name: "gpuspan".into(),
                    version: env!("CARGO_PKG_VERSION").into(),
                    ..Default::default()
                }),
                spans: vec![span],
                ..Default::default()
            }],
            ..Default::default()
        }],
    });
    let forward_to = collector.forward_to().to_owned();
    let stats = collector.shutdown(Duration::from_secs(10));
    let seconds = end.saturating_sub(start) as f64 / 1e9;
    let mut summary = format!(
        "gpuspan run: {} {how} after {seconds:.1} s\n",
        command_line(command)
    );
    summary.push_str(&memory);
    if let Some(tree) = &tree {
        if let (Some(s), Some(p), Some(e)) = (tree.start, tree.peak, tree.end) {
            summary.push_str(&format!(
                "  process tree GPU memory: start {}, peak {}, end {}\n",
                mib(s),
                mib(p),
                mib(e)
            ));
        }
    }
    summary.push_str(&format!(
        "  spans: {} received, {} given GPU memory, {} passed unchanged, {} forwarded to {forward_to}",
        stats.spans_received, stats.spans_enriched, stats.spans_passed, stats.spans_forwarded
    ));
    if stats.spans_dropped > 0 {
        summary.push_str(&format!(", {} dropped", stats.spans_dropped));
    }
    if stats.requests_rejected > 0 {
        summary.push_str(&format!(", {} requests rejected", stats.requests_rejected));
    }
    if stats.requests_refused > 0 {
        summary.push_str(&format!(
            ", {} requests refused while the forward queue was full (their senders retry them)",
            stats.requests_refused
        ));
    }
    summary.push('\n');
    Ok(RunOutcome {
        exit_code,
        stats,
        summary,
    })
}

fn exit_of(status: &std::process::ExitStatus) -> (i32, String) {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => (code, format!("exited with code {code}")),
        (None, Some(signal)) => (128 + signal, format!("was ended by signal {signal}")),
        _ => (1, "ended".into()),
    }
}

/// A service name from the command: the script of `python train.py` or `python -m pkg`,
/// else the program's file name.
fn service_from(command: &[OsString]) -> String {
    let name = |s: &OsString| {
        Path::new(s).file_stem().map_or_else(
            || s.to_string_lossy().into_owned(),
            |n| n.to_string_lossy().into_owned(),
        )
    };
    let program = name(&command[0]);
    if program.starts_with("python") {
        let mut args = command[1..].iter();
        while let Some(arg) = args.next() {
            let text = arg.to_string_lossy();
            if text == "-m" {
                if let Some(module) = args.next() {
                    return module.to_string_lossy().into_owned();
                }
            } else if !text.starts_with('-') {
                return name(arg);
            }
        }
    }
    program
}

fn command_line(command: &[OsString]) -> String {
    command
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}

fn describe_memory(span: &Span) -> String {
    let get = |key: &str| super::enrich::int_attribute(&span.attributes, key);
    match (
        get(attr::GPU_MEMORY_START),
        get(attr::GPU_MEMORY_PEAK),
        get(attr::GPU_MEMORY_END),
    ) {
        (Some(s), Some(p), Some(e)) => format!(
            "  GPU memory (all devices): start {}, peak {}, end {}\n",
            mib(s as u64),
            mib(p as u64),
            mib(e as u64)
        ),
        _ => "  GPU memory: not measured (no GPU source)\n".into(),
    }
}

fn mib(bytes: u64) -> String {
    crate::util::mib(bytes as f64, 0)
}

fn unix_now() -> u64 {
    gpuspan::pipeline::unix_nanos(SystemTime::now())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// 24 random bytes for the trace and span ids (never all zero, which is invalid).
fn random_ids() -> [u8; 24] {
    let mut bytes = [0u8; 24];
    let read = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut bytes));
    if read.is_err() || bytes[..16].iter().all(|&b| b == 0) || bytes[16..].iter().all(|&b| b == 0) {
        use std::hash::{BuildHasher, Hasher};
        for chunk in bytes.chunks_mut(8) {
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u128(unix_now() as u128);
            let v = h.finish() | 1;
            chunk.copy_from_slice(&v.to_le_bytes()[..chunk.len()]);
        }
    }
    bytes
}

fn int(key: &str, value: i64) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue {
            value: Some(Value::IntValue(value)),
        }),
        ..Default::default()
    }
}

fn string(key: &str, value: &str) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue {
            value: Some(Value::StringValue(value.into())),
        }),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(args: &[&str]) -> Vec<OsString> {
        args.iter().map(OsString::from).collect()
    }

    #[test]
    fn the_service_name_comes_from_the_script_or_program() {
        assert_eq!(service_from(&os(&["python", "-u", "train.py"])), "train");
        assert_eq!(
            service_from(&os(&["python3", "-m", "torch.distributed.run"])),
            "torch.distributed.run"
        );
        assert_eq!(
            service_from(&os(&["/usr/bin/torchrun", "x.py"])),
            "torchrun"
        );
    }
}
