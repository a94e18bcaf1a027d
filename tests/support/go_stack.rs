//! The Go programs of the end-to-end tests: an OpenTelemetry Collector running
//! collector/otelcol.yaml (with overlays) and Jaeger v2, both built by
//! `tests/collectors/build-go.sh` once per test process, started on free loopback ports, and
//! stopped when their guards drop.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::http::get;
use crate::jaeger_api::{self, JaegerSpan};
use crate::prometheus_text::{self, Sample};
use crate::receiver::Receiver;
use crate::servers::{accepts, free_port, Server};

const BUILD_SCRIPT: &str = "tests/collectors/build-go.sh";

/// The example configurations as users run them (file names in collector/, overlays after
/// the configuration they extend): collector/otelcol.yaml alone and with its overlays, and
/// a node's agent and the gateway.
pub const EXAMPLE_CONFIGURATIONS: &[&[&str]] = &[
    &["otelcol.yaml"],
    &["otelcol.yaml", "otelcol.mlflow.yaml"],
    &["otelcol.yaml", "otelcol.weave.yaml"],
    &["otelcol.yaml", "otelcol.mlflow.yaml", "otelcol.weave.yaml"],
    &["agent.yaml"],
    &["gateway.yaml"],
];

/// The built programs.
#[derive(Debug)]
pub struct GoTools {
    /// The collector with the example configuration's components.
    pub otelcol: PathBuf,
    /// Jaeger v2.
    pub jaeger: PathBuf,
}

/// The repository root.
pub fn repo() -> &'static Path {
    crate::repo_root()
}

/// Runs the build script (once per process) and returns where the programs are. Panics,
/// naming the script, when it fails: a missing program fails its test, it never skips it.
pub fn go_tools() -> &'static GoTools {
    static TOOLS: OnceLock<GoTools> = OnceLock::new();
    TOOLS.get_or_init(|| {
        let started = Instant::now();
        let output = Command::new("bash")
            .arg(repo().join(BUILD_SCRIPT))
            .current_dir(repo())
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("running {BUILD_SCRIPT} with bash: {e}"));
        assert!(
            output.status.success(),
            "{BUILD_SCRIPT} failed ({}), so the collector or Jaeger is not built; run it by \
             hand to see why:\n{}{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        let took = started.elapsed();
        if took > Duration::from_secs(2) {
            eprintln!("{BUILD_SCRIPT} took {:.1} s", took.as_secs_f64());
        }
        let bin = std::env::var_os("COLLECTORS_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| repo().join("target/collectors"))
            .join("bin");
        let tool = |name: &str| {
            let path = bin.join(name);
            assert!(
                path.exists(),
                "{BUILD_SCRIPT} succeeded but left no {}",
                path.display()
            );
            path
        };
        GoTools {
            otelcol: tool("otelcol-gpuspan"),
            jaeger: tool("jaeger"),
        }
    })
}

fn loopback(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// Jaeger v2 with in-memory storage (tests/collectors/jaeger.yaml): OTLP/gRPC in, the query
/// API out.
pub struct Jaeger {
    server: Server,
    otlp_grpc: u16,
    query: SocketAddr,
}

impl Jaeger {
    /// Starts Jaeger on free ports, its log in `dir`, and waits until both ports accept.
    pub fn start(dir: &Path) -> Jaeger {
        let (otlp_grpc, query_http, query_grpc) = (free_port(), free_port(), free_port());
        let mut command = Command::new(&go_tools().jaeger);
        command
            .arg("--config")
            .arg(repo().join("tests/collectors/jaeger.yaml"))
            .env("JAEGER_OTLP_GRPC_PORT", otlp_grpc.to_string())
            .env("JAEGER_QUERY_HTTP_PORT", query_http.to_string())
            .env("JAEGER_QUERY_GRPC_PORT", query_grpc.to_string());
        let mut server = Server::start("jaeger", command, &dir.join("jaeger.log"));
        let query = loopback(query_http);
        server.wait_for("OTLP and query ports", Duration::from_secs(60), |_| {
            (accepts(loopback(otlp_grpc))
                && get(query, "/api/services").is_ok_and(|r| r.status == 200))
            .then_some(())
        });
        Jaeger {
            server,
            otlp_grpc,
            query,
        }
    }

    /// Where an OTLP/gRPC exporter sends: `127.0.0.1:PORT`.
    pub fn otlp_endpoint(&self) -> String {
        loopback(self.otlp_grpc).to_string()
    }

    /// Every span Jaeger holds for `service`, read from its query API.
    pub fn spans(&self, service: &str) -> Vec<JaegerSpan> {
        jaeger_api::spans(self.query, service).unwrap_or_default()
    }

    /// Polls [`Jaeger::spans`] until `done` holds, for at most `timeout`, and returns the spans
    /// of the last poll either way: assert on them to get a readable failure.
    pub fn wait_for_spans(
        &mut self,
        service: &str,
        timeout: Duration,
        done: impl Fn(&[JaegerSpan]) -> bool,
    ) -> Vec<JaegerSpan> {
        let deadline = Instant::now() + timeout;
        loop {
            let spans = self.spans(service);
            if done(&spans) || Instant::now() > deadline {
                return spans;
            }
            self.server.assert_running();
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// The last lines of Jaeger's log, for failure messages.
    pub fn log_tail(&self) -> String {
        self.server.output_tail()
    }
}

/// The ports the collector listens on; kept across a restart.
#[derive(Debug, Clone, Copy)]
pub struct CollectorPorts {
    pub otlp_grpc: u16,
    pub otlp_http: u16,
    pub prometheus: u16,
    pub health: u16,
}

impl CollectorPorts {
    /// Four ports that were free a moment ago.
    pub fn free() -> CollectorPorts {
        CollectorPorts {
            otlp_grpc: free_port(),
            otlp_http: free_port(),
            prometheus: free_port(),
            health: free_port(),
        }
    }
}

/// The collector running the example configuration, its listen addresses and backends set
/// through the variables that collector/otelcol.yaml reads.
pub struct Collector {
    /// `None` between [`Collector::stop`] and [`Collector::restart`].
    server: Option<Server>,
    ports: CollectorPorts,
    args: Vec<String>,
    env: Vec<(String, String)>,
    log_dir: PathBuf,
    starts: usize,
}

impl Collector {
    /// Starts the collector with `configs` (file names in collector/, the first one
    /// `otelcol.yaml`), `jaeger_endpoint` and `tempo_endpoint` as its trace backends, and
    /// `env` for the overlays; waits until its health check answers 200.
    pub fn start(
        dir: &Path,
        configs: &[&str],
        jaeger_endpoint: &str,
        tempo_endpoint: &str,
        env: &[(&str, &str)],
    ) -> Collector {
        let ports = CollectorPorts::free();
        let mut all_env: Vec<(String, String)> = vec![
            (
                "OTLP_GRPC_LISTEN".into(),
                loopback(ports.otlp_grpc).to_string(),
            ),
            (
                "OTLP_HTTP_LISTEN".into(),
                loopback(ports.otlp_http).to_string(),
            ),
            (
                "PROMETHEUS_LISTEN".into(),
                loopback(ports.prometheus).to_string(),
            ),
            (
                "HEALTH_CHECK_LISTEN".into(),
                loopback(ports.health).to_string(),
            ),
            ("JAEGER_ENDPOINT".into(), jaeger_endpoint.into()),
            ("TEMPO_ENDPOINT".into(), tempo_endpoint.into()),
        ];
        all_env.extend(env.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        Self::start_with(dir, configs, ports, all_env)
    }

    /// Starts the collector as [`Collector::start`] does, with two OTLP receivers standing
    /// in for its trace backends.
    pub fn start_to_receivers(
        dir: &Path,
        configs: &[&str],
        jaeger: &Receiver,
        tempo: &Receiver,
        env: &[(&str, &str)],
    ) -> Collector {
        let jaeger = host_port(jaeger);
        Self::start(dir, configs, &jaeger, &host_port(tempo), env)
    }

    /// Starts the collector with `configs` (file names in collector/) on `ports`, with `env`
    /// naming them as those configurations read them; waits until its health check (on
    /// `ports.health`) answers 200.
    pub fn start_with(
        dir: &Path,
        configs: &[&str],
        ports: CollectorPorts,
        env: Vec<(String, String)>,
    ) -> Collector {
        // The collector's own metrics would listen on :8888, shared by every test at once.
        let mut args = vec!["--set=service.telemetry.metrics.level=none".to_string()];
        for config in configs_in_repo(configs) {
            args.push(format!("--config={}", config.display()));
        }
        let server = Self::spawn(dir, &args, &env, 1);
        let mut collector = Collector {
            server: Some(server),
            ports,
            args,
            env,
            log_dir: dir.to_path_buf(),
            starts: 1,
        };
        collector.wait_until_healthy();
        collector
    }

    /// A gateway running collector/gateway.yaml on free ports, exporting traces to
    /// `jaeger` and `tempo` (`host:port`), its log under `dir/gateway`.
    pub fn start_gateway(dir: &Path, jaeger: &str, tempo: &str) -> Collector {
        let ports = CollectorPorts::free();
        Self::start_with(
            &log_dir(dir, "gateway"),
            &["gateway.yaml"],
            ports,
            named(&[
                ("GATEWAY_LISTEN", loopback(ports.otlp_grpc).to_string()),
                ("HEALTH_CHECK_LISTEN", loopback(ports.health).to_string()),
                ("PROMETHEUS_LISTEN", loopback(ports.prometheus).to_string()),
                ("JAEGER_ENDPOINT", jaeger.to_string()),
                ("TEMPO_ENDPOINT", tempo.to_string()),
            ]),
        )
    }

    /// A node's agent running collector/agent.yaml on free loopback ports, forwarding to
    /// `gateway` and naming processes that do not name themselves `node`; its log under
    /// `dir/agent-<node>`.
    pub fn start_agent(dir: &Path, gateway: &Collector, node: &str) -> Collector {
        let ports = CollectorPorts::free();
        Self::start_with(
            &log_dir(dir, &format!("agent-{node}")),
            &["agent.yaml"],
            ports,
            named(&[
                ("OTLP_GRPC_LISTEN", loopback(ports.otlp_grpc).to_string()),
                ("OTLP_HTTP_LISTEN", loopback(ports.otlp_http).to_string()),
                ("HEALTH_CHECK_LISTEN", loopback(ports.health).to_string()),
                (
                    "GATEWAY_ENDPOINT",
                    loopback(gateway.ports.otlp_grpc).to_string(),
                ),
                ("NODE_NAME", node.to_string()),
            ]),
        )
    }

    fn spawn(dir: &Path, args: &[String], env: &[(String, String)], start: usize) -> Server {
        let mut command = Command::new(&go_tools().otelcol);
        command.args(args);
        command.envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        Server::start(
            "otelcol-gpuspan",
            command,
            &dir.join(format!("otelcol-{start}.log")),
        )
    }

    fn running(&mut self) -> &mut Server {
        self.server
            .as_mut()
            .expect("the collector was stopped and not restarted")
    }

    fn wait_until_healthy(&mut self) {
        let health = loopback(self.ports.health);
        self.running()
            .wait_for("200 from its health check", Duration::from_secs(60), |_| {
                get(health, "/")
                    .ok()
                    .filter(|r| r.status == 200)
                    .map(|_| ())
            });
    }

    /// `http://127.0.0.1:PORT` of the OTLP receiver for `protocol` (`grpc` or
    /// `http/protobuf`), as `OTEL_EXPORTER_OTLP_ENDPOINT` takes it.
    pub fn otlp_endpoint(&self, protocol: &str) -> String {
        let port = if protocol == "grpc" {
            self.ports.otlp_grpc
        } else {
            self.ports.otlp_http
        };
        format!("http://{}", loopback(port))
    }

    /// Stops the collector (SIGTERM: it flushes what it accepted, as a restart would) and
    /// waits until it has exited; its ports are closed then.
    pub fn stop(&mut self) {
        if let Some(server) = self.server.take() {
            server.stop();
        }
        let ports = self.ports;
        for port in [ports.otlp_grpc, ports.otlp_http] {
            assert!(
                !accepts(loopback(port)),
                "port {port} still accepts after stop"
            );
        }
    }

    /// Starts the collector again on the same ports with the same configuration, and waits
    /// until it is healthy.
    pub fn restart(&mut self) {
        self.starts += 1;
        self.server = Some(Self::spawn(
            &self.log_dir,
            &self.args,
            &self.env,
            self.starts,
        ));
        self.wait_until_healthy();
    }

    /// The running collector's process id.
    pub fn pid(&self) -> u32 {
        self.server
            .as_ref()
            .expect("the collector was stopped and not restarted")
            .pid()
    }

    /// The samples the collector's Prometheus exporter serves now.
    pub fn scrape(&self) -> Vec<Sample> {
        let response = get(loopback(self.ports.prometheus), "/metrics")
            .unwrap_or_else(|e| panic!("scraping the collector's Prometheus exporter: {e}"));
        assert_eq!(response.status, 200, "{}", response.body);
        prometheus_text::parse(&response.body)
    }

    /// Polls [`Collector::scrape`] until `done` holds, for at most `timeout`, and returns the
    /// last scrape either way.
    pub fn wait_for_samples(
        &mut self,
        timeout: Duration,
        done: impl Fn(&[Sample]) -> bool,
    ) -> Vec<Sample> {
        let deadline = Instant::now() + timeout;
        loop {
            let samples = self.scrape();
            if done(&samples) || Instant::now() > deadline {
                return samples;
            }
            self.running().assert_running();
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// The last lines of the current collector process's log, for failure messages.
    pub fn log_tail(&self) -> String {
        self.server
            .as_ref()
            .map_or_else(|| "(stopped)".into(), Server::output_tail)
    }
}

/// The base configuration as users run it: the collector running collector/otelcol.yaml,
/// exporting traces to Jaeger and to an OTLP receiver standing in for Tempo.
pub struct BaseStack {
    pub jaeger: Jaeger,
    pub tempo: Receiver,
    pub collector: Collector,
}

impl BaseStack {
    /// Starts the three, their files and logs under `dir`.
    pub fn start(dir: &Path) -> BaseStack {
        let jaeger = Jaeger::start(dir);
        let tempo = Receiver::start_grpc();
        let collector = Collector::start(
            dir,
            &["otelcol.yaml"],
            &jaeger.otlp_endpoint(),
            &host_port(&tempo),
            &[],
        );
        BaseStack {
            jaeger,
            tempo,
            collector,
        }
    }
}

/// `127.0.0.1:PORT` of a plain-text receiver, as the collector's backend variables take it.
fn host_port(receiver: &Receiver) -> String {
    receiver.endpoint().trim_start_matches("http://").to_owned()
}

fn named(pairs: &[(&str, String)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect()
}

/// `dir/name`, made: each collector of a test keeps its logs apart.
fn log_dir(dir: &Path, name: &str) -> PathBuf {
    let dir = dir.join(name);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    dir
}

fn configs_in_repo(configs: &[&str]) -> Vec<PathBuf> {
    configs
        .iter()
        .map(|name| repo().join("collector").join(name))
        .collect()
}
