"""Artefacts made from the rules: Prometheus alerting rules for the symptoms, the catalog doc."""
