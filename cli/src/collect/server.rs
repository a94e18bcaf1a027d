//! The OTLP receiver: one router that answers OTLP/HTTP (`/v1/traces`, `/v1/metrics`) and
//! OTLP/gRPC on every port it listens on. Handlers read, bound, decode, count and queue;
//! they never wait on the forward target.
//!
//! A request is read, decompressed and decoded in one of a few slots, so bodies held at
//! once are bounded. Before it is decoded, what decoding it will allocate is found from
//! the body itself ([`super::bound`]) and taken from the forward queue's room
//! ([`super::budget`]); once decoded, it keeps the room it holds with its spans' memory
//! figures. A request larger than the whole bound is refused for good (HTTP 413, gRPC
//! `RESOURCE_EXHAUSTED`, naming the bound and its setting); one that finds no room now is
//! refused with what OTLP exporters retry (HTTP 503 with `Retry-After`, gRPC
//! `UNAVAILABLE`), so its sender keeps it instead of losing it.

mod grpc;
mod http;
mod listen;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::bound::{self, Foreseen};
use super::budget::{give_back_memory, Budget, NoRoom, Room};
use super::decode::{self, Format, Rejection};
use super::pipeline::Forwarding;
use super::size;
pub(crate) use listen::{connection_limit, serve};

/// Seconds a refused sender is asked to wait before it sends again.
pub(crate) const RETRY_AFTER_SECS: u32 = 2;

/// How long a request waits for a slot before it is asked to retry later.
const SLOT_WAIT: Duration = Duration::from_secs(10);

/// How long a request's body may take to arrive once it has a slot: a sender that trickles
/// its body does not keep the slot longer.
const BODY_TIMEOUT: Duration = Duration::from_secs(30);

/// Where received requests go.
#[derive(Clone)]
pub(crate) struct Intake {
    forwarding: Arc<Forwarding>,
    /// The queue's room in decoded bytes.
    budget: Budget,
    /// Largest request body, compressed or not.
    limit: usize,
    /// Requests read, decompressed and decoded at once.
    slots: Arc<Semaphore>,
}

/// Which export a request is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Signal {
    Traces,
    Metrics,
}

/// A decoded request with the room it holds, ready to queue.
enum Admitted {
    Traces(ExportTraceServiceRequest, Room),
    Metrics(ExportMetricsServiceRequest, Room),
}

/// Why a request was not taken in.
enum Refusal {
    /// Malformed, or too large for the bound: answered with the protocol's error.
    Rejected(Rejection),
    /// Not now (the queue is full, or every slot is busy): its sender retries it.
    Later(String),
}

impl Intake {
    pub(crate) fn new(
        forwarding: Arc<Forwarding>,
        budget: Budget,
        limit: usize,
        concurrent: usize,
    ) -> Self {
        Self {
            forwarding,
            budget,
            limit,
            slots: Arc::new(Semaphore::new(concurrent.clamp(1, Semaphore::MAX_PERMITS))),
        }
    }

    /// A slot to read and decode a request in, waiting for one at most [`SLOT_WAIT`].
    async fn slot(&self) -> Result<OwnedSemaphorePermit, Refusal> {
        let slot = Arc::clone(&self.slots).acquire_owned();
        match tokio::time::timeout(SLOT_WAIT, slot).await {
            Ok(Ok(slot)) => Ok(slot),
            _ => Err(self.later(
                "the collector is busy reading other requests (gpuspan collect \
                 --max-concurrent-requests); retry later"
                    .into(),
            )),
        }
    }

    /// Finds what `body` will hold decoded, takes room for it, decodes it, and keeps the
    /// room it holds (with the memory figures its spans may get); or refuses it.
    fn admit(&self, signal: Signal, format: Format, body: &[u8]) -> Result<Admitted, Refusal> {
        let total = self.budget.total();
        let foreseen = match signal {
            Signal::Traces => bound::traces(format, body, total),
            Signal::Metrics => bound::metrics(format, body, total),
        }
        .map_err(Refusal::Rejected)?;
        let decoded = match foreseen {
            Foreseen::AtMost(bytes) => bytes,
            Foreseen::Over(bytes) => {
                return Err(self.no_room(NoRoom::TooLarge, bytes, "at least, once decoded"))
            }
        };
        let mut room = self
            .budget
            .take(decoded)
            .map_err(|no| self.no_room(no, decoded, "once decoded"))?;
        // Once decoded, the room it holds, with the figures its spans may get.
        let keep = |room: &mut Room, holds: usize| {
            room.resize(holds).map_err(|no| {
                give_back_memory(decoded);
                self.no_room(no, holds, "once decoded and given its memory figures")
            })
        };
        match signal {
            Signal::Traces => {
                let request = decode::traces(format, body).map_err(Refusal::Rejected)?;
                let holds =
                    size::traces(&request).saturating_add(self.forwarding.enrichment(&request));
                keep(&mut room, holds)?;
                Ok(Admitted::Traces(request, room))
            }
            Signal::Metrics => {
                let request = decode::metrics(format, body).map_err(Refusal::Rejected)?;
                keep(&mut room, size::metrics(&request))?;
                Ok(Admitted::Metrics(request, room))
            }
        }
    }

    fn queue(&self, admitted: Admitted) {
        match admitted {
            Admitted::Traces(request, room) => self.forwarding.traces(request, room),
            Admitted::Metrics(request, room) => self.forwarding.metrics(request, room),
        }
    }

    fn no_room(&self, no: NoRoom, bytes: usize, when: &str) -> Refusal {
        match no {
            NoRoom::TooLarge => Refusal::Rejected(Rejection::new(
                413,
                format!(
                    "the request would hold {bytes} bytes {when}, more than the collector's \
                     forward queue holds in all ({} bytes); send smaller batches, or raise \
                     the bound with gpuspan collect --max-queue-bytes",
                    self.budget.total()
                ),
            )),
            NoRoom::Full => self.later(format!(
                "the collector's forward queue is full ({} bytes of decoded requests wait \
                 to be forwarded); retry later",
                self.budget.total()
            )),
        }
    }

    /// A refusal to retry later, counted.
    fn later(&self, message: String) -> Refusal {
        self.forwarding
            .counters
            .requests_refused
            .fetch_add(1, Ordering::Relaxed);
        Refusal::Later(message)
    }
}

/// The router that answers both protocols on every port.
pub(crate) fn router(intake: Intake) -> Router {
    let counters = Arc::clone(&intake.forwarding.counters);
    http::routes(intake.clone())
        .merge(grpc::routes(intake))
        .layer(axum::middleware::map_response_with_state(
            counters,
            grpc::count_grpc_rejections,
        ))
}
