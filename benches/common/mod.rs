//! Helpers shared by the benches: CPU and memory figures from `/proc` and the clocks,
//! the machine and its load, child processes, and medians.

#![allow(dead_code)]

use std::fs;
use std::time::Duration;

/// The measuring window: `GPUSPAN_BENCH_WINDOW_S` seconds if set, else `full` under
/// `cargo bench` and `quick` in a smoke pass.
pub fn window(full: Duration, quick: Duration) -> Duration {
    std::env::var("GPUSPAN_BENCH_WINDOW_S")
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .map(Duration::from_secs_f64)
        .unwrap_or(if full_run() { full } else { quick })
}

/// True when the binary was started by `cargo bench` (which passes `--bench`); `cargo test
/// --benches` runs it without, and then the benches take a quick smoke pass only.
pub fn full_run() -> bool {
    std::env::args().any(|a| a == "--bench") && std::env::var_os("GPUSPAN_BENCH_QUICK").is_none()
}

/// Page size in bytes.
pub fn page_size() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(size).unwrap_or(4096)
}

/// Resident set size of this process, from `/proc/self/statm`.
pub fn rss_bytes() -> u64 {
    let statm = fs::read_to_string("/proc/self/statm").expect("/proc/self/statm");
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .expect("resident pages in /proc/self/statm");
    pages * page_size()
}

/// Peak resident set size of this process (`VmHWM`), in bytes.
pub fn hwm_bytes() -> u64 {
    let status = fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kib| kib * 1024)
}

fn clock(id: libc::clockid_t) -> Option<Duration> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out pointer.
    let rc = unsafe { libc::clock_gettime(id, &mut ts) };
    (rc == 0).then(|| Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32))
}

/// CPU time of the whole process (all threads), user and system.
pub fn process_cpu() -> Duration {
    clock(libc::CLOCK_PROCESS_CPUTIME_ID).expect("CLOCK_PROCESS_CPUTIME_ID")
}

/// CPU time of the calling thread.
pub fn own_thread_cpu() -> Duration {
    clock(libc::CLOCK_THREAD_CPUTIME_ID).expect("CLOCK_THREAD_CPUTIME_ID")
}

/// CPU time of thread `tid` of this process, in nanoseconds, through the kernel's per-thread
/// CPU clock (`MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED)`, what glibc's
/// `pthread_getcpuclockid` returns); falls back to `/proc/self/task/<tid>/stat` (clock
/// ticks) where that clock is refused.
pub fn thread_cpu(tid: i32) -> Option<Duration> {
    let id: libc::clockid_t = ((!tid) << 3) | 6;
    clock(id).or_else(|| stat_cpu(&format!("/proc/self/task/{tid}/stat")))
}

/// User plus system CPU time in a `/proc` `stat` file (of a process or of a thread), from
/// its clock ticks.
pub fn stat_cpu(path: &str) -> Option<Duration> {
    let stat = fs::read_to_string(path).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // Fields 14 and 15 of stat (utime, stime) are 12 and 13 after the state field.
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Some(Duration::from_nanos(ticks * 1_000_000_000 / hz))
}

/// User plus system CPU time of process `pid` so far, from `/proc/<pid>/stat`.
pub fn pid_cpu(pid: u32) -> Duration {
    stat_cpu(&format!("/proc/{pid}/stat")).expect("/proc/<pid>/stat")
}

/// Ids of the threads of this process whose name (`comm`) is `name`.
pub fn threads_named(name: &str) -> Vec<i32> {
    let mut tids = Vec::new();
    let Ok(dir) = fs::read_dir("/proc/self/task") else {
        return tids;
    };
    for entry in dir.flatten() {
        let Some(tid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        let comm = fs::read_to_string(entry.path().join("comm")).unwrap_or_default();
        if comm.trim_end() == name {
            tids.push(tid);
        }
    }
    tids
}

/// Summed CPU time of the threads named `name`.
pub fn threads_cpu(name: &str) -> Duration {
    threads_named(name).into_iter().filter_map(thread_cpu).sum()
}

/// User plus system CPU time of the children this process has waited for.
pub fn children_cpu() -> Duration {
    // SAFETY: an all-zero rusage is valid, and getrusage only writes to it.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `usage` is a valid out pointer.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage) };
    assert_eq!(rc, 0, "getrusage(RUSAGE_CHILDREN)");
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, (t.tv_usec * 1000) as u32);
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

/// `/proc/loadavg`'s three load averages.
pub fn load() -> String {
    fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

/// One line naming the machine: cores, CPU model and load.
pub fn machine() -> String {
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let model = fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|v| v.trim_start_matches([' ', '\t', ':']).to_owned())
        })
        .unwrap_or_else(|| "?".into());
    format!("{cpus} CPUs, {model}, load average {}", load())
}

/// Median of `values` (mean of the two middle values for an even count).
pub fn median(values: &[f64]) -> f64 {
    let mut v: Vec<f64> = values.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    match n {
        0 => f64::NAN,
        _ if n % 2 == 1 => v[n / 2],
        _ => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// Bytes in MiB.
pub fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// Signed difference of two byte counts, in MiB.
pub fn mib_delta(after: u64, before: u64) -> f64 {
    (after as f64 - before as f64) / (1024.0 * 1024.0)
}

/// The environment variable a bench sets to run itself as a child in one configuration.
pub const CHILD_VAR: &str = "GPUSPAN_BENCH_CHILD";

/// This binary again, as a child running `config`, with every OTel, gpuspan and fake NVML
/// variable of this process removed.
pub fn child(config: &str) -> std::process::Command {
    let mut command = std::process::Command::new(std::env::current_exe().expect("current exe"));
    for (key, _) in std::env::vars() {
        if key.starts_with("OTEL_")
            || (key.starts_with("GPUSPAN_") && !key.starts_with("GPUSPAN_BENCH_"))
            || key.starts_with("FAKE_NVML_")
            || key == "CUDA_VISIBLE_DEVICES"
            || key == "RUST_LOG"
        {
            command.env_remove(key);
        }
    }
    if full_run() {
        command.arg("--bench");
    }
    command.env(CHILD_VAR, config);
    command
}

/// The configuration this process was started to run as a child, if any.
pub fn child_config() -> Option<String> {
    std::env::var(CHILD_VAR).ok()
}
