//! The resolution of every setting but the device scopes: the run's identity (service,
//! resource, run and job ids, the launcher's rank) and each row of the table, in one pass.

use super::layered::{first_var, layered, resolved, Env};
use super::scope::{device_scope, drm_scope};
use super::{destination, job, parse, run_root, sampling, table, vars};
use super::{CodeSettings, InvalidValue, Rank, Settings, Signal};
use crate::error::InitError;
use crate::source::drm::Roots;

/// Resolves every setting from code, then environment, then defaults.
pub fn resolve(code: &CodeSettings) -> Result<Settings, InitError> {
    resolve_in(code, Env::process())
}

/// As [`resolve`], with the variables read from `env`.
fn resolve_in(code: &CodeSettings, env: Env<'_>) -> Result<Settings, InitError> {
    use vars::*;
    let disabled = resolved(&table::DISABLED, code.disabled, env)?;
    let resource = resource_attributes(code, env)?;
    let service_name = layered(&table::SERVICE_NAME, code.service_name.clone(), None, env)?
        .map(|(name, _)| name)
        .or_else(|| {
            resource
                .iter()
                .find(|(k, _)| k == crate::names::attribute::SERVICE_NAME)
                .map(|(_, v)| v.clone())
        })
        .unwrap_or_else(default_service_name);
    let sample_interval = resolved(&table::SAMPLE_INTERVAL, code.sample_interval, env)?;
    let power_interval = resolved(&table::POWER_INTERVAL, code.power_interval, env)?;
    let mut rank = rank(env)?;
    let job = job::job(code.job_id.as_deref(), env);
    rank.job_id = job.as_ref().map(|job| job.id.clone());
    let devices = device_scope(code, rank.local_rank, env)?;
    let drm_devices = drm_scope(code, rank.local_rank, env)?;
    let roots = Roots {
        sysfs: resolved(&table::SYSFS_ROOT, code.sysfs_root.clone(), env)?,
        procfs: resolved(&table::PROCFS_ROOT, code.procfs_root.clone(), env)?,
    };
    let (run_id, run_id_is_own) = run_id(code, job.as_ref(), env)?;
    let metric_interval = resolved(&table::METRIC_EXPORT_INTERVAL, code.metric_interval, env)?;
    let prometheus_addr =
        layered(&table::PROMETHEUS_ADDR, code.prometheus_addr, None, env)?.map(|(addr, _)| addr);
    let export_queue = resolved(&table::EXPORT_QUEUE, code.export_queue, env)?.max(1);
    let log_filter = first_var(&[RUST_LOG], log_filter, env)?.map(|(filter, _)| filter);
    Ok(Settings {
        disabled,
        service_name,
        resource,
        sample_interval,
        power_interval,
        nvml_lib: layered(&table::NVML_LIB, code.nvml_lib.clone(), None, env)?.map(|(p, _)| p),
        devices,
        drm_devices,
        roots,
        search_path: std::env::var_os(PATH),
        run_root: run_root(code.run_dir.clone(), env)?,
        run_id_is_own,
        run_id,
        rank,
        traces: destination::destination(code, Signal::Traces, env)?,
        metrics: destination::destination(code, Signal::Metrics, env)?,
        metric_interval,
        prometheus_addr,
        export_queue,
        log_filter,
        summary: resolved(&table::SUMMARY, code.summary, env)?,
        flush_on_signal: resolved(&table::FLUSH_ON_SIGNAL, code.flush_on_signal, env)?,
        sampling: sampling::sampling(env),
    })
}

/// `RUST_LOG`, checked as the event layer will read it.
fn log_filter(filter: &str) -> Result<String, InvalidValue> {
    match tracing_subscriber::EnvFilter::try_new(filter) {
        Ok(_) => Ok(filter.to_owned()),
        Err(e) => Err(InvalidValue::new(
            filter,
            format!("a tracing filter such as info or mycrate=debug ({e})"),
        )),
    }
}

fn default_service_name() -> String {
    std::env::current_exe()
        .ok()
        .and_then(|exe| exe.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .map(|name| format!("unknown_service:{name}"))
        .unwrap_or_else(|| "unknown_service".to_owned())
}

/// Code, `GPUSPAN_RUN_ID`, then the directory of the job (see [`job`]), else date, time
/// and pid; and whether it is that last, this process's own.
fn run_id(
    code: &CodeSettings,
    job: Option<&job::Job>,
    env: Env<'_>,
) -> Result<(String, bool), InitError> {
    if let Some((id, _)) = layered(&table::RUN_ID, code.run_id.clone(), None, env)? {
        return Ok((id, false));
    }
    Ok(match job {
        Some(job) => (job.dir.clone(), false),
        None => (generated_run_id(), true),
    })
}

fn generated_run_id() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let (date, time) = crate::util::time::utc_date_time(now.as_secs());
    format!("{date}-{time}-{}", std::process::id())
}

fn rank(env: Env<'_>) -> Result<Rank, InitError> {
    use vars::*;
    let first = |vars: &[&'static str]| -> Result<Option<i64>, InitError> {
        Ok(first_var(vars, parse::integer, env)?.map(|(v, _)| v))
    };
    // torchrun's, SLURM's, Open MPI's, MPICH's (Hydra), then PMIx's names.
    Ok(Rank {
        rank: first(&[
            RANK,
            SLURM_PROCID,
            OMPI_COMM_WORLD_RANK,
            PMI_RANK,
            PMIX_RANK,
        ])?,
        local_rank: first(&[
            LOCAL_RANK,
            SLURM_LOCALID,
            OMPI_COMM_WORLD_LOCAL_RANK,
            MPI_LOCALRANKID,
        ])?,
        world_size: first(&[WORLD_SIZE, SLURM_NTASKS, OMPI_COMM_WORLD_SIZE, PMI_SIZE])?,
        job_id: None,
    })
}

/// The rank the launcher gave this process (torchrun's, SLURM's, Open MPI's, MPICH's or
/// PMIx's variable), as every part of gpuspan reads it; `None` outside a launcher.
///
/// # Errors
/// A rank variable that is not a whole number, named with its value.
pub fn launcher_rank() -> Result<Option<i64>, InitError> {
    Ok(rank(Env::process())?.rank)
}

/// `OTEL_RESOURCE_ATTRIBUTES` (`key=value,key=value`, values percent-encoded), then code.
fn resource_attributes(
    code: &CodeSettings,
    env: Env<'_>,
) -> Result<Vec<(String, String)>, InitError> {
    let mut attributes = layered(&table::RESOURCE_ATTRIBUTES, None, None, env)?
        .map(|(v, _)| v)
        .unwrap_or_default();
    for (key, value) in &code.resource {
        attributes.retain(|(k, _)| k != key);
        attributes.push((key.clone(), value.clone()));
    }
    Ok(attributes)
}
