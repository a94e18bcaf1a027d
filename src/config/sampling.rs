//! `OTEL_TRACES_SAMPLER`: read only to say that gpuspan keeps every span.

use super::layered::Env;
use super::vars;

/// How gpuspan's spans are sampled: always. The per-epoch summary, the leak rules, the
/// batch-size fit and the peaks are computed from the spans that end, so a span sampled out
/// would silently drop a step from all of them. Of `OTEL_TRACES_SAMPLER`, `always_on` and
/// `parentbased_always_on` (the default) are taken; anything else is ignored, with one
/// warning at start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Sampling {
    /// Every span, whatever its parent decided (`always_on`).
    AlwaysOn,
    /// A root span is always sampled, a child follows its parent (`parentbased_always_on`).
    ParentBasedAlwaysOn {
        /// A sampler named in the environment and ignored (`name` or `name (arg)`).
        ignored: Option<String>,
    },
}

impl Sampling {
    /// The SDK sampler, always given so that the SDK does not read the variable itself.
    pub(crate) fn sampler(&self) -> opentelemetry_sdk::trace::Sampler {
        use opentelemetry_sdk::trace::Sampler;
        match self {
            Sampling::AlwaysOn => Sampler::AlwaysOn,
            Sampling::ParentBasedAlwaysOn { .. } => {
                Sampler::ParentBased(Box::new(Sampler::AlwaysOn))
            }
        }
    }

    /// The one warning line for an ignored sampler.
    pub(crate) fn warning(&self) -> Option<String> {
        let Sampling::ParentBasedAlwaysOn {
            ignored: Some(sampler),
        } = self
        else {
            return None;
        };
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
        return Sampling::ParentBasedAlwaysOn { ignored: None };
    };
    let sampler = sampler.trim();
    match sampler {
        "always_on" => Sampling::AlwaysOn,
        "parentbased_always_on" => Sampling::ParentBasedAlwaysOn { ignored: None },
        _ => {
            let shown = match env.get(vars::OTEL_TRACES_SAMPLER_ARG) {
                Some(arg) if sampler.ends_with("traceidratio") => {
                    format!(
                        "{sampler} ({}={})",
                        vars::OTEL_TRACES_SAMPLER_ARG,
                        arg.trim()
                    )
                }
                _ => sampler.to_owned(),
            };
            Sampling::ParentBasedAlwaysOn {
                ignored: Some(shown),
            }
        }
    }
}
