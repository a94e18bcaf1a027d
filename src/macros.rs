//! `epoch_span!`, `step_span!` and `memory_span!`.

/// Opens an `epoch` span with `ml.epoch` set, and returns the [`MemorySpan`](crate::MemorySpan)
/// guard that records memory on it when dropped.
///
/// Extra fields use tracing's syntax: `epoch_span!(epoch, lr = 0.1, ?optimizer)`.
///
/// ```
/// for epoch in 0..2 {
///     let _epoch = gpuspan::epoch_span!(epoch, lr = 0.1);
///     // ... train ...
/// }
/// ```
#[macro_export]
macro_rules! epoch_span {
    ($epoch:expr $(, $($fields:tt)*)?) => {
        $crate::__memory_span!(
            $crate::names::span::EPOCH,
            ml.epoch = $crate::__private::index($epoch)
            $(, $($fields)*)?
        )
    };
}

/// Opens a `step` span with `ml.step` set, and returns the [`MemorySpan`](crate::MemorySpan)
/// guard that records memory on it when dropped.
///
/// ```
/// for step in 0..3u64 {
///     let _step = gpuspan::step_span!(step, batch_size = 64);
///     // ... forward, backward, optimizer step ...
/// }
/// ```
#[macro_export]
macro_rules! step_span {
    ($step:expr $(, $($fields:tt)*)?) => {
        $crate::__memory_span!(
            $crate::names::span::STEP,
            ml.step = $crate::__private::index($step)
            $(, $($fields)*)?
        )
    };
}

/// Opens a span with the given name (a string literal, or a constant such as
/// [`names::span::VALIDATION`](crate::names::span::VALIDATION)) that records memory when its
/// [`MemorySpan`](crate::MemorySpan) guard drops: for phases such as `"forward"`,
/// `"backward"`, `"eval"` or `"checkpoint"`.
///
/// ```
/// let _eval = gpuspan::memory_span!("eval", split = "validation");
/// ```
#[macro_export]
macro_rules! memory_span {
    ($name:expr $(, $($fields:tt)*)?) => {
        $crate::__memory_span!($name $(, $($fields)*)?)
    };
}

/// Declares every memory attribute as an empty field (tracing drops values recorded into
/// undeclared fields), then hands the span to the guard. The fields are the rows of the
/// attribute table (`figures::TRACED`), in its order; they are spelled here because
/// tracing's constant field names need the prelude, which a caller may not have (a unit
/// test checks both lists agree).
#[doc(hidden)]
#[macro_export]
macro_rules! __memory_span {
    ($name:expr $(, $($fields:tt)*)?) => {{
        static FIELDS: $crate::__private::FieldCache = $crate::__private::FieldCache::new();
        $crate::MemorySpan::enter(
            $crate::__private::tracing::info_span!(
                $name,
                gpu.memory.start = $crate::__private::Empty,
                gpu.memory.end = $crate::__private::Empty,
                gpu.memory.peak = $crate::__private::Empty,
                gpu.memory.delta = $crate::__private::Empty,
                gpu.memory.imbalance = $crate::__private::Empty,
                gpu.process.memory.start = $crate::__private::Empty,
                gpu.process.memory.end = $crate::__private::Empty,
                gpu.process.memory.peak = $crate::__private::Empty,
                gpu.allocator.allocated.peak = $crate::__private::Empty,
                gpu.allocator.reserved.peak = $crate::__private::Empty,
                process.memory.start = $crate::__private::Empty,
                process.memory.end = $crate::__private::Empty,
                process.memory.peak = $crate::__private::Empty,
                $($($fields)*)?
            ),
            &FIELDS,
        )
    }};
}

/// What the macros expand to; not public API.
#[doc(hidden)]
pub mod __private {
    pub use crate::span::FieldCache;
    pub use tracing;
    pub use tracing::field::Empty;

    /// An epoch or step index, recorded as an OTel integer.
    pub trait Index {
        /// The index as `i64`, saturating.
        fn to_i64(self) -> i64;
    }

    macro_rules! index_from {
        ($($t:ty),*) => {$(
            impl Index for $t {
                fn to_i64(self) -> i64 {
                    i64::try_from(self).unwrap_or(i64::MAX)
                }
            }
        )*};
    }
    index_from!(u8, u16, u32, u64, usize, i8, i16, i32, i64, isize, u128, i128);

    /// Converts an index for recording.
    pub fn index(value: impl Index) -> i64 {
        value.to_i64()
    }
}
