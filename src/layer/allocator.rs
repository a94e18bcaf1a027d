//! Counters a framework's allocator pushes (bytes allocated and reserved by its caching
//! allocator), for the figures NVML cannot see: how much of the reserved pool is in use.

use super::with_current;

/// Records the framework allocator's counters, in bytes.
///
/// Call it from framework code whenever the counters change (after a forward or backward
/// pass, say), for example with PyTorch's `memory_allocated()` and `memory_reserved()` or
/// candle's and burn's equivalents. Spans open at that moment record the highest values as
/// `gpu.allocator.allocated.peak` and `gpu.allocator.reserved.peak`. Without an installed
/// [`Telemetry`](crate::Telemetry) it does nothing.
pub fn record_allocator(allocated: u64, reserved: u64) {
    with_current(|shared| shared.record_allocator(Some(allocated), Some(reserved)));
}
