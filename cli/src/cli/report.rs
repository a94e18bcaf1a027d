//! `gpuspan report`: finding the runs in a directory (one run, a job's ranks, or the newest
//! of many), then printing their tables or drawing their pages and pictures.

use std::path::{Path, PathBuf};

use gpuspan::runlog;

use super::CommandError;

/// The run directories to report: `dir` itself, its `rank-*` directories, or the newest run
/// inside a directory of runs.
///
/// # Errors
/// [`CommandError::ReadDir`] when `dir` cannot be read, [`CommandError::NoRun`] when it
/// holds no run.
pub fn runs_in(dir: &Path) -> Result<Vec<PathBuf>, CommandError> {
    if dir.join(runlog::TRACES_FILE).is_file() {
        return Ok(vec![dir.to_path_buf()]);
    }
    let entries = std::fs::read_dir(dir).map_err(|source| CommandError::ReadDir {
        path: dir.to_path_buf(),
        source,
    })?;
    let mut subdirs: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    subdirs.sort();
    let mut ranks: Vec<(Option<u64>, PathBuf)> = subdirs
        .iter()
        .filter_map(|p| {
            let name = p.file_name()?.to_string_lossy();
            let number = name.strip_prefix(runlog::RANK_DIR_PREFIX)?.parse().ok();
            Some((number, p.clone()))
        })
        .filter(|(_, p)| p.join(runlog::TRACES_FILE).is_file())
        .collect();
    // rank-2 before rank-10.
    ranks.sort();
    let ranks: Vec<PathBuf> = ranks.into_iter().map(|(_, p)| p).collect();
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
        None => Err(CommandError::NoRun {
            dir: dir.to_path_buf(),
        }),
    }
}

/// What `report` draws besides the table.
pub(super) struct Pictures {
    pub(super) html: Option<Option<PathBuf>>,
    pub(super) svg: Option<PathBuf>,
    pub(super) png: Option<PathBuf>,
    pub(super) width: u32,
}

fn write(path: &Path, bytes: &[u8]) -> Result<(), CommandError> {
    std::fs::write(path, bytes).map_err(|source| CommandError::Write {
        path: path.to_path_buf(),
        source,
    })?;
    println!("wrote {}", path.display());
    Ok(())
}

/// Writes the page and pictures of one run.
fn draw(run: &Path, pictures: &Pictures) -> Result<(), CommandError> {
    let drawn = crate::report::Run::read(run)?;
    if let Some(html) = &pictures.html {
        let path = html.clone().unwrap_or_else(|| run.join("report.html"));
        write(&path, crate::report::html(&drawn).as_bytes())?;
    }
    if let Some(path) = &pictures.svg {
        write(path, crate::report::svg(&drawn, pictures.width).as_bytes())?;
    }
    if let Some(path) = &pictures.png {
        let png = crate::report::png(&drawn, pictures.width)?;
        write(path, &png)?;
    }
    Ok(())
}

pub(super) fn report(dir: Option<PathBuf>, pictures: &Pictures) -> Result<(), CommandError> {
    let dir = dir.unwrap_or_else(runlog::default_run_root);
    let runs = runs_in(&dir)?;
    if pictures.html.is_some() || pictures.svg.is_some() || pictures.png.is_some() {
        let [run] = runs.as_slice() else {
            return draw_job(&dir, &runs, pictures);
        };
        return draw(run, pictures);
    }
    let (summaries, job) = runlog::ranks::read_job(&runs)?;
    for (run, summary) in runs.iter().zip(&summaries) {
        println!("{}", run.display());
        print!("{}", summary.render());
        // A note beside the table (stderr), not a row of it.
        if let Some(line) = runlog::sampler::trust_line(run) {
            eprintln!("{line}");
        }
    }
    if let Some(table) = job.render() {
        print!("{table}");
    }
    Ok(())
}

/// The pages of a job of several ranks: the job's (a lane per rank), then each rank's own in
/// its directory. A named SVG or PNG draws one run, so it needs one rank's directory.
fn draw_job(dir: &Path, runs: &[PathBuf], pictures: &Pictures) -> Result<(), CommandError> {
    if pictures.svg.is_some() || pictures.png.is_some() {
        return Err(CommandError::SeveralRanks {
            ranks: runs.len(),
            first: runs.first().cloned().unwrap_or_default(),
            dir: dir.to_path_buf(),
        });
    }
    let (_, job) = runlog::ranks::read_job(runs)?;
    let name = dir.file_name().map_or_else(
        || dir.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    let path = pictures
        .html
        .clone()
        .flatten()
        .unwrap_or_else(|| dir.join("report.html"));
    write(&path, crate::report::job_html(&job, &name).as_bytes())?;
    let own = Pictures {
        html: Some(None),
        svg: None,
        png: None,
        width: pictures.width,
    };
    for run in runs {
        draw(run, &own)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_jobs_ranks_are_read_in_rank_order() {
        let job = tempfile::tempdir().unwrap();
        for rank in [10, 2, 0, 1] {
            let dir = job
                .path()
                .join(format!("{}{rank}", runlog::RANK_DIR_PREFIX));
            std::fs::create_dir(&dir).unwrap();
            std::fs::write(dir.join(runlog::TRACES_FILE), "").unwrap();
        }
        std::fs::create_dir(job.path().join("alarms")).unwrap();
        let names: Vec<String> = runs_in(job.path())
            .unwrap()
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["rank-0", "rank-1", "rank-2", "rank-10"]);
    }
}
