"""The Alertmanager intake: the webhook payload (payload) and the inbox that records and diagnoses it."""
