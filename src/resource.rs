//! The OTel resource: who is reporting (service, host, process, run, rank).

use opentelemetry::KeyValue;
use opentelemetry_sdk::Resource;

use crate::config::Settings;
use crate::names::attribute as attr;

/// Builds the resource from resolved settings; explicit attributes win over detected ones.
pub(crate) fn build(settings: &Settings) -> Resource {
    let mut attributes = vec![
        KeyValue::new(attr::PROCESS_PID, i64::from(std::process::id())),
        KeyValue::new(attr::ML_RUN_ID, settings.run_id.clone()),
    ];
    if let Some(host) = host_name() {
        attributes.push(KeyValue::new(attr::HOST_NAME, host));
    }
    let rank = &settings.rank;
    for (key, value) in [
        (attr::ML_RANK, rank.rank),
        (attr::ML_LOCAL_RANK, rank.local_rank),
        (attr::ML_WORLD_SIZE, rank.world_size),
    ] {
        if let Some(value) = value {
            attributes.push(KeyValue::new(key, value));
        }
    }
    if let Some(job) = &rank.job_id {
        attributes.push(KeyValue::new(attr::ML_JOB_ID, job.clone()));
    }
    for (key, value) in &settings.resource {
        attributes.push(KeyValue::new(key.clone(), value.clone()));
    }
    // Built from the resolved settings only: the SDK's own detectors would read
    // OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES a second time.
    Resource::builder_empty()
        .with_attributes(attributes)
        .with_service_name(settings.service_name.clone())
        .build()
}

pub(crate) fn host_name() -> Option<String> {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname NUL-terminates within it
    // when the name fits, and the last byte is kept as a terminator regardless.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len() - 1) };
    if rc != 0 {
        return None;
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    let name = String::from_utf8_lossy(&buf[..end]).into_owned();
    (!name.is_empty()).then_some(name)
}
