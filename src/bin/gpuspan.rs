//! The `gpuspan` command: `report` draws a run directory's per-epoch table, or its page and
//! pictures (`--html`, `--svg`, `--png`); `watch` prints every device's memory and the peak
//! between two lines, live.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use gpuspan::runlog;

#[derive(Parser)]
#[command(name = "gpuspan", version, about = "GPU memory on OpenTelemetry")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Prints the per-epoch table of a run directory (default: the newest run in
    /// $GPUSPAN_RUN_DIR or gpuspan-runs), or draws it as a page or a picture.
    Report {
        /// A run directory, or a directory of runs (its newest run is shown).
        dir: Option<PathBuf>,
        /// Writes a self-contained HTML page (default: report.html in the run directory).
        #[arg(long, num_args = 0..=1, value_name = "FILE")]
        html: Option<Option<PathBuf>>,
        /// Writes the picture as SVG.
        #[arg(long, value_name = "FILE")]
        svg: Option<PathBuf>,
        /// Writes the picture as PNG (rendered without a browser).
        #[arg(long, value_name = "FILE")]
        png: Option<PathBuf>,
        /// Width of the SVG or PNG picture, in pixels.
        #[arg(long, default_value_t = 1400)]
        width: u32,
    },
    /// Prints each device's memory every interval until interrupted.
    Watch {
        /// Time between lines, such as 500ms or 2s.
        #[arg(long, default_value = "1s", value_parser = parse_interval)]
        every: Duration,
        /// Stop after this many lines (default: never).
        #[arg(long)]
        count: Option<u64>,
    },
}

fn parse_interval(text: &str) -> Result<Duration, String> {
    let (number, unit) = text
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .map_or((text, "ms"), |i| text.split_at(i));
    let number: f64 = number
        .parse()
        .map_err(|_| format!("'{text}' is not a duration such as 500ms or 2s"))?;
    let seconds = match unit {
        "ms" => number / 1e3,
        "s" => number,
        _ => return Err(format!("'{text}': use ms or s")),
    };
    if seconds < 0.01 {
        return Err(format!("'{text}' is too short: at least 10ms"));
    }
    Ok(Duration::from_secs_f64(seconds))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Report {
            dir,
            html,
            svg,
            png,
            width,
        } => {
            let pictures = Pictures {
                html,
                svg,
                png,
                width,
            };
            report(dir, &pictures)
        }
        Command::Watch { every, count } => watch(every, count),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("gpuspan: {message}");
            ExitCode::FAILURE
        }
    }
}

/// The run directories to report: `dir` itself, its `rank-*` directories, or the newest run
/// inside a directory of runs.
fn runs_in(dir: &Path) -> Result<Vec<PathBuf>, String> {
    if dir.join(runlog::TRACES_FILE).is_file() {
        return Ok(vec![dir.to_path_buf()]);
    }
    let entries =
        std::fs::read_dir(dir).map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
    let mut subdirs: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    subdirs.sort();
    let ranks: Vec<PathBuf> = subdirs
        .iter()
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("rank-"))
        })
        .filter(|p| p.join(runlog::TRACES_FILE).is_file())
        .cloned()
        .collect();
    if !ranks.is_empty() {
        return Ok(ranks);
    }
    let newest = subdirs
        .iter()
        .filter_map(|p| Some((p.metadata().ok()?.modified().ok()?, p)))
        .max()
        .map(|(_, p)| p.clone());
    match newest {
        Some(run) => runs_in(&run),
        None => Err(format!(
            "{} holds no run: expected {} in it, or run directories below it",
            dir.display(),
            runlog::TRACES_FILE
        )),
    }
}

/// What `report` draws besides the table.
struct Pictures {
    html: Option<Option<PathBuf>>,
    svg: Option<PathBuf>,
    png: Option<PathBuf>,
    width: u32,
}

fn write(path: &Path, bytes: &[u8]) -> Result<(), String> {
    std::fs::write(path, bytes).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    println!("wrote {}", path.display());
    Ok(())
}

/// Writes the page and pictures of one run.
fn draw(run: &Path, pictures: &Pictures) -> Result<(), String> {
    let drawn = gpuspan::report::Run::read(run).map_err(|e| e.to_string())?;
    if let Some(html) = &pictures.html {
        let path = html.clone().unwrap_or_else(|| run.join("report.html"));
        write(&path, gpuspan::report::html(&drawn).as_bytes())?;
    }
    if let Some(path) = &pictures.svg {
        write(
            path,
            gpuspan::report::svg(&drawn, pictures.width).as_bytes(),
        )?;
    }
    if let Some(path) = &pictures.png {
        let png = gpuspan::report::png(&drawn, pictures.width).map_err(|e| e.to_string())?;
        write(path, &png)?;
    }
    Ok(())
}

fn report(dir: Option<PathBuf>, pictures: &Pictures) -> Result<(), String> {
    let dir = dir.unwrap_or_else(|| {
        std::env::var_os("GPUSPAN_RUN_DIR")
            .map_or_else(|| PathBuf::from("gpuspan-runs"), PathBuf::from)
    });
    let runs = runs_in(&dir)?;
    if pictures.html.is_some() || pictures.svg.is_some() || pictures.png.is_some() {
        let named = pictures.html.as_ref().is_some_and(Option::is_some)
            || pictures.svg.is_some()
            || pictures.png.is_some();
        if runs.len() > 1 && named {
            return Err(format!(
                "{} holds {} ranks: give one rank's directory (such as {}) to draw it into a named file",
                dir.display(),
                runs.len(),
                runs[0].display()
            ));
        }
        for run in &runs {
            draw(run, pictures)?;
        }
        return Ok(());
    }
    for run in runs {
        let summary = runlog::read_run(&run).map_err(|e| e.to_string())?;
        println!("{}", run.display());
        print!("{}", summary.render());
    }
    Ok(())
}

fn watch(every: Duration, count: Option<u64>) -> Result<(), String> {
    let telemetry = gpuspan::Telemetry::builder()
        .traces_exporter(gpuspan::Exporter::None)
        .metrics_exporter(gpuspan::Exporter::None)
        .summary(false)
        .build()
        .map_err(|e| e.to_string())?;
    if telemetry.devices().is_empty() {
        return Err("no GPU to watch (see the warning above)".into());
    }
    let mut lines = 0;
    while count.is_none_or(|c| lines < c) {
        let _interval = gpuspan::memory_span!("watch");
        std::thread::sleep(every);
        let cells: Vec<String> = telemetry
            .devices()
            .iter()
            .map(|d| {
                let used = d
                    .used
                    .map_or("-".into(), |b| format!("{:.0} MiB", b as f64 / 1048576.0));
                let total = d
                    .total
                    .map_or("-".into(), |b| format!("{:.0} MiB", b as f64 / 1048576.0));
                format!("gpu {}: {used} / {total}", d.device.index)
            })
            .collect();
        println!("{}", cells.join("   "));
        lines += 1;
    }
    telemetry.shutdown().map_err(|e| e.to_string())
}
