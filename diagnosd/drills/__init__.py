"""Fire drills: where the simulator meets the engine. A scenario's history is backfilled into a
real Prometheus and diagnosed through the composition root (verify), or run under cluster
variations and scored against the scenario's expectations (accuracy). The simulator itself
never imports the engine; this package is the one place the two meet."""
