"""Findings: Diagnosis, Evidence, Verdict and the rest of what an evaluation returns."""

from diagnosd.findings.model import (
    CheckResult,
    Diagnosis,
    Evidence,
    NodeKind,
    Reason,
    RootCause,
    TargetDiagnosis,
    Verdict,
)

__all__ = [
    "CheckResult",
    "Diagnosis",
    "Evidence",
    "NodeKind",
    "Reason",
    "RootCause",
    "TargetDiagnosis",
    "Verdict",
]
