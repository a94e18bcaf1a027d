"""What the allocator tests share: counters kept as a caching allocator keeps them, for a
script to stand in for one, and the allocator figures a span carries."""

from conftest import MIB

# Defines `CachingCounters`, for a script to subclass with the interface it stands in for.
CACHING_COUNTERS = """
class CachingCounters:
    # Counters as a caching allocator keeps them: reserved grows to the highest
    # allocated figure and is never given back; peaks since the last reset.
    def __init__(self):
        self.allocated = self.reserved = self.peak_allocated = self.peak_reserved = 0

    def malloc(self, n):
        self.allocated += n
        self.reserved = max(self.reserved, self.allocated)
        self.peak_allocated = max(self.peak_allocated, self.allocated)
        self.peak_reserved = max(self.peak_reserved, self.reserved)

    def free(self, n):
        self.allocated -= n
"""


def figures(span):
    """A span's (allocated start, peak, end, reserved start, peak, end) in MiB."""
    a = span["attributes"]
    return tuple(
        a[f"gpu.allocator.{kind}.{edge}"] // MIB
        for kind in ("allocated", "reserved")
        for edge in ("start", "peak", "end")
    )
