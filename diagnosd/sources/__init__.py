"""Sources: where numbers come from. Only this package and sinks/ touch the network."""

from diagnosd.sources.base import QuerySource, Sample
from diagnosd.sources.prometheus import PrometheusConfig, PrometheusSource

__all__ = ["PrometheusConfig", "PrometheusSource", "QuerySource", "Sample"]
