//! Which job a process belongs to, and the directory the job gets: decided here and nowhere
//! else, so that every rank of a job, whatever started it, lands in one directory and reads
//! one alarm board.
//!
//! Launchers are asked innermost first: torchrun (which may run inside an MPI or SLURM
//! step), Open MPI's `mpirun`, a PMIx launcher, a PMI-1 launcher that names its key-value
//! space, SLURM's `srun`. `GPUSPAN_JOB_ID` comes last: `gpuspan run` sets it, and one
//! `gpuspan run` per node must not split a job its launcher names. `none` (torchrun's
//! placeholder where a rendezvous has no id) and blank values count as unset.

use super::layered::Env;
use super::vars::*;

/// A job, as its launcher names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Job {
    /// `ml.job.id`: the launcher's id, as the launcher writes it.
    pub(crate) id: String,
    /// The job's directory under the run root: the id, with the launcher's name in front
    /// where the bare id could be another launcher's or another job's.
    pub(crate) dir: String,
}

impl Job {
    /// A job whose directory is its id.
    fn named(id: String) -> Self {
        Self {
            dir: dir_name("", &id),
            id,
        }
    }

    /// A job whose directory is `<launcher>-<id>`.
    fn of(launcher: &str, id: String) -> Self {
        Self {
            dir: dir_name(launcher, &id),
            id,
        }
    }
}

/// The job of this process: the one set in code, else the first launcher's, else
/// `GPUSPAN_JOB_ID`; `None` when nothing names one.
pub(crate) fn job(code: Option<&str>, env: Env<'_>) -> Option<Job> {
    if let Some(id) = code.and_then(present) {
        return Some(Job::named(id));
    }
    let var = |name: &str| env.raw(name).as_deref().and_then(present);
    if let Some(id) = var(TORCHELASTIC_RUN_ID) {
        return Some(Job::named(id));
    }
    if let Some(id) = var(OMPI_MCA_ESS_BASE_JOBID) {
        // The job id is a hash of mpirun's host and pid, which a later job may draw again;
        // the key mpirun draws at random for each job keeps the directories apart.
        let dir = match var(OMPI_MCA_ORTE_PRECONDITION_TRANSPORTS) {
            Some(key) => format!("{id}-{}", key.split('-').next().unwrap_or(&key)),
            None => id.clone(),
        };
        return Some(Job {
            dir: dir_name("ompi", &dir),
            id,
        });
    }
    if let Some(id) = var(PMIX_NAMESPACE) {
        return Some(Job::of("pmix", id));
    }
    if let Some(id) = var(PMI_KVSNAME) {
        return Some(Job::of("pmi", id));
    }
    if let Some(job) = var(SLURM_JOB_ID) {
        let id = match var(SLURM_STEP_ID) {
            Some(step) => format!("{job}.{step}"),
            None => job,
        };
        return Some(Job::of("slurm", id));
    }
    var(GPUSPAN_JOB_ID).map(Job::named)
}

/// `GPUSPAN_JOB_ID` of this process as a job reads it: `None` when unset, blank or `none`
/// (`gpuspan run` then sets it for its command).
#[cfg_attr(not(feature = "pipeline"), allow(dead_code))]
pub fn job_id_variable() -> Option<String> {
    Env::process()
        .raw(GPUSPAN_JOB_ID)
        .as_deref()
        .and_then(present)
}

/// `text` trimmed, unless blank or `none`.
fn present(text: &str) -> Option<String> {
    let text = text.trim();
    (!text.is_empty() && !text.eq_ignore_ascii_case("none")).then(|| text.to_owned())
}

/// The longest directory name a job gets, in bytes: file systems allow 255, and a
/// launcher's id has no limit of its own.
const MAX_DIR_NAME: usize = 200;

/// One directory name: path separators and control characters become `-`, `.` or `..`
/// alone gets the `job-` prefix, and a name over [`MAX_DIR_NAME`] bytes is cut on a
/// character boundary and ends in a checksum of the whole name, so two long ids differing
/// only past the cut stay apart.
fn dir_name(launcher: &str, id: &str) -> String {
    let name = readable_dir_name(launcher, id);
    if name.len() <= MAX_DIR_NAME {
        return name;
    }
    let sum = format!("-{:08x}", crc32c::crc32c(name.as_bytes()));
    let mut cut = MAX_DIR_NAME - sum.len();
    while !name.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}{sum}", &name[..cut])
}

fn readable_dir_name(launcher: &str, id: &str) -> String {
    let id: String = id
        .chars()
        .map(|c| {
            if c == '/' || c == '\\' || c.is_control() {
                '-'
            } else {
                c
            }
        })
        .collect();
    match (launcher, id.as_str()) {
        ("", "." | "..") => format!("job-{id}"),
        ("", _) => id,
        _ => format!("{launcher}-{id}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpuspan_run_reads_its_own_variable_as_the_ranks_do() {
        for (value, read) in [("none", None), (" ", None), (" j-1 ", Some("j-1"))] {
            let got = temp_env::with_var(GPUSPAN_JOB_ID, Some(value), job_id_variable);
            assert_eq!(got.as_deref(), read, "{value:?}");
        }
    }

    #[test]
    fn a_directory_name_never_leaves_the_run_root() {
        assert_eq!(dir_name("", "../x"), "..-x");
        assert_eq!(dir_name("", ".."), "job-..");
        assert_eq!(dir_name("pmix", "a\\b\nc"), "pmix-a-b-c");
        assert_eq!(dir_name("", "torch-1f2e"), "torch-1f2e");
    }

    #[test]
    fn an_id_longer_than_a_file_name_gets_a_short_directory_that_keeps_two_jobs_apart() {
        let long = "é".repeat(200);
        let other = format!("{}x", "é".repeat(199));
        let (a, b) = (dir_name("pmix", &long), dir_name("pmix", &other));
        for name in [&a, &b] {
            assert!(name.len() <= MAX_DIR_NAME, "{} bytes", name.len());
            assert!(name.starts_with("pmix-éé"), "{name}");
        }
        assert_ne!(a, b);
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join(&a)).unwrap();
    }
}
