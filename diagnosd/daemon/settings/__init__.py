"""diagnosd's settings: the model (model) and where its values come from (loader)."""

from diagnosd.daemon.settings.model import Settings

__all__ = ["Settings"]
