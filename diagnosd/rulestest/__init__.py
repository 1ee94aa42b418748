"""`diagnosd rules test`: series tests as data, on a real Prometheus."""
