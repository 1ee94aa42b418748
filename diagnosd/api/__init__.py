"""The REST API and the Alertmanager webhook, built by `create_app(runtime)`."""

from diagnosd.api.app import create_app

__all__ = ["create_app"]
