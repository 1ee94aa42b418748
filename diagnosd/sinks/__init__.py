"""Sinks: where findings leave diagnosd (metrics re-export, alert rules, Alertmanager, Grafana)."""
