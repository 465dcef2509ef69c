"""A small metrics registry rendered in the Prometheus text exposition format (0.0.4).

Only what the node needs: gauges (set or computed on scrape), counters and histograms with
fixed buckets. Names follow Prometheus conventions (`kraft_` prefix, `_total` counters,
`_seconds` histograms).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Mapping

DEFAULT_LATENCY_BUCKETS = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)

DISK_LATENCY_BUCKETS = (
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0, 10.0,
)
"""For fsync times: a local SSD or a virtual disk flushes in 0.05-0.5 ms, a network volume
in milliseconds; etcd's guidance wants its WAL fsync below 10 ms at p99."""


def _fmt(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if float(value).is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(float(value))


class Gauge:
    """A value that goes up and down; either set, or read from `fn` at scrape time."""

    def __init__(self, name: str, help_text: str, fn: Callable[[], float] | None = None) -> None:
        self.name = name
        self.help = help_text
        self.value = 0.0
        self._fn = fn

    def set(self, value: float) -> None:
        """Set the current value."""
        self.value = value

    def read(self) -> float:
        """The current value."""
        return float(self._fn()) if self._fn is not None else self.value

    def render(self) -> list[str]:
        """Exposition lines."""
        return [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} gauge",
                f"{self.name} {_fmt(self.read())}"]


class Counter:
    """A monotonically increasing count."""

    def __init__(self, name: str, help_text: str) -> None:
        self.name = name
        self.help = help_text
        self.value = 0.0

    def inc(self, amount: float = 1.0) -> None:
        """Add `amount` (>= 0)."""
        self.value += amount

    def render(self) -> list[str]:
        """Exposition lines."""
        return [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} counter",
                f"{self.name} {_fmt(self.value)}"]


class CounterFamily:
    """Counters of one name told apart by label values (`labels(...)` gives one, made at its
    first use); rendered one line per label set, in the order they were first used."""

    def __init__(self, name: str, help_text: str, label_names: tuple[str, ...]) -> None:
        self.name = name
        self.help = help_text
        self.label_names = label_names
        self._children: dict[tuple[str, ...], Counter] = {}

    def labels(self, *values: str) -> Counter:
        """The counter of these label values (one per label name)."""
        child = self._children.get(values)
        if child is None:
            if len(values) != len(self.label_names):
                raise ValueError(f"{self.name}: expected labels {self.label_names}, got {values}")
            child = self._children[values] = Counter(self.name, self.help)
        return child

    def value(self, *values: str) -> float:
        """The count of these label values (0 when never used)."""
        child = self._children.get(values)
        return child.value if child is not None else 0.0

    def render(self) -> list[str]:
        """Exposition lines."""
        lines = [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} counter"]
        for values, child in self._children.items():
            labels = ",".join(f'{k}="{_escape_label(v)}"'
                              for k, v in zip(self.label_names, values, strict=True))
            lines.append(f"{self.name}{{{labels}}} {_fmt(child.value)}")
        return lines


class GaugeFamily:
    """Gauges of one name told apart by label values, all read from `fn` at scrape time (a
    mapping from label values to the value)."""

    def __init__(self, name: str, help_text: str, label_names: tuple[str, ...],
                 fn: Callable[[], Mapping[tuple[str, ...], float]]) -> None:
        self.name = name
        self.help = help_text
        self.label_names = label_names
        self._fn = fn

    def render(self) -> list[str]:
        """Exposition lines."""
        lines = [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} gauge"]
        for values, value in self._fn().items():
            labels = ",".join(f'{k}="{_escape_label(v)}"'
                              for k, v in zip(self.label_names, values, strict=True))
            lines.append(f"{self.name}{{{labels}}} {_fmt(value)}")
        return lines


def _escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


class Histogram:
    """Observations counted in cumulative buckets, with their sum and count."""

    def __init__(
        self, name: str, help_text: str, buckets: tuple[float, ...] = DEFAULT_LATENCY_BUCKETS
    ) -> None:
        self.name = name
        self.help = help_text
        self.buckets = tuple(sorted(buckets))
        self.counts = [0] * (len(self.buckets) + 1)
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        """Record one observation."""
        self.counts[bisect.bisect_left(self.buckets, value)] += 1
        self.sum += value
        self.count += 1

    def quantile(self, q: float) -> float:
        """An upper-bound estimate of the q-quantile (the bucket bound it falls in)."""
        if self.count == 0:
            return math.nan
        rank = q * self.count
        seen = 0
        for bound, n in zip((*self.buckets, math.inf), self.counts):
            seen += n
            if seen >= rank:
                return bound
        return math.inf

    def render(self) -> list[str]:
        """Exposition lines."""
        lines = [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} histogram"]
        cumulative = 0
        for bound, n in zip((*self.buckets, math.inf), self.counts):
            cumulative += n
            lines.append(f'{self.name}_bucket{{le="{_fmt(bound)}"}} {cumulative}')
        lines.append(f"{self.name}_sum {_fmt(self.sum)}")
        lines.append(f"{self.name}_count {self.count}")
        return lines


class Registry:
    """Holds the metrics of one node and renders them."""

    def __init__(self) -> None:
        self._metrics: dict[str, Gauge | Counter | CounterFamily | GaugeFamily | Histogram] = {}

    def gauge(self, name: str, help_text: str, fn: Callable[[], float] | None = None) -> Gauge:
        """Register a gauge."""
        g = Gauge(name, help_text, fn)
        self._metrics[name] = g
        return g

    def counter(self, name: str, help_text: str) -> Counter:
        """Register a counter."""
        c = Counter(name, help_text)
        self._metrics[name] = c
        return c

    def counter_family(self, name: str, help_text: str,
                       label_names: tuple[str, ...]) -> CounterFamily:
        """Register counters told apart by labels."""
        f = CounterFamily(name, help_text, label_names)
        self._metrics[name] = f
        return f

    def gauge_family(self, name: str, help_text: str, label_names: tuple[str, ...],
                     fn: Callable[[], Mapping[tuple[str, ...], float]]) -> GaugeFamily:
        """Register gauges told apart by labels, read from `fn` at scrape time."""
        f = GaugeFamily(name, help_text, label_names, fn)
        self._metrics[name] = f
        return f

    def histogram(
        self, name: str, help_text: str, buckets: tuple[float, ...] = DEFAULT_LATENCY_BUCKETS
    ) -> Histogram:
        """Register a histogram."""
        h = Histogram(name, help_text, buckets)
        self._metrics[name] = h
        return h

    def render(self) -> str:
        """The whole registry in Prometheus text format."""
        lines: list[str] = []
        for metric in self._metrics.values():
            lines.extend(metric.render())
        return "\n".join(lines) + "\n"
