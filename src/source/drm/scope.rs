//! Which AMD and Intel devices are in scope: the lists their runtimes honour
//! (`ROCR_VISIBLE_DEVICES`, then `HIP_VISIBLE_DEVICES` or `CUDA_VISIBLE_DEVICES` over
//! what ROCr left; `ZE_AFFINITY_MASK`), or `GPUSPAN_DEVICES` over gpuspan's own numbering,
//! then a rank's own device (`LOCAL_RANK`) of those.

use crate::source::scope::{ambiguous, parse_list, upper_prefix, AmbiguousDevice, ListEntry};
use crate::source::{Device, DeviceScope, DeviceScopeError};

/// The AMD and Intel devices a run measures.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct DrmScope {
    /// `GPUSPAN_DEVICES`: by `gpu.index` or `hw.id`; beats the runtimes' lists.
    pub(crate) chosen: Option<DeviceScope>,
    /// ROCr's list, then HIP's (or CUDA's, which HIP honours) over what ROCr left.
    pub(crate) amd: Vec<Visible>,
    /// Level Zero's `ZE_AFFINITY_MASK`.
    pub(crate) intel: Option<Visible>,
    /// A rank's device, by position among those in scope.
    pub(crate) position: Option<usize>,
}

/// One runtime's list of visible devices: positions in the list it narrows, or UUIDs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Visible(Vec<Entry>);

type Entry = ListEntry<usize>;

impl Visible {
    /// A comma-separated list of positions and `GPU-...` UUIDs (ROCr, HIP, CUDA). An empty
    /// list or `-1` leaves no device, as the runtimes do.
    pub(crate) fn parse(list: &str) -> Result<Self, DeviceScopeError> {
        // A MIG UUID (CUDA's, on a machine with both kinds) matches no AMD device.
        parse_list(list).map(Self)
    }

    /// `ZE_AFFINITY_MASK`: `device` or `device.sub-device` entries; a sub-device keeps
    /// its whole device (its memory is the device's).
    pub(crate) fn parse_ze(mask: &str) -> Result<Self, DeviceScopeError> {
        let mut entries = Vec::new();
        for raw in mask.split(',') {
            let entry = raw.trim();
            if entry.is_empty() {
                continue;
            }
            let mut parts = entry.split('.');
            let device = parts.next().and_then(|d| d.parse().ok());
            // `0.abc` or `0.` is no sub-device: refused as `abc` would be, not taken as `0`.
            let sub_devices = parts.all(|p| p.parse::<usize>().is_ok());
            match (device, sub_devices) {
                (Some(position), true) if !entries.contains(&Entry::Number(position)) => {
                    entries.push(Entry::Number(position));
                }
                (Some(_), true) => {}
                _ => {
                    return Err(DeviceScopeError {
                        entry: entry.to_owned(),
                    })
                }
            }
        }
        Ok(Self(entries))
    }

    /// The first UUID prefix of the list that starts more than one of `uuids`.
    fn ambiguity(&self, uuids: &[String]) -> Option<AmbiguousDevice> {
        self.0.iter().find_map(|entry| match entry {
            Entry::Uuid(prefix) => ambiguous(prefix, uuids.iter().map(String::as_str)),
            Entry::Number(_) => None,
        })
    }

    /// The entry that `lists` (each narrowing what the one before left) give the device
    /// at `position` of the last: a `GPU-...` UUID as written, else its position in the
    /// first list's numbering (every device's); `None` past the end of a list.
    pub(crate) fn entry_through(lists: &[Visible], position: usize) -> Option<String> {
        let mut entry = Entry::Number(position);
        for list in lists.iter().rev() {
            match entry {
                Entry::Number(p) => entry = list.0.get(p)?.clone(),
                Entry::Uuid(_) => break,
            }
        }
        Some(match entry {
            Entry::Number(p) => p.to_string(),
            Entry::Uuid(uuid) => upper_prefix(&uuid),
        })
    }

    /// The devices of `devices` this list keeps, in the list's order; a device the list
    /// names twice (`0,0`, or by position and by UUID) is kept once.
    fn narrow<T: Clone>(&self, devices: &[T], uuid: impl Fn(&T) -> &str) -> Vec<T> {
        let mut kept: Vec<T> = Vec::new();
        for entry in &self.0 {
            let found = match entry {
                Entry::Number(p) => devices.get(*p),
                Entry::Uuid(prefix) => devices
                    .iter()
                    .find(|d| uuid(d).to_ascii_lowercase().starts_with(prefix.as_str())),
            };
            if let Some(device) = found {
                if !kept.iter().any(|k| uuid(k) == uuid(device)) {
                    kept.push(device.clone());
                }
            }
        }
        kept
    }
}

impl DrmScope {
    /// The first UUID prefix of the lists in force that starts more than one UUID of the
    /// devices it narrows (each list's, what the one before left).
    pub(crate) fn ambiguity<T: Clone>(
        &self,
        amd: &[T],
        intel: &[T],
        first_index: u32,
        describe: impl Fn(&T, u32) -> Device,
    ) -> Option<AmbiguousDevice> {
        if let Some(chosen) = &self.chosen {
            let every: Vec<Device> = amd
                .iter()
                .chain(intel)
                .zip(first_index..)
                .map(|(t, index)| describe(t, index))
                .collect();
            return chosen.ambiguity(&every);
        }
        let mut left: Vec<(T, String)> = amd
            .iter()
            .map(|t| (t.clone(), describe(t, 0).uuid))
            .collect();
        for list in &self.amd {
            let uuids: Vec<String> = left.iter().map(|(_, u)| u.clone()).collect();
            if let Some(ambiguous) = list.ambiguity(&uuids) {
                return Some(ambiguous);
            }
            left = list.narrow(&left, |(_, u)| u.as_str());
        }
        let intel: Vec<String> = intel.iter().map(|t| describe(t, 0).uuid).collect();
        self.intel.as_ref().and_then(|list| list.ambiguity(&intel))
    }

    /// Narrows the AMD devices and the Intel devices (each in its runtime's order) to
    /// those in scope, numbering them from `first_index` in that order, AMD's first.
    pub(crate) fn select<T: Clone>(
        &self,
        amd: Vec<T>,
        intel: Vec<T>,
        first_index: u32,
        describe: impl Fn(&T, u32) -> Device,
    ) -> Vec<(T, Device)> {
        let every = || {
            amd.iter()
                .chain(&intel)
                .zip(first_index..)
                .map(|(t, index)| (t.clone(), describe(t, index)))
        };
        if let Some(chosen) = &self.chosen {
            return every().filter(|(_, d)| chosen.includes(d)).collect();
        }
        let uuid = |t: &T| describe(t, 0).uuid;
        let mut amd_kept = amd.clone();
        for list in &self.amd {
            let uuids: Vec<(T, String)> = amd_kept.iter().map(|t| (t.clone(), uuid(t))).collect();
            amd_kept = list
                .narrow(&uuids, |(_, u)| u.as_str())
                .into_iter()
                .map(|(t, _)| t)
                .collect();
        }
        let intel_kept = match &self.intel {
            Some(list) => {
                let uuids: Vec<(T, String)> = intel.iter().map(|t| (t.clone(), uuid(t))).collect();
                list.narrow(&uuids, |(_, u)| u.as_str())
                    .into_iter()
                    .map(|(t, _)| t)
                    .collect()
            }
            None => intel.clone(),
        };
        let mut kept: Vec<T> = amd_kept.into_iter().chain(intel_kept).collect();
        if let Some(position) = self.position {
            if position < kept.len() {
                kept = vec![kept.swap_remove(position)];
            }
        }
        // The numbering stays the machine's, whatever the scope: `gpu.index` names the
        // same device in every rank.
        let all: Vec<(T, u32)> = amd.into_iter().chain(intel).zip(first_index..).collect();
        kept.into_iter()
            .filter_map(|t| {
                let index = all
                    .iter()
                    .find(|(o, i)| uuid(o) == uuid(&t) && *i >= first_index)?
                    .1;
                Some((t.clone(), describe(&t, index)))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn describe(name: &&str, index: u32) -> Device {
        Device {
            index,
            mig: None,
            uuid: format!("GPU-{name}"),
            name: (*name).to_owned(),
            vendor: "AMD".into(),
        }
    }

    fn picked(
        scope: &DrmScope,
        amd: &[&'static str],
        intel: &[&'static str],
    ) -> Vec<(String, u32)> {
        scope
            .select(amd.to_vec(), intel.to_vec(), 0, describe)
            .into_iter()
            .map(|(t, d)| (t.to_owned(), d.index))
            .collect()
    }

    #[test]
    fn hip_narrows_what_rocr_left_and_keeps_the_machine_s_numbering() {
        let scope = DrmScope {
            amd: vec![
                Visible::parse("1,2,3").unwrap(),
                Visible::parse("2").unwrap(),
            ],
            ..DrmScope::default()
        };
        assert_eq!(
            picked(&scope, &["a", "b", "c", "d"], &[]),
            [("d".to_owned(), 3)]
        );
    }

    #[test]
    fn uuids_select_by_prefix() {
        let scope = DrmScope {
            amd: vec![Visible::parse("GPU-b").unwrap()],
            ..DrmScope::default()
        };
        assert_eq!(picked(&scope, &["a", "bb"], &[]), [("bb".to_owned(), 1)]);
    }

    #[test]
    fn ze_affinity_mask_keeps_whole_devices_for_sub_devices() {
        let scope = DrmScope {
            intel: Some(Visible::parse_ze("1.0,1.1").unwrap()),
            ..DrmScope::default()
        };
        assert_eq!(
            picked(&scope, &["a"], &["x", "y"]),
            [("a".to_owned(), 0), ("y".to_owned(), 2)]
        );
        assert!(Visible::parse_ze("one").is_err());
        for bad in ["0.1,abc", "0.abc", "0.", "1.-1", ".1"] {
            let err = Visible::parse_ze(bad).unwrap_err().to_string();
            assert!(err.contains('\''), "{bad}: {err}");
        }
    }

    #[test]
    fn a_device_named_twice_is_measured_once() {
        let scope = DrmScope {
            amd: vec![Visible::parse("1,1,GPU-b,0").unwrap()],
            ..DrmScope::default()
        };
        assert_eq!(
            picked(&scope, &["a", "b"], &[]),
            [("b".to_owned(), 1), ("a".to_owned(), 0)]
        );
        let hip_after_rocr = DrmScope {
            amd: vec![
                Visible::parse("0,1").unwrap(),
                Visible::parse("0,0").unwrap(),
            ],
            ..DrmScope::default()
        };
        assert_eq!(picked(&hip_after_rocr, &["a", "b"], &[]).len(), 1);
    }

    #[test]
    fn a_rank_position_picks_its_own_device_of_those_in_scope() {
        let scope = DrmScope {
            amd: vec![Visible::parse("2,3").unwrap()],
            position: Some(1),
            ..DrmScope::default()
        };
        assert_eq!(
            picked(&scope, &["a", "b", "c", "d"], &[]),
            [("d".to_owned(), 3)]
        );
        let past = DrmScope {
            position: Some(5),
            ..DrmScope::default()
        };
        assert_eq!(picked(&past, &["a", "b"], &[]).len(), 2);
    }

    #[test]
    fn gpuspan_devices_beats_the_runtimes_lists() {
        let scope = DrmScope {
            chosen: Some(DeviceScope::parse("0").unwrap()),
            amd: vec![Visible::parse("1").unwrap()],
            ..DrmScope::default()
        };
        assert_eq!(picked(&scope, &["a", "b"], &[]), [("a".to_owned(), 0)]);
    }

    #[test]
    fn empty_and_minus_one_leave_no_device_and_garbage_is_named() {
        let none = DrmScope {
            amd: vec![Visible::parse("-1").unwrap()],
            ..DrmScope::default()
        };
        assert!(picked(&none, &["a"], &[]).is_empty());
        let err = Visible::parse("0,cuda:1").unwrap_err().to_string();
        assert!(err.contains("'cuda:1'"), "{err}");
    }
}
