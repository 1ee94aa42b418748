"""Artefacts made from the rules: Prometheus alerting rules for the symptoms, the catalog doc; and
diagnosd's Grafana dashboard (dashboard.py, run at development time: it needs grafana-foundation-sdk)."""
