//! Debian's Prometheus, started by a test to scrape one target on a loopback port, and its
//! instant-query API.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use crate::http::{encode, get};
use crate::servers::{free_port, tools, Server};

/// A running Prometheus that scrapes one target as job `gpuspan`; stopped when dropped.
pub struct Prometheus {
    pub server: Server,
    pub addr: SocketAddr,
}

impl Prometheus {
    /// Starts Prometheus in `dir` (its configuration, data and log go there), scraping
    /// `target` every `interval` and adding `labels` to every series (as a collector's
    /// transform adds resource attributes), and waits until it is ready.
    pub fn scraping(
        target: SocketAddr,
        interval: Duration,
        labels: &[(&str, &str)],
        dir: &Path,
    ) -> Prometheus {
        let seconds = interval.as_secs().max(1);
        let labels: Vec<String> = labels.iter().map(|(k, v)| format!("{k}: '{v}'")).collect();
        let config = dir.join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: {seconds}s\n  scrape_timeout: {seconds}s\n\
                 scrape_configs:\n  - job_name: gpuspan\n    static_configs:\n      - targets: ['{target}']\n\
                 \x20       labels: {{{}}}\n",
                labels.join(", ")
            ),
        )
        .unwrap();
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let mut command = Command::new(&tools().prometheus);
        command
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .current_dir(dir);
        let mut server = Server::start("prometheus", command, &dir.join("prometheus.log"));
        server.wait_for("200 from /-/ready", Duration::from_secs(60), |_| {
            get(addr, "/-/ready").ok().filter(|r| r.status == 200)
        });
        Prometheus { server, addr }
    }

    /// The result vector of an instant query, once it has at least `want` series.
    pub fn query(&self, promql: &str, want: usize) -> Option<Vec<Value>> {
        query(self.addr, promql, want)
    }

    /// Polls the query until it has `want` series (Prometheus stores a scrape some time
    /// after it starts); panics with Prometheus's log after a minute.
    pub fn wait_for_series(&mut self, what: &str, promql: &str, want: usize) -> Vec<Value> {
        let addr = self.addr;
        self.server
            .wait_for(what, Duration::from_secs(60), |_| query(addr, promql, want))
    }
}

fn query(addr: SocketAddr, promql: &str, want: usize) -> Option<Vec<Value>> {
    let response = get(addr, &format!("/api/v1/query?query={}", encode(promql))).ok()?;
    if response.status != 200 {
        return None;
    }
    let series = response.json()["data"]["result"].as_array()?.clone();
    (series.len() >= want).then_some(series)
}

/// The value of one series of an instant query's result.
pub fn value(series: &Value) -> f64 {
    series["value"][1]
        .as_str()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no value in {series}"))
}
