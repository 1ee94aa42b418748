"""diagnosd: walks LLM-serving troubleshooting trees against Prometheus, with the evidence."""

# The version, in one place: pyproject.toml reads it (dynamic version), `diagnosd --version` prints it.
__version__ = "0.1.0"
