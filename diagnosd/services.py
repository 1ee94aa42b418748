"""The daemon's live parts, opened from a Runtime and closed in reverse order.

Opens the Prometheus client, the findings store, the metrics, the alert inbox and the scheduler;
the API's lifespan holds them for exactly as long as the app serves.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass

from diagnosd.diagnoser import Diagnoser
from diagnosd.findings.store import Store
from diagnosd.findings.tracker import Tracker
from diagnosd.inbox import Inbox
from diagnosd.runtime import Runtime
from diagnosd.scheduler import Scheduler
from diagnosd.sinks.metrics import FindingsCollector, Metrics
from diagnosd.sources.base import QuerySource

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Services:
    runtime: Runtime
    source: QuerySource
    store: Store
    metrics: Metrics
    tracker: Tracker
    diagnoser: Diagnoser
    inbox: Inbox
    scheduler: Scheduler


@asynccontextmanager
async def open_services(runtime: Runtime) -> AsyncIterator[Services]:
    settings = runtime.settings
    async with AsyncExitStack() as stack:
        source = await stack.enter_async_context(runtime.source())
        store = Store.open(settings.store.path)
        stack.callback(store.close)
        metrics = Metrics(runtime.registry)
        stack.callback(metrics.close)
        metrics.trees.set(len(runtime.rules.ruleset.trees))
        tracker = Tracker(store, metrics.transition)
        metrics.attach(
            FindingsCollector(
                tracker.active,
                lambda: tracker.states(runtime.clock(), settings.findings.state_ttl),
                settings.metrics.max_series,
                metrics.dropped,
            )
        )
        diagnoser = Diagnoser(
            source,
            runtime.rules.ruleset,
            runtime.rules.aliases,
            metrics,
            strict_labels=settings.prometheus.strict_labels,
            params=settings.params,
            topology=settings.topology.topology(),
            clock=runtime.clock,
        )
        hook = settings.webhook
        inbox = Inbox(
            store,
            tracker,
            diagnoser,
            metrics,
            runtime.clock,
            capacity=hook.queue_size,
            workers=hook.workers,
            max_attempts=hook.max_attempts,
            retry_after=hook.retry_after,
        )
        await inbox.start()
        stack.push_async_callback(inbox.stop)
        scheduler = Scheduler(settings, diagnoser, tracker, store, inbox, metrics, runtime.clock)
        scheduler.start()
        stack.push_async_callback(scheduler.stop)
        log.info(
            "diagnosd ready: %d trees, %d active findings, store %s",
            len(runtime.rules.ruleset.trees),
            len(tracker.active()),
            store.path,
        )
        yield Services(runtime, source, store, metrics, tracker, diagnoser, inbox, scheduler)
