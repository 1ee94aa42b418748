"""A finding in words, as the push sinks carry it: summary, evidence lines, remediation, in en and zh."""

from __future__ import annotations

from dataclasses import replace

from diagnosd.render.finding import finding_words
from diagnosd.trees.model import Text
from tests.sinks.builders import finding


def test_english_words_name_the_cause_symptom_and_target_with_the_numbers() -> None:
    words = finding_words(finding("vllm-0"), "en")
    assert words.summary == "root cause: kv_pool_full title (symptom queue_backlog on namespace=prod, pod=vllm-0)"
    assert words.evidence == ("kv_pool_full: 0.95 (threshold > 0.9)",)
    assert words.remediation == ("fix it",)


def test_chinese_words_and_a_caveat_as_the_last_evidence_line() -> None:
    f = finding("vllm-0")
    f = replace(f, root_cause=replace(f.root_cause, caveat=Text(en="assumed limit", zh="假设的上限")))
    words = finding_words(f, "zh")
    assert words.summary == "根因：原因（症状 queue_backlog，namespace=prod, pod=vllm-0）"
    assert words.evidence == ("kv_pool_full: 0.95（阈值 > 0.9）", "注意：假设的上限")
    assert words.remediation == ("修",)
