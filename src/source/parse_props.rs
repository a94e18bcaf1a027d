//! Property tests: any text given to the `nvidia-smi` parser or to the device list parser
//! yields rows or an error that names what was wrong, never a panic.

use proptest::prelude::*;

use super::scope::DeviceScope;
use super::smi::{parse_query_gpu, SmiParseError};
use super::Device;

/// Fields that are, or are close to, what each `nvidia-smi` column holds.
fn smi_field() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<u32>().prop_map(|n| n.to_string()),
        any::<u64>().prop_map(|n| n.to_string()),
        any::<i64>().prop_map(|n| n.to_string()),
        (0u32..=300).prop_map(|n| n.to_string()),
        Just("[N/A]".to_owned()),
        Just("[Not Supported]".to_owned()),
        Just("[Unknown Error]".to_owned()),
        Just("[".to_owned()),
        Just("]".to_owned()),
        Just(String::new()),
        Just("1234 MiB".to_owned()),
        Just("\"quoted, name\"".to_owned()),
        "GPU-[0-9a-f-]{0,40}",
        "MIG-[0-9a-f/-]{0,20}",
        "[ a-zA-Z0-9]{0,24}",
        any::<String>(),
    ]
}

/// A line of `nvidia-smi` output with about the right number of fields.
fn smi_line() -> impl Strategy<Value = String> {
    (prop::collection::vec(smi_field(), 0..9), prop::bool::ANY)
        .prop_map(|(fields, spaced)| fields.join(if spaced { ", " } else { "," }))
}

/// Whole outputs: near-valid lines with any line ending, or any text at all.
fn smi_output() -> impl Strategy<Value = String> {
    prop_oneof![
        (
            prop::collection::vec(smi_line(), 0..6),
            prop::sample::select(vec!["\n", "\r\n", "\r", "\n\n"])
        )
            .prop_map(|(lines, end)| lines.join(end)),
        any::<String>(),
        prop::collection::vec(any::<u8>(), 0..200)
            .prop_map(|bytes| String::from_utf8_lossy(&bytes).into_owned()),
    ]
}

fn device(index: u32, uuid: String) -> Device {
    Device {
        index,
        mig: None,
        uuid,
        name: "test".into(),
        vendor: "NVIDIA".into(),
    }
}

proptest! {
    #[test]
    fn smi_output_gives_rows_or_an_error_naming_the_line(text in smi_output()) {
        let lines = u64::try_from(text.lines().count()).unwrap_or(u64::MAX);
        match parse_query_gpu(&text) {
            Ok(rows) => {
                prop_assert!(!rows.is_empty());
                for row in rows {
                    prop_assert!(!row.uuid.is_empty());
                    prop_assert!(!row.name.is_empty());
                    if let Some(utilization) = row.utilization {
                        prop_assert!((0.0..=1.0).contains(&utilization), "{utilization}");
                    }
                }
            }
            Err(error) => {
                let message = error.to_string();
                prop_assert!(message.starts_with("nvidia-smi "), "{message}");
                match error {
                    SmiParseError::Truncated { line, .. } | SmiParseError::Invalid { line, .. } => {
                        prop_assert!(line >= 1 && line <= lines.max(1), "line {line} of {lines}");
                        prop_assert!(message.contains(&format!("line {line}")), "{message}");
                    }
                    SmiParseError::Empty | SmiParseError::Csv(_) => {}
                }
            }
        }
    }

    #[test]
    fn a_device_list_gives_a_scope_or_names_the_bad_entry(
        list in prop_oneof![
            prop::collection::vec(
                prop_oneof![
                    any::<u32>().prop_map(|n| n.to_string()),
                    any::<i64>().prop_map(|n| n.to_string()),
                    "GPU-[0-9a-fA-F-]{0,36}",
                    "MIG-[0-9a-fA-F/-]{0,20}",
                    Just("-1".to_owned()),
                    Just(" ".to_owned()),
                    any::<String>(),
                ],
                0..6,
            )
            .prop_map(|entries| entries.join(",")),
            any::<String>(),
        ],
        index in any::<u32>(),
        uuid in any::<String>(),
    ) {
        match DeviceScope::parse(&list) {
            Ok(scope) => {
                // Any device can be asked about.
                let _ = scope.includes(&device(index, uuid));
            }
            Err(error) => {
                let message = error.to_string();
                let entry = message
                    .strip_prefix('\'')
                    .and_then(|rest| rest.split_once("' is neither a device index"))
                    .map(|(entry, _)| entry);
                prop_assert!(entry.is_some(), "{message}");
                let entry = entry.unwrap_or_default();
                prop_assert!(
                    list.split(',').any(|raw| raw.trim() == entry),
                    "'{entry}' is not an entry of {list:?}"
                );
            }
        }
    }
}
