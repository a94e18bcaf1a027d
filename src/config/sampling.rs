//! `OTEL_TRACES_SAMPLER`: read only to say that gpuspan keeps every span.

use super::layered::Env;
use super::vars;

/// How gpuspan's spans are sampled: always, whatever the parent decided. The per-epoch
/// summary, the leak rules, the batch-size fit and the peaks are computed from the spans
/// that end, so a span sampled out would silently drop a step from all of them; and a
/// caller's trace flag 00 (a CI system's or a launcher's `TRACEPARENT`) would drop every
/// span of the run. A span under a sampled-out parent keeps that parent's trace id and span
/// id. Of `OTEL_TRACES_SAMPLER`, `always_on` and `parentbased_always_on` (the default, which
/// only differs under a sampled-out parent) are taken without a word; anything else is
/// ignored, with one warning at start.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Sampling {
    /// A sampler named in the environment and ignored (`name` or `name (arg)`).
    ignored: Option<String>,
}

impl Sampling {
    /// The SDK sampler, always given so that the SDK does not read the variable itself.
    pub(crate) fn sampler(&self) -> opentelemetry_sdk::trace::Sampler {
        opentelemetry_sdk::trace::Sampler::AlwaysOn
    }

    /// The one warning line for an ignored sampler.
    pub(crate) fn warning(&self) -> Option<String> {
        let sampler = self.ignored.as_ref()?;
        Some(format!(
            "gpuspan: warning: {var}={sampler} is ignored: gpuspan keeps every span, because \
             the peaks, the per-epoch summary, the leak rules and the batch-size fit need every \
             step; sample in the collector instead, or unset {var}",
            var = vars::OTEL_TRACES_SAMPLER
        ))
    }
}

/// `OTEL_TRACES_SAMPLER`, see [`Sampling`]. Never an error: whatever it says, gpuspan
/// samples every span.
pub(crate) fn sampling(env: Env<'_>) -> Sampling {
    let Some(sampler) = env.get(vars::OTEL_TRACES_SAMPLER) else {
        return Sampling::default();
    };
    let sampler = sampler.trim();
    let ignored = match sampler {
        "always_on" | "parentbased_always_on" => None,
        _ => Some(match env.get(vars::OTEL_TRACES_SAMPLER_ARG) {
            Some(arg) if sampler.ends_with("traceidratio") => {
                format!(
                    "{sampler} ({}={})",
                    vars::OTEL_TRACES_SAMPLER_ARG,
                    arg.trim()
                )
            }
            _ => sampler.to_owned(),
        }),
    };
    Sampling { ignored }
}
