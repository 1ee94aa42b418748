"""diagnosd: walks LLM-serving troubleshooting trees against Prometheus, with the evidence."""

__version__ = "0.1.0"
