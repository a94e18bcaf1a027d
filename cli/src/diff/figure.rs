//! The figures a comparison holds for each row, by the names the table, the JSON and
//! `--max-increase` share.

use serde::Serialize;

/// A figure of a row, as the table, the JSON and `--max-increase` name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum Figure {
    /// The highest peak of the row's spans.
    Peak,
    /// Memory at the end of the last span minus memory at the start of the first.
    Growth,
    /// The framework allocator's highest allocated bytes (`gpu.allocator.allocated.peak`).
    AllocatorPeak,
    /// The highest of what the process held beyond the allocator's pool
    /// (`gpu.memory.non_allocator.peak`).
    NonAllocatorPeak,
    /// The batch-size fit's bytes per sample.
    BytesPerSample,
    /// The largest batch the fit says fits the run's limit.
    MaxBatchSize,
    /// The mean `gpu.energy` of the row's spans, in millijoules: joules per step on a
    /// `step` row, per epoch on an `epoch` row. Limited only when asked
    /// (`energy=10%`).
    Energy,
}

impl Figure {
    /// Every figure, in the order rows list them.
    pub const ALL: [Self; 7] = [
        Self::Peak,
        Self::Growth,
        Self::AllocatorPeak,
        Self::NonAllocatorPeak,
        Self::BytesPerSample,
        Self::MaxBatchSize,
        Self::Energy,
    ];

    /// The figures `--max-increase` may limit (a larger batch is no regression).
    pub const GATED: [Self; 6] = [
        Self::Peak,
        Self::Growth,
        Self::AllocatorPeak,
        Self::NonAllocatorPeak,
        Self::BytesPerSample,
        Self::Energy,
    ];

    /// `peak`, `growth`, `allocator_peak`, `non_allocator_peak`, `bytes_per_sample`,
    /// `max_batch_size`, `energy`.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Peak => "peak",
            Self::Growth => "growth",
            Self::AllocatorPeak => "allocator_peak",
            Self::NonAllocatorPeak => "non_allocator_peak",
            Self::BytesPerSample => "bytes_per_sample",
            Self::MaxBatchSize => "max_batch_size",
            Self::Energy => "energy",
        }
    }

    /// Whether the figure is a count of bytes (else of samples or millijoules).
    pub const fn is_bytes(self) -> bool {
        !matches!(self, Self::MaxBatchSize | Self::Energy)
    }

    /// Whether the figure is energy, in millijoules.
    pub const fn is_energy(self) -> bool {
        matches!(self, Self::Energy)
    }
}

impl Serialize for Figure {
    fn serialize<S: serde::Serializer>(&self, out: S) -> Result<S::Ok, S::Error> {
        out.serialize_str(self.name())
    }
}
