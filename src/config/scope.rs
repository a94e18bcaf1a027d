//! Which devices a process measures: code or `GPUSPAN_DEVICES`, else the runtimes' own
//! lists (`CUDA_VISIBLE_DEVICES`, ROCm's, oneAPI's), narrowed to a rank's own device.

use super::layered::{layered, resolved, Env};
use super::{error, table, vars, CodeSettings};
use crate::error::InitError;
use crate::source::drm::DrmScope;
use crate::source::DeviceScope;

/// Whether `GPUSPAN_DEVICES` chooses the devices (set, and not blank: a blank variable is
/// unset, as for every setting); a rank then measures those, not its own device.
pub fn devices_chosen() -> bool {
    Env::process().get(vars::GPUSPAN_DEVICES).is_some()
}

/// The device CUDA numbers `ordinal`, as a `GPUSPAN_DEVICES` entry: its entry of
/// `CUDA_VISIBLE_DEVICES` as gpuspan reads that list (commas, blanks, an entry of `-1`
/// ending it), else the number itself.
///
/// # Errors
/// A `CUDA_VISIBLE_DEVICES` entry that names no device, as resolving the scope says it.
pub fn cuda_device(ordinal: usize) -> Result<String, InitError> {
    let visible = match Env::process().raw(vars::CUDA_VISIBLE_DEVICES) {
        Some(list) => Some(
            table::DEVICES
                .read(&list)
                .map_err(|error| error.named(vars::CUDA_VISIBLE_DEVICES, &list))?,
        ),
        None => None,
    };
    Ok(visible
        .and_then(|scope| scope.entry(ordinal))
        .unwrap_or_else(|| ordinal.to_string()))
}

/// The device HIP numbers `ordinal` (PyTorch on ROCm), as a `GPUSPAN_DEVICES` entry: of
/// the AMD GPUs under the sysfs root (`GPUSPAN_SYSFS_ROOT`) in ROCm's order, the one that
/// `ROCR_VISIBLE_DEVICES`, then `HIP_VISIBLE_DEVICES` (else `CUDA_VISIBLE_DEVICES`, which
/// HIP honours) leave at that position, by its `hw.id`. Where the kernel's files show no
/// such GPU, the entry the lists give it (a `GPU-...` UUID, else its position in ROCm's
/// order), else the number itself.
///
/// # Errors
/// An entry of those lists that names no device, or a sysfs root that is not a path, as
/// resolving the scope says it.
pub fn hip_device(ordinal: usize) -> Result<String, InitError> {
    use crate::source::drm::scope::Visible;
    let env = Env::process();
    let lists = amd_lists(env)?;
    let sysfs = resolved(&table::SYSFS_ROOT, None, env)?;
    Ok(crate::source::drm::hip_device_id(&sysfs, &lists, ordinal)
        .or_else(|| Visible::entry_through(&lists, ordinal))
        .unwrap_or_else(|| ordinal.to_string()))
}

/// Code, `GPUSPAN_DEVICES`, then `CUDA_VISIBLE_DEVICES`, else every device; without the
/// first two, a rank (`local_rank`) measures only its own device of those.
pub(super) fn device_scope(
    code: &CodeSettings,
    local_rank: Option<i64>,
    env: Env<'_>,
) -> Result<DeviceScope, InitError> {
    let chosen = match &code.devices {
        Some(list) => Some(table::DEVICES.read_code(list)?),
        None => None,
    };
    if let Some((scope, _)) = layered(&table::DEVICES, chosen, None, env)? {
        return Ok(scope);
    }
    // Unlike the others, an empty CUDA_VISIBLE_DEVICES means "no device".
    let visible = match env.raw(vars::CUDA_VISIBLE_DEVICES) {
        Some(list) => table::DEVICES
            .read(&list)
            .map_err(|error| error.named(vars::CUDA_VISIBLE_DEVICES, &list))?,
        None => DeviceScope::all(),
    };
    Ok(match local_rank.and_then(|r| usize::try_from(r).ok()) {
        Some(position) if !code.whole_node => visible.at_position(position),
        _ => visible,
    })
}

/// The AMD and Intel devices: code or `GPUSPAN_DEVICES` (by gpuspan's numbering), else
/// the runtimes' own lists (`ROCR_VISIBLE_DEVICES`, then `HIP_VISIBLE_DEVICES` or else
/// `CUDA_VISIBLE_DEVICES`, which HIP honours; `ZE_AFFINITY_MASK`); a rank then keeps its
/// own device of those, as on NVIDIA.
pub(super) fn drm_scope(
    code: &CodeSettings,
    local_rank: Option<i64>,
    env: Env<'_>,
) -> Result<DrmScope, InitError> {
    use crate::source::drm::scope::Visible;
    let chosen = match &code.devices {
        Some(list) => Some(table::DEVICES.read_code(list)?),
        None => None,
    };
    if let Some((scope, _)) = layered(&table::DEVICES, chosen, None, env)? {
        return Ok(DrmScope {
            chosen: Some(scope),
            ..DrmScope::default()
        });
    }
    let amd = amd_lists(env)?;
    let intel = visible_list(vars::ZE_AFFINITY_MASK, Visible::parse_ze, env)?;
    let position = match local_rank.and_then(|r| usize::try_from(r).ok()) {
        Some(position) if !code.whole_node => Some(position),
        _ => None,
    };
    Ok(DrmScope {
        chosen: None,
        amd,
        intel,
        position,
    })
}

/// ROCr's list, then HIP's (or else CUDA's, which HIP honours) over what ROCr left.
fn amd_lists(env: Env<'_>) -> Result<Vec<crate::source::drm::scope::Visible>, InitError> {
    use crate::source::drm::scope::Visible;
    let mut amd = Vec::new();
    amd.extend(visible_list(
        vars::ROCR_VISIBLE_DEVICES,
        Visible::parse,
        env,
    )?);
    match visible_list(vars::HIP_VISIBLE_DEVICES, Visible::parse, env)? {
        Some(hip) => amd.push(hip),
        None => amd.extend(visible_list(
            vars::CUDA_VISIBLE_DEVICES,
            Visible::parse,
            env,
        )?),
    }
    Ok(amd)
}

/// A runtime's list of visible devices from `var`, when set; an error names the variable.
fn visible_list(
    var: &'static str,
    parse: fn(&str) -> Result<crate::source::drm::scope::Visible, crate::source::DeviceScopeError>,
    env: Env<'_>,
) -> Result<Option<crate::source::drm::scope::Visible>, InitError> {
    let Some(text) = env.raw(var) else {
        return Ok(None);
    };
    parse(&text).map(Some).map_err(|error| {
        InitError::from(error::SettingError::new(
            var,
            &text,
            format!("device positions or GPU-... UUIDs separated by commas ({error})"),
        ))
    })
}

/// The setting a device-list entry came from, for an error about it: the first of the
/// variables whose list holds it, else the code's `devices` setting.
pub(crate) fn scope_setting(entry: &str) -> &'static str {
    let env = Env::process();
    let wanted = entry.to_ascii_lowercase();
    [
        vars::GPUSPAN_DEVICES,
        vars::CUDA_VISIBLE_DEVICES,
        vars::ROCR_VISIBLE_DEVICES,
        vars::HIP_VISIBLE_DEVICES,
    ]
    .into_iter()
    .find(|var| {
        env.raw(var).is_some_and(|list| {
            list.split(',')
                .any(|e| e.trim().to_ascii_lowercase() == wanted)
        })
    })
    .unwrap_or("devices")
}
