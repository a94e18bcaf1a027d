//! The job table's rules, on spans and markers made here.

use super::*;

/// An epoch span as the run directory holds it.
fn epoch_span(epoch: i64) -> SpanRecord {
    use opentelemetry_proto::tonic::common::v1::{any_value::Value, AnyValue, KeyValue};
    let span = opentelemetry_proto::tonic::trace::v1::Span {
        name: "epoch".into(),
        span_id: vec![u8::try_from(epoch + 1).unwrap(); 8],
        attributes: vec![KeyValue {
            key: "ml.epoch".into(),
            value: Some(AnyValue {
                value: Some(Value::IntValue(epoch)),
            }),
            ..Default::default()
        }],
        ..Default::default()
    };
    SpanRecord::from_otlp(&span)
}

fn figures(peak: Option<i64>, seconds: f64) -> RankFigures {
    RankFigures {
        peak,
        seconds,
        energy: None,
        estimated: false,
        throttled: false,
    }
}

#[test]
fn the_worst_and_slowest_are_the_first_ranks_to_reach_the_top_and_a_lone_peak_has_no_skew() {
    let row = across(&[
        ("0", figures(Some(100), 2.0)),
        ("1", figures(Some(400), 3.0)),
        ("2", figures(Some(400), 3.0)),
        ("3", figures(None, 1.0)),
    ]);
    assert_eq!(row.worst, Some(("1".to_owned(), 400)));
    assert_eq!(row.lowest, Some(100));
    assert_eq!(row.skew, Some(0.75));
    assert_eq!(row.slowest, ("1".to_owned(), 3.0));

    let lone = across(&[("0", figures(Some(100), 1.0)), ("1", figures(None, 2.0))]);
    assert_eq!(lone.skew, None);
    assert_eq!(lone.slowest.0, "1");
}

#[test]
fn an_epoch_a_rank_did_not_reach_is_left_out_of_the_job_table() {
    let mut job = JobTable::default();
    for (rank, epochs) in [("rank-0", 2), ("rank-1", 1)] {
        job.add_rank(rank);
        for epoch in 0..epochs {
            job.add_span(&epoch_span(epoch));
        }
    }
    let table = job.render().unwrap();
    let rows: Vec<&str> = table.lines().skip(2).collect();
    assert_eq!(rows.len(), 1, "{table}");
    assert!(rows[0].trim_start().starts_with("0 "), "{table}");
}

fn marker(name: &str, unix_nanos: u64, span: &str) -> Marker {
    Marker {
        name: name.into(),
        unix_nanos,
        span: span.into(),
        attributes: Vec::new(),
    }
}

#[test]
fn the_first_rank_out_of_memory_is_named_before_any_that_only_came_near() {
    let mut job = JobTable::default();
    let seconds = 1_796_014_261_000_000_000;
    for (rank, markers) in [
        ("rank-0", vec![marker(event::NEAR_OOM, seconds, "step 3")]),
        (
            "rank-1",
            vec![marker(event::OOM, seconds + 900_000_000, "step 5")],
        ),
        (
            "rank-3",
            vec![
                marker(event::BUDGET_EXCEEDED, seconds, "step 1"),
                marker(event::OOM, seconds + 500_000_000, "step 4"),
                marker(event::OOM, seconds + 700_000_000, "step 4"),
            ],
        ),
        ("rank-4", Vec::new()),
    ] {
        job.add_rank(rank);
        job.add_markers(&markers);
    }
    assert_eq!(
        job.first_out_of_memory().unwrap(),
        "first out of memory: rank 3 in step 4 (2026-11-30 04:51:01.500 UTC); 2 of 4 ranks"
    );

    let mut near = JobTable::default();
    near.add_rank("rank-0");
    near.add_rank("rank-1");
    near.add_markers(&[marker(event::NEAR_OOM, seconds, "epoch 2")]);
    assert_eq!(
        near.first_out_of_memory().unwrap(),
        "first near out of memory: rank 1 in epoch 2 (2026-11-30 04:51:01.000 UTC); 1 of 2 ranks"
    );
    near.ranks.pop();
    near.add_rank("rank-1");
    assert_eq!(near.first_out_of_memory(), None);
}

#[test]
fn the_rank_first_forecast_to_run_out_is_named_with_its_steps_and_growth() {
    let forecast = |unix_nanos, span: &str, steps: &str| Marker {
        attributes: [
            ("gpu.index", "2"),
            ("gpu.memory.forecast.steps", steps),
            ("gpu.memory.forecast.growth_per_step", "67108864"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect(),
        ..marker(event::OOM_FORECAST, unix_nanos, span)
    };
    let mut job = JobTable::default();
    job.add_rank("rank-0");
    job.add_rank("rank-2");
    job.add_markers(&[
        forecast(900, "step 40", "500"),
        forecast(700, "step 32", "887"),
    ]);
    job.add_rank("rank-3");
    job.add_markers(&[forecast(800, "step 35", "600")]);
    job.add_rank("rank-4");
    assert_eq!(
        job.first_forecast().unwrap(),
        "first OOM forecast: rank 2 in step 32, out of memory in about 887 steps on gpu 2 \
         (+64.0 MiB a step); 2 of 4 ranks"
    );
    assert!(job
        .render()
        .unwrap()
        .ends_with(&format!("{}\n", job.first_forecast().unwrap())));
    assert_eq!(JobTable::default().first_forecast(), None);
}

/// A step of epoch 0 (span id 1) lasting `millis`, with a `gpu.throttled` event when
/// `throttled`, and the energy `joules`.
fn step_span(step: i64, millis: u64, throttled: bool, joules: f64) -> SpanRecord {
    use opentelemetry_proto::tonic::common::v1::{any_value::Value, AnyValue, KeyValue};
    let attribute = |key: &str, value: Value| KeyValue {
        key: key.into(),
        value: Some(AnyValue { value: Some(value) }),
        ..Default::default()
    };
    let span = opentelemetry_proto::tonic::trace::v1::Span {
        name: "step".into(),
        span_id: vec![9; 8],
        parent_span_id: vec![1; 8],
        start_time_unix_nano: 0,
        end_time_unix_nano: millis * 1_000_000,
        attributes: vec![
            attribute("ml.step", Value::IntValue(step)),
            attribute("gpu.energy", Value::DoubleValue(joules)),
        ],
        events: if throttled {
            vec![opentelemetry_proto::tonic::trace::v1::span::Event {
                name: crate::names::clock_event::THROTTLED.into(),
                ..Default::default()
            }]
        } else {
            Vec::new()
        },
        ..Default::default()
    };
    SpanRecord::from_otlp(&span)
}

/// Two ranks of 10 steps of 10 ms; rank 1 throttled at steps 4 and 5, where rank 0 took
/// `waiting` ms.
fn throttled_job(waiting: u64) -> JobTable {
    let mut job = JobTable::default();
    for rank in 0..2 {
        job.add_rank(&format!("rank-{rank}"));
        job.add_span(&epoch_span(0));
        for step in 0..10 {
            let throttled = rank == 1 && (4..=5).contains(&step);
            let millis = if (4..=5).contains(&step) { waiting } else { 10 };
            job.add_span(&step_span(step, millis, throttled, 2.5));
        }
    }
    job
}

#[test]
fn a_throttled_rank_is_named_the_cause_only_where_the_others_were_slow_at_its_steps() {
    let slow = throttled_job(40);
    assert_eq!(
        slow.throttled_ranks(),
        [
            "throttled: rank 1 at epoch 0 steps 4-5: the likely cause of the other ranks' slow \
          steps there (2 of 2 throttled steps; 1 rank at 4.0x their median step, waiting for \
          it in the collective)"
        ]
    );
    // At 1.4 times its median, rank 0 was not held up.
    let calm = throttled_job(14);
    assert_eq!(
        calm.throttled_ranks(),
        ["throttled: rank 1 at epoch 0 steps 4-5; the other ranks' steps there were not slow"]
    );
    // Each rank's energy is its steps' in a run whose epochs carry none, and the job's is
    // their sum.
    let energy = slow.energy_by_rank();
    assert_eq!(energy[0].joules, Some(25.0));
    assert_eq!(slow.job_energy().map(|(joules, _)| joules), Some(50.0));
    let table = slow.render().unwrap();
    assert!(
        table
            .lines()
            .any(|l| l.split_whitespace().take(3).eq(["job", "50.0", "J"])),
        "{table}"
    );
}

#[test]
fn energy_that_is_not_a_number_infinite_or_negative_is_left_out_of_the_job_view() {
    let mut job = JobTable::default();
    for (rank, joules) in [f64::NAN, f64::INFINITY, -5.0, 2.5].into_iter().enumerate() {
        job.add_rank(&format!("rank-{rank}"));
        job.add_span(&epoch_span(0));
        job.add_span(&step_span(0, 10, false, joules));
    }
    let energy = job.energy_by_rank();
    let figures: Vec<Option<f64>> = energy.iter().map(|r| r.joules).collect();
    assert_eq!(figures, [None, None, None, Some(2.5)]);
    assert_eq!(job.job_energy().map(|(joules, _)| joules), Some(2.5));
    let table = job.render_energy();
    assert!(table.contains("(1 of 4 ranks)"), "{table}");
    for bad in ["NaN", "inf", "-5"] {
        assert!(!table.contains(bad), "{bad} in {table}");
    }
}

#[test]
fn the_job_total_is_marked_an_estimate_when_a_rank_s_figure_is_one() {
    let mut job = JobTable::default();
    for rank in 0..2 {
        job.add_rank(&format!("rank-{rank}"));
        job.add_span(&epoch_span(0));
        let mut step = step_span(0, 10, false, 2.5);
        step.energy.estimated = rank == 1;
        job.add_span(&step);
    }
    let table = job.render_energy();
    let total = table.lines().last().unwrap();
    assert!(total.contains("~5.0 J"), "{table}");
}
