//! `gpuspan report JOB_DIR --html` on a job of three ranks, opened in a real headless
//! Chromium: a lane per rank, a bar per step as high as that rank's peak, the worst rank's
//! bars in the warning colour, the job's epoch table naming the worst and slowest ranks,
//! and the first rank out of memory. Each rank also gets its own page.

use gpuspan_test_support as support;

use std::path::Path;
use std::process::Command;

use support::commands::succeeded;
use support::example::train_command;
use support::fake_nvml::FakeNvml;
use support::pictures;

const MIB: i64 = 1 << 20;

/// Rank `rank` of job `j` under `root`: its device holds 1,000 MiB per rank number plus
/// one; rank 1 trains a model fifty times wider, so it is the slowest; rank 2's device
/// crosses the near-OOM threshold 250 ms in, while it trains (a model eight times wider
/// than rank 0's, which takes about half a second).
fn rank(fake: &FakeNvml, root: &Path, rank: u32) {
    let used = (1000 * (rank + 1)).to_string();
    let hidden = ["8", "400", "64"][rank as usize];
    let timeline = root.join("rank-2-timeline");
    std::fs::write(
        &timeline,
        format!("0 0 {}\n250 0 {}\n", 3000 * MIB, 79_000 * MIB),
    )
    .unwrap();
    let mut envs = vec![
        ("GPUSPAN_RUN_DIR", root.to_str().unwrap().to_owned()),
        ("GPUSPAN_RUN_ID", "j".to_owned()),
        ("RANK", rank.to_string()),
        ("WORLD_SIZE", "3".to_owned()),
        ("GPUSPAN_NVML_LIB", fake.path().to_str().unwrap().to_owned()),
        ("FAKE_NVML_TOTAL_MIB", "81920".to_owned()),
        ("FAKE_NVML_USED_MIB", used),
    ];
    if rank == 2 {
        envs.push(("FAKE_NVML_TIMELINE", timeline.to_str().unwrap().to_owned()));
    }
    let envs: Vec<(&str, &str)> = envs.iter().map(|(k, v)| (*k, v.as_str())).collect();
    succeeded(&mut train_command(
        &["--epochs", "2", "--steps", "20", "--hidden", hidden],
        &envs,
    ));
}

#[test]
fn a_lane_per_rank_with_the_worst_rank_in_red_and_the_first_out_of_memory_named() {
    let tools = pictures::tools();
    assert!(tools.join("node_modules/playwright-core").is_dir());
    let fake = FakeNvml::build();
    let root = tempfile::tempdir().unwrap();
    for r in 0..3 {
        rank(&fake, root.path(), r);
    }
    let job = root.path().join("j");
    succeeded(
        Command::new(env!("CARGO_BIN_EXE_gpuspan"))
            .arg("report")
            .arg(&job)
            .arg("--html"),
    );
    let page = job.join("report.html");
    for r in 0..3 {
        assert!(
            job.join(format!("rank-{r}/report.html")).is_file(),
            "rank {r}'s page"
        );
    }

    let seen = pictures::node("check_job_page.js", &[&page, &pictures::artefacts()]);
    assert_eq!(seen["errors"], serde_json::json!([]), "{seen}");
    assert_eq!(
        seen["requests"],
        serde_json::json!([]),
        "no network: {seen}"
    );
    let lanes = seen["lanes"].as_array().unwrap();
    assert_eq!(
        lanes
            .iter()
            .map(|l| l["rank"].as_str().unwrap())
            .collect::<Vec<_>>(),
        ["0", "1", "2"]
    );
    for (r, lane) in lanes.iter().enumerate().take(2) {
        assert_eq!(lane["bars"], 40, "rank {r}: a bar per step");
        assert_eq!(lane["worst"], 0, "rank {r} is never the worst");
        let expected = 1000 * (r as i64 + 1) * MIB;
        assert!(
            lane["peaks"]
                .as_array()
                .unwrap()
                .iter()
                .all(|p| p.as_i64() == Some(expected)),
            "rank {r}'s steps each peak at its device's {expected}: {lane}"
        );
    }
    assert_eq!(
        lanes
            .iter()
            .map(|l| l["label"].as_str().unwrap())
            .collect::<Vec<_>>(),
        ["1000 MiB", "2.0 GiB", "77.1 GiB"],
        "each lane says its highest peak"
    );
    let last = &lanes[2];
    assert_eq!(last["bars"], 40);
    assert_eq!(last["worst"], 40, "rank 2 holds the most at every step");
    let peaks: Vec<i64> = last["peaks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_i64().unwrap())
        .collect();
    assert_eq!(peaks.iter().max(), Some(&(79_000 * MIB)));
    assert_eq!(peaks[0], 3000 * MIB);
    // The highest bar of the job is drawn taller than rank 0's, in proportion.
    let (low, high) = (
        lanes[0]["height"].as_f64().unwrap(),
        last["height"].as_f64().unwrap(),
    );
    assert!(
        (high / low - 79.0).abs() < 2.0,
        "bars of {low} and {high} px"
    );
    assert!(
        seen["tip"]
            .as_str()
            .unwrap()
            .starts_with("rank 2 · epoch 0 step 0: peak 2.9 GiB, "),
        "{seen}"
    );

    let first = seen["firstOom"]
        .as_str()
        .unwrap_or_else(|| panic!("{seen}"));
    assert!(
        first.starts_with("first near out of memory: rank 2 in step ")
            && first.ends_with("; 1 of 3 ranks"),
        "{first}"
    );
    let epochs = seen["epochs"].as_array().unwrap();
    assert_eq!(epochs.len(), 2);
    for (e, row) in epochs.iter().enumerate() {
        assert_eq!(row[0], e.to_string());
        assert_eq!(row[1], "2", "the worst rank: {row}");
        assert_eq!(row[3], "1000 MiB", "the lowest peak: {row}");
        assert_eq!(row[5], "1", "the slowest rank: {row}");
    }
    assert!(
        seen["steps"]
            .as_str()
            .unwrap()
            .starts_with("steps: 40 on every rank"),
        "{seen}"
    );
}
