//! A job of 16 ranks on fake GPUs that each draw a scripted power for one second: `gpuspan
//! report` prints each rank's energy, exactly as its device's counter moved, and the job's
//! sum; one rank's clocks are held down at steps 10 to 12 while the others wait for it at
//! every step (a barrier, as a collective), and the job view names it as the likely cause
//! of their slow steps. The pages say the same.

use gpuspan_test_support as support;

use std::ops::RangeInclusive;
use std::path::Path;
use std::process::Command;
use std::sync::Barrier;
use std::time::Duration;

use support::commands::{folded_lines, succeeded};
use support::fake_nvml::reason;
use support::power_window::{run_epoch, wait_for_power_reads, Drawn};

const RANKS: u32 = 16;
const STEPS: i64 = 15;
const SLOW_RANK: u32 = 3;
const THROTTLED: RangeInclusive<i64> = 10..=12;

/// Rank `r` draws 100 W plus 10 W a rank number: 100 J to 250 J over its second.
fn watts(rank: u32) -> u64 {
    100 + 10 * u64::from(rank)
}

/// Rank `r` of the job under `job`: 15 steps, each ending in the collective.
fn rank(job: &Path, r: u32, collective: &Barrier) -> Drawn {
    run_epoch(job, &format!("rank-{r}"), watts(r), 10, |fake| {
        for step in 0..STEPS {
            let throttled = r == SLOW_RANK && THROTTLED.contains(&step);
            if throttled {
                fake.set_clocks_event_reasons(0, reason::SW_POWER_CAP | reason::HW_SLOWDOWN);
                fake.set_sm_clock(0, 1210);
                // A reading of the held-down clocks is the latest as the step opens.
                wait_for_power_reads(fake, 1);
            }
            {
                let _step = gpuspan::step_span!(step);
                if throttled {
                    // The held-down rank computes slowly.
                    wait_for_power_reads(fake, 8);
                } else {
                    std::thread::sleep(Duration::from_millis(5));
                }
                collective.wait();
            }
            if throttled {
                fake.set_clocks_event_reasons(0, reason::GPU_IDLE);
                fake.set_sm_clock(0, 1980);
                wait_for_power_reads(fake, 1);
            }
        }
    })
}

fn report(args: &[&std::ffi::OsStr]) -> Vec<String> {
    let out = succeeded(
        Command::new(env!("CARGO_BIN_EXE_gpuspan"))
            .arg("report")
            .args(args),
    );
    folded_lines(&out.stdout)
}

#[test]
fn sixteen_ranks_energies_add_up_to_their_counters_and_the_throttled_rank_is_named() {
    let root = tempfile::tempdir().unwrap();
    let job = root.path().join("job");
    let collective = Barrier::new(RANKS as usize);
    let drawn: Vec<Drawn> = std::thread::scope(|scope| {
        let ranks: Vec<_> = (0..RANKS)
            .map(|r| {
                let (job, collective) = (&job, &collective);
                scope.spawn(move || rank(job, r, collective))
            })
            .collect();
        ranks.into_iter().map(|r| r.join().unwrap()).collect()
    });
    // Each counter moved by the scripted power over the one-second window, exactly.
    for (r, d) in (0..RANKS).zip(&drawn) {
        assert_eq!(d.joules(), watts(r) as f64, "rank {r}");
    }

    let lines = report(&[job.as_os_str()]);
    let at = lines
        .iter()
        .position(|l| l == "rank energy power")
        .unwrap_or_else(|| panic!("no energy table: {lines:#?}"));
    let mut sum = 0.0;
    for (r, d) in (0..RANKS).zip(&drawn) {
        let row = &lines[at + 1 + r as usize];
        let cells: Vec<&str> = row.split(' ').collect();
        let expected = [r.to_string(), format!("{:.1}", d.joules()), "J".to_owned()];
        assert_eq!(cells[..3], expected, "{row}");
        assert!(row.ends_with(" W"), "{row}");
        sum += cells[1].parse::<f64>().unwrap();
    }
    // The ranks' energies add up to the devices' counters: 2,800 J.
    let counters: f64 = drawn.iter().map(Drawn::joules).sum();
    assert_eq!(sum, counters);
    assert_eq!(counters, 2800.0);
    let total = &lines[at + 1 + RANKS as usize];
    assert!(total.starts_with("job 2.80 kJ "), "{total}");
    assert!(total.ends_with(" kW") || total.ends_with(" W"), "{total}");

    // The throttled rank, and only it, named as the others' wait.
    let throttled: Vec<&String> = lines
        .iter()
        .filter(|l| l.starts_with("throttled:"))
        .collect();
    assert_eq!(throttled.len(), 1, "{lines:#?}");
    let line = throttled[0];
    assert!(
        line.starts_with(
            "throttled: rank 3 at epoch 0 steps 10-12 (hw_slowdown, sw_power_cap; SM clock down \
             to 1210 MHz): the likely cause of the other ranks' slow steps there (3 of 3 \
             throttled steps; 15 ranks at "
        ),
        "{line}"
    );
    assert!(
        line.ends_with("their median step, waiting for it in the collective)"),
        "{line}"
    );

    // Rank 3's own table: its epoch's energy, and its throttled steps marked.
    let own = lines
        .iter()
        .position(|l| l.ends_with("rank-3"))
        .unwrap_or_else(|| panic!("no table of rank 3: {lines:#?}"));
    assert!(
        lines[own + 1].ends_with("energy power energy/step"),
        "{}",
        lines[own + 1]
    );
    let row = &lines[own + 2];
    assert!(row.starts_with("0 15 "), "{row}");
    assert!(row.contains(" 130.0 J "), "{row}");
    assert!(
        row.ends_with(
            "<- throttled steps 10-12 (hw_slowdown, sw_power_cap; SM clock down to 1210 MHz)"
        ),
        "{row}"
    );
    let energy = lines[own..]
        .iter()
        .find(|l| l.starts_with("energy:"))
        .expect("rank 3's energy line");
    assert!(
        energy.starts_with("energy: 130.0 J over 1 epoch, "),
        "{energy}"
    );
    // No other rank's row is marked.
    let marked = lines.iter().filter(|l| l.contains("<- throttled")).count();
    assert_eq!(marked, 1, "{lines:#?}");

    // The job's page, and each rank's own.
    report(&[job.as_os_str(), "--html".as_ref()]);
    let page = std::fs::read_to_string(job.join("report.html")).unwrap();
    assert!(
        page.contains("<tr id=\"job-energy-total\"><th>job</th><th>2.80 kJ</th>"),
        "{page}"
    );
    assert!(page.contains("<tr data-rank=\"15\"><td>15</td><td>250.0 J</td>"));
    assert!(
        page.contains("<p class=\"alarm\" data-throttled>throttled: rank 3 at epoch 0 steps 10-12")
    );
    let throttled_bars = page.matches("class=\"bar throttled\"").count()
        + page.matches("class=\"bar worst throttled\"").count();
    assert_eq!(throttled_bars, 3, "rank 3's steps 10 to 12");
    let own_page = std::fs::read_to_string(job.join("rank-3").join("report.html")).unwrap();
    assert!(own_page.contains("<th>energy</th><th>power</th><th>energy/step</th>"));
    assert!(own_page.contains("<td>130.0 J</td>"));
    assert!(own_page.contains(
        "<td class=\"throttled\">steps 10-12 (hw_slowdown, sw_power_cap; SM clock down to \
         1210 MHz)</td>"
    ));
}
