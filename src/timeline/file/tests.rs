//! Tests of the timeline file: samples and MIG identities read back as written, a steady
//! hour stays small, a record cut short is left out, and a file of another kind is named.

use super::*;

fn device(index: u32) -> TimelineDevice {
    TimelineDevice {
        id: GpuId::gpu(index),
        uuid: format!("GPU-{index}"),
        name: "Test GPU".into(),
    }
}

#[test]
fn mig_instances_keep_their_identity_in_the_header() {
    let mut devices = vec![device(0), device(7)];
    for mig in [0, 2, u32::MAX - 1] {
        devices.push(TimelineDevice {
            id: GpuId::mig(3, mig),
            uuid: format!("MIG-{mig}"),
            name: "Test GPU MIG 1g.18gb".into(),
        });
    }
    let file = header(1_700_000_000_000_000_000, 5_000_000, &devices);
    let timeline = decode(&file).expect("a header alone reads");
    assert_eq!(timeline.devices, devices);
}

#[test]
fn samples_round_trip_with_their_times() {
    let origin = 1_700_000_000_000_000_000;
    let devices = [device(0), device(3)];
    let mut file = header(origin, 5_000_000, &devices);
    let mut encoder = Encoder::new(origin, figures(2).len());
    // The same values twice in a row, then every figure changing, then from zero.
    let changed = |first: Option<u64>, second: Option<u64>| {
        vec![
            first,
            second,
            Some(80),
            Some(80),
            Some(3),
            Some(6),
            Some(1),
            Some(2),
        ]
    };
    let first = vec![
        Some(10),
        Some(20),
        Some(80),
        Some(80),
        None,
        Some(7),
        None,
        None,
    ];
    let samples: Vec<(u64, Vec<Option<u64>>)> = vec![
        (origin + 1_000, first.clone()),
        (origin + 5_001_000, first),
        (origin + 10_002_000, changed(Some(u64::MAX - 1), None)),
        (origin + 15_000_000, changed(Some(0), Some(20))),
    ];
    let mut written = 0;
    for (t, values) in &samples {
        if let Some(record) = encoder.record(*t, values) {
            file.extend_from_slice(&record);
            encoder.commit(*t, values);
            written += 1;
        }
    }
    assert_eq!(written, 3, "the unchanged sample costs nothing");
    let timeline = decode(&file).unwrap();
    assert_eq!(timeline.devices, devices);
    assert_eq!(timeline.interval_nanos, 5_000_000);
    assert!(!timeline.truncated);
    let used0 = &timeline.figure(Figure::DeviceUsed(0)).unwrap().points;
    assert_eq!(
        used0,
        &vec![
            (origin + 1_000, Some(10)),
            (origin + 10_002_000, Some(u64::MAX - 1)),
            (origin + 15_000_000, Some(0)),
        ]
    );
    let used1 = &timeline.figure(Figure::DeviceUsed(1)).unwrap().points;
    assert_eq!(
        used1,
        &vec![
            (origin + 1_000, Some(20)),
            (origin + 10_002_000, None),
            (origin + 15_000_000, Some(20))
        ]
    );
    assert_eq!(
        timeline.figure(Figure::ProcessGpu).unwrap().points,
        vec![(origin + 10_002_000, Some(3))]
    );
    assert_eq!(timeline.last_unix_nanos, origin + 15_000_000);
}

/// One hour at 5 ms on two devices, steps of 300 ms whose memory rises, peaks and
/// falls, host memory moving once a second: under 1 MB per device, and read back whole.
#[test]
fn a_steady_hour_stays_under_a_megabyte_per_device() {
    let origin = 1_800_000_000_000_000_000u64;
    let devices = [device(0), device(1)];
    let mut file = header(origin, 5_000_000, &devices);
    let mut encoder = Encoder::new(origin, figures(2).len());
    let ticks = 3600 * 200u64;
    let mut changes = 0usize;
    let mut last = Vec::new();
    for tick in 0..ticks {
        // The sampler's clock jitters by up to 0.3 ms.
        let t = origin + tick * 5_000_000 + (tick * 7919 % 300) * 1000;
        let phase = tick % 60;
        let step = tick / 60;
        let activations = match phase {
            0..=4 => 0,
            5..=19 => 2 << 30,
            20..=44 => (3 << 30) + (step % 17) * (2 << 20),
            _ => 512 << 20,
        };
        let used0 = (20u64 << 30) + activations;
        let used1 = (21u64 << 30) + activations;
        let values = vec![
            Some(used0),
            Some(used1),
            Some(80 << 30),
            Some(80 << 30),
            Some(used0 + used1 - (4 << 30)),
            Some((6u64 << 30) + (tick / 200 % 50) * 4096),
            None,
            None,
        ];
        if let Some(record) = encoder.record(t, &values) {
            file.extend_from_slice(&record);
            encoder.commit(t, &values);
            changes += 1;
        }
        last = values;
    }
    let per_device_hour = file.len() / devices.len();
    eprintln!("a steady hour: {per_device_hour} bytes per device, {changes} records");
    assert!(
        per_device_hour < 1_000_000,
        "{} bytes per device for an hour ({changes} changing samples)",
        per_device_hour
    );
    let timeline = decode(&file).unwrap();
    assert!(!timeline.truncated);
    let used0 = &timeline.figure(Figure::DeviceUsed(0)).unwrap().points;
    assert_eq!(used0.len(), 4 * 12_000, "four changes per step, every step");
    for (series, value) in timeline.series.iter().zip(&last) {
        assert_eq!(series.points.last().and_then(|p| p.1), *value);
    }
    // The 20th tick of step 1000 raised device 0, at its jittered time.
    let tick = 1000 * 60 + 20;
    let at = (origin + tick * 5_000_000 + (tick * 7919 % 300) * 1000) / 1000 * 1000;
    assert!(used0.contains(&(at, Some((23u64 << 30) + (1000 % 17) * (2 << 20)))));
}

#[test]
fn a_record_cut_short_is_left_out() {
    let origin = 1_000_000_000;
    let mut file = header(origin, 1_000_000, &[device(0)]);
    let mut encoder = Encoder::new(origin, figures(1).len());
    for (i, v) in [100u64, 200, 300].iter().enumerate() {
        let values = [Some(*v), Some(1000), None, None, None, None];
        let t = origin + i as u64 * 1_000_000;
        file.extend(encoder.record(t, &values).unwrap());
        encoder.commit(t, &values);
    }
    file.pop();
    let timeline = decode(&file).unwrap();
    assert!(timeline.truncated);
    assert_eq!(timeline.series[0].points.len(), 2);
}

#[test]
fn a_file_of_another_kind_is_named() {
    let error = decode(b"{\"resourceSpans\":[]}").unwrap_err().to_string();
    assert!(error.contains("GPUSPANT"), "{error}");
    let mut file = header(0, 1, &[]);
    file[8] = 9;
    let error = decode(&file).unwrap_err().to_string();
    assert!(error.contains("version 9"));
}
