"""Renderings of a Diagnosis: JSON data (the wire contract) and the seed-style text tree."""

from diagnosd.render import json, text

__all__ = ["json", "text"]
