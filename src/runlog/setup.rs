//! What a run keeps for the pictures besides spans and metrics: the timeline file and the
//! TensorBoard event file. Their settings (code beats environment beats default) and the
//! sampler observers and export taps that write them.

use crate::config::layered::{layered, process_var, resolved, Env};
use crate::config::parse;
use crate::config::table::{Defaulted, Row, Setting, Vars};
use crate::config::{Destination, Settings};
use crate::error::InitError;
use crate::export::tap::SpanTap;
use crate::source::MemorySource;
use crate::timeline::file::TimelineDevice;
use crate::timeline::writer::TimelineWriter;
use crate::timeline::TickObserver;

/// `on` or `off`: write TensorBoard event files into the run directory (default: off).
pub(crate) use crate::config::vars::GPUSPAN_TENSORBOARD as TENSORBOARD_VAR;
/// `on` or `off`: write `timeline.bin` (default: on when traces or metrics go to the run
/// directory, off otherwise).
pub(crate) use crate::config::vars::GPUSPAN_TIMELINE as TIMELINE_VAR;

const TIMELINE: Row<bool> = Row::new(
    "timeline",
    Vars::Ordered(&[TIMELINE_VAR]),
    parse::BOOLEAN,
    "on with the run directory, off with OTLP",
    parse::boolean,
)
.doc("Whether the run directory gets timeline.bin, every sample that changed a figure.");
const TENSORBOARD: Defaulted<bool> = Row::new(
    "tensorboard",
    Vars::Ordered(&[TENSORBOARD_VAR]),
    parse::BOOLEAN,
    "off",
    parse::boolean,
)
.doc("Whether the run directory gets TensorBoard event files.")
.defaults_to(|| false);

/// The pictures' rows of the settings table.
pub(crate) const ROWS: &[Setting] = &[TIMELINE.setting, TENSORBOARD.row.setting];

/// The values set in code (`None`: not set).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct PictureCode {
    pub(crate) timeline: Option<bool>,
    pub(crate) tensorboard: Option<bool>,
}

/// The resolved settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Pictures {
    pub(crate) timeline: bool,
    pub(crate) tensorboard: bool,
}

/// Code, else the variable (read through `env`), else the default.
pub(crate) fn resolve(
    code: PictureCode,
    env: impl Fn(&str) -> Option<String>,
    run_dir_in_use: bool,
) -> Result<Pictures, InitError> {
    let env = Env::from_fn(&env);
    // The timeline's default is the run directory's use, as its row's default text says.
    let timeline = layered(&TIMELINE, code.timeline, None, env)?;
    Ok(Pictures {
        timeline: timeline.map_or(run_dir_in_use, |(value, _)| value),
        tensorboard: resolved(&TENSORBOARD, code.tensorboard, env)?,
    })
}

/// Resolves against the process environment and the run's destinations.
pub(crate) fn from_env(code: PictureCode, settings: &Settings) -> Result<Pictures, InitError> {
    let run_dir_in_use = [&settings.traces, &settings.metrics]
        .iter()
        .any(|d| **d == Destination::RunDir);
    resolve(code, process_var, run_dir_in_use)
}

fn run_dir(settings: &Settings) -> Result<std::path::PathBuf, InitError> {
    let dir = settings.run_dir();
    std::fs::create_dir_all(&dir).map_err(|source| InitError::RunDir {
        path: dir.clone(),
        source,
    })?;
    Ok(dir)
}

/// The sampler observers the settings ask for.
pub(crate) fn observers(
    pictures: Pictures,
    settings: &Settings,
    source: Option<&dyn MemorySource>,
) -> Result<Vec<Box<dyn TickObserver>>, InitError> {
    if !pictures.timeline {
        return Ok(Vec::new());
    }
    let dir = run_dir(settings)?;
    let devices: Vec<TimelineDevice> = source
        .map(|s| s.devices())
        .unwrap_or_default()
        .iter()
        .map(|d| TimelineDevice {
            id: d.id(),
            uuid: d.uuid.clone(),
            name: d.name.clone(),
        })
        .collect();
    let interval = crate::source::read_interval(source, settings.sample_interval);
    let origin = crate::util::time::unix_nanos(std::time::SystemTime::now());
    let writer = TimelineWriter::start(&dir, &devices, interval, origin).map_err(|source| {
        InitError::RunDir {
            path: dir.join(crate::timeline::file::TIMELINE_FILE),
            source,
        }
    })?;
    Ok(vec![Box::new(writer)])
}

/// The export taps the settings ask for.
pub(crate) fn taps(
    pictures: Pictures,
    settings: &Settings,
) -> Result<Vec<Box<dyn SpanTap>>, InitError> {
    if !pictures.tensorboard {
        return Ok(Vec::new());
    }
    let dir = run_dir(settings)?;
    let tap =
        super::tfevents::TensorBoardTap::create(&dir).map_err(|source| InitError::RunDir {
            path: dir.clone(),
            source,
        })?;
    Ok(vec![Box::new(tap)])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| {
            pairs
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| (*v).to_owned())
        }
    }

    #[test]
    fn the_timeline_follows_the_run_directory_unless_told() {
        let none = PictureCode::default();
        assert!(resolve(none, env(&[]), true).unwrap().timeline);
        assert!(!resolve(none, env(&[]), false).unwrap().timeline);
        assert!(
            resolve(none, env(&[(TIMELINE_VAR, "on")]), false)
                .unwrap()
                .timeline
        );
        assert!(
            !resolve(none, env(&[(TIMELINE_VAR, "OFF")]), true)
                .unwrap()
                .timeline
        );
        let code = PictureCode {
            timeline: Some(true),
            tensorboard: None,
        };
        assert!(
            resolve(code, env(&[(TIMELINE_VAR, "off")]), false)
                .unwrap()
                .timeline
        );
    }

    #[test]
    fn tensorboard_is_off_unless_asked() {
        let none = PictureCode::default();
        assert!(!resolve(none, env(&[]), true).unwrap().tensorboard);
        assert!(
            resolve(none, env(&[(TENSORBOARD_VAR, "on")]), true)
                .unwrap()
                .tensorboard
        );
        let code = PictureCode {
            timeline: None,
            tensorboard: Some(false),
        };
        assert!(
            !resolve(code, env(&[(TENSORBOARD_VAR, "on")]), true)
                .unwrap()
                .tensorboard
        );
    }

    #[test]
    fn a_bad_value_names_the_variable() {
        let error = resolve(
            PictureCode::default(),
            env(&[(TENSORBOARD_VAR, "maybe")]),
            true,
        )
        .unwrap_err()
        .to_string();
        assert!(
            error.contains("GPUSPAN_TENSORBOARD") && error.contains("maybe"),
            "{error}"
        );
        assert!(error.contains("on or off"), "{error}");
    }
}
