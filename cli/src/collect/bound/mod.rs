//! How many bytes decoding a request body will allocate, found before decoding it, so that a
//! request the collector cannot hold is refused without being decoded.
//!
//! A decoded request can be far larger than its body: an empty span is 2 bytes of protobuf
//! and a 264-byte struct, so 16 MiB of them decode to 2 GiB. The body is walked once, by
//! the schema of the request ([`schema`]), without building anything: every vector's
//! capacity as the decoder will grow it, every string and byte field, and the decoder's
//! own copies (the JSON decoder copies a flattened `oneof`'s entries before reading them).
//! The figure is an upper bound of what [`super::size`] measures on the decoded request and
//! of what decoding allocates on the way. Pure functions; no threading.

mod json;
mod protobuf;
mod schema;

use super::decode::{Format, Rejection};
use super::size::{allocation, ALLOCATION_OVERHEAD};

/// What a body will hold once decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Foreseen {
    /// At most this many bytes.
    AtMost(usize),
    /// More than the cap the walk was given: at least this many bytes, found before the
    /// walk stopped.
    Over(usize),
}

/// What decoding `body` as an `ExportTraceServiceRequest` allocates at most, or why it is
/// not one. The walk stops once the figure is over `cap`.
pub(crate) fn traces(format: Format, body: &[u8], cap: usize) -> Result<Foreseen, Rejection> {
    foresee(
        &schema::TRACES,
        "ExportTraceServiceRequest",
        format,
        body,
        cap,
    )
}

/// What decoding `body` as an `ExportMetricsServiceRequest` allocates at most, or why it is
/// not one. The walk stops once the figure is over `cap`.
pub(crate) fn metrics(format: Format, body: &[u8], cap: usize) -> Result<Foreseen, Rejection> {
    foresee(
        &schema::METRICS,
        "ExportMetricsServiceRequest",
        format,
        body,
        cap,
    )
}

fn foresee(
    root: &'static schema::Message,
    what: &str,
    format: Format,
    body: &[u8],
    cap: usize,
) -> Result<Foreseen, Rejection> {
    let mut tally = Tally {
        bytes: root.size,
        cap,
    };
    let walked = match format {
        Format::Protobuf => protobuf::walk(root, body, &mut tally).map_err(str::to_owned),
        Format::Json => json::walk(root, body, &mut tally),
    };
    if tally.over() {
        return Ok(Foreseen::Over(tally.bytes));
    }
    walked
        .map(|()| Foreseen::AtMost(tally.bytes))
        .map_err(|reason| {
            let format = match format {
                Format::Protobuf => "a protobuf",
                Format::Json => "an OTLP/JSON",
            };
            Rejection::new(400, format!("body is not {format} {what} ({reason})"))
        })
}

/// Bytes counted so far, and where counting can stop.
#[derive(Debug)]
struct Tally {
    bytes: usize,
    cap: usize,
}

impl Tally {
    fn add(&mut self, bytes: usize) {
        self.bytes = self.bytes.saturating_add(bytes);
    }

    /// Over the cap: the walk stops, whatever the rest holds.
    fn over(&self) -> bool {
        self.bytes > self.cap
    }
}

/// The standard library's smallest capacity for a vector of `element`-byte items.
fn first_capacity(element: usize) -> usize {
    match element {
        1 => 8,
        2..=1024 => 4,
        _ => 1,
    }
}

/// The capacity of a vector after `n` pushes from empty: doubling from its first capacity.
fn grown(n: usize, element: usize) -> usize {
    if n == 0 {
        return 0;
    }
    n.checked_next_power_of_two()
        .unwrap_or(usize::MAX)
        .max(first_capacity(element))
}

/// A capacity bound that holds for a vector filled in several parts, when each part is
/// counted on its own (a protobuf message repeated and merged): at least [`grown`] of the
/// total, and the sum over the parts is at least that of the whole.
fn grown_in_parts(n: usize, element: usize) -> usize {
    if n == 0 {
        return 0;
    }
    n.saturating_mul(2).saturating_add(first_capacity(element))
}

/// Heap bytes of a vector of `n` `element`-byte items.
fn vector(n: usize, element: usize, in_parts: bool) -> usize {
    let capacity = if in_parts {
        grown_in_parts(n, element)
    } else {
        grown(n, element)
    };
    allocation(capacity.saturating_mul(element))
}

/// Heap bytes of a string or byte field of `len` bytes as prost decodes it (a reserve of
/// the length, at least 8). A field given again reuses the buffer and at most doubles it,
/// so one given several times (or merged) counts each time, doubled.
fn text(len: usize, again: bool) -> usize {
    if len == 0 {
        return 0;
    }
    let capacity = len.max(first_capacity(1));
    allocation(if again {
        capacity.saturating_mul(2)
    } else {
        capacity
    })
}

#[cfg(test)]
mod tests;
