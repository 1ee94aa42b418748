"""A finding in words, in English or Chinese: what the push sinks carry to people (an Alertmanager
alert's annotations, a Grafana annotation's text). The numbers read as in the text tree."""

from __future__ import annotations

from dataclasses import dataclass

from diagnosd.findings.lifecycle import Finding
from diagnosd.render.text import describe, pick


@dataclass(frozen=True)
class FindingWords:
    # The cause, its symptom and the target, on one line.
    summary: str
    # The branch taken, outermost check first: one line each, with its numbers.
    evidence: tuple[str, ...]
    remediation: tuple[str, ...]


def finding_words(f: Finding, lang: str = "en") -> FindingWords:
    cause = f.root_cause
    target = ", ".join(f"{name}={value}" for name, value in sorted(f.labels.items()))
    title = pick(cause.title, lang)
    if lang == "zh":
        summary = f"根因：{title}（症状 {f.symptom}，{target}）"
    else:
        summary = f"root cause: {title} (symptom {f.symptom} on {target})"
    evidence = tuple(f"{e.check}: {describe(e, lang)}" for e in cause.evidence)
    if cause.caveat is not None:
        evidence += (("注意：" if lang == "zh" else "caveat: ") + pick(cause.caveat, lang),)
    return FindingWords(summary, evidence, tuple(pick(step, lang) for step in cause.remediation))
