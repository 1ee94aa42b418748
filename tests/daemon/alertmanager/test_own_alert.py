"""diagnosd's own derived alert in a delivery (DiagnosdRootCause carries `symptom`, a known one):
skipped with its own reason, the other alerts of the delivery taken as ever."""

from __future__ import annotations

import copy
from datetime import UTC, datetime

from diagnosd.daemon import compose
from diagnosd.daemon.alertmanager.payload import Payload, Skip, plan
from diagnosd.sinks.alertmanager import ALERTNAME
from tests.serving import RULES, sample

TREES = compose.load(RULES).ruleset.trees
NOW = datetime(2026, 11, 29, 14, 30, tzinfo=UTC)


def test_the_derived_alert_is_skipped_as_diagnosd_s_own() -> None:
    body = sample("webhook-received.json")
    [symptom_alert] = body["alerts"]
    derived = copy.deepcopy(symptom_alert) | {"fingerprint": "d1a9d05dd1a9d05d"}
    derived["labels"] = {**symptom_alert["labels"], "alertname": ALERTNAME, "symptom": "queue_backlog"}
    derived["labels"] |= {"cause": "kv_pool_full"}
    body["alerts"] = [derived, symptom_alert]
    planned = plan(Payload.model_validate(body), TREES, {"VLLMQueueBacklog": "queue_backlog"}, [], NOW)
    assert [(s.fingerprint, s.alertname, s.reason) for s in planned.skipped] == [
        ("d1a9d05dd1a9d05d", ALERTNAME, Skip.OWN_ALERT)
    ]
    assert [job.fingerprint for job in planned.jobs] == [symptom_alert["fingerprint"]]
