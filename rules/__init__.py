"""The shipped troubleshooting trees, installed as the package `diagnosd.rules` (see pyproject.toml).

This directory is their one copy: a checkout, an editable install and a wheel all read these files,
found with importlib.resources (diagnosd.runtime.shipped_rules_dir). Only the YAML files are rules.
"""
