//! `gpuspan collect` on the command line: the collector started with the flags' limits, run
//! until SIGINT or SIGTERM, and what it handled printed when it stops.

use super::CommandError;

/// What `gpuspan collect` holds at most, from its command line.
pub(super) struct Limits {
    pub(super) max_request_bytes: usize,
    pub(super) max_queue_bytes: usize,
    pub(super) max_concurrent_requests: usize,
    pub(super) max_connections: usize,
}

pub(super) fn collect(
    grpc: Option<std::net::SocketAddr>,
    http: Option<std::net::SocketAddr>,
    limits: Limits,
    tls: Option<(std::path::PathBuf, std::path::PathBuf)>,
) -> Result<(), CommandError> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    // Over TLS, the addresses are given as the endpoints a program sends to.
    let (over, scheme) = match tls {
        Some(_) => (" over TLS,", "https://"),
        None => ("", ""),
    };
    let mut signals =
        signal_hook::iterator::Signals::new([SIGINT, SIGTERM]).map_err(CommandError::Signals)?;
    let collector = crate::collect::Collector::builder()
        .grpc_addr(grpc)
        .http_addr(http)
        .max_request_bytes(limits.max_request_bytes)
        .max_queue_bytes(limits.max_queue_bytes)
        .max_concurrent_requests(limits.max_concurrent_requests)
        .max_connections(limits.max_connections)
        .tls(tls)
        .start()?;
    let listening: Vec<String> = [
        ("gRPC", collector.grpc_addr()),
        ("HTTP", collector.http_addr()),
    ]
    .iter()
    .filter_map(|(name, addr)| addr.map(|a| format!("{name} on {scheme}{a}")))
    .collect();
    eprintln!(
        "gpuspan collect: OTLP{over} {}; forwarding to {}",
        listening.join(", "),
        collector.forward_to()
    );
    let _ = signals.forever().next();
    let stats = collector.shutdown(std::time::Duration::from_secs(10));
    eprintln!(
        "gpuspan collect: {} spans received, {} given GPU memory, {} passed unchanged, {} \
         forwarded, {} dropped; {} metric requests; {} requests rejected; {} requests refused \
         while the forward queue was full (their senders retry them)",
        stats.spans_received,
        stats.spans_enriched,
        stats.spans_passed,
        stats.spans_forwarded,
        stats.spans_dropped,
        stats.metric_requests_received,
        stats.requests_rejected,
        stats.requests_refused
    );
    Ok(())
}
