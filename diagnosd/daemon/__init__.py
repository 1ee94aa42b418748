"""The daemon: one composition root (compose), the Diagnoser, the scheduler, the Alertmanager
intake and the settings they are built from."""
