"""What the service runs on, whatever it computes: its settings, the solver pool, the
database (sites, plans, events, jobs), the job store and its webhooks, and the metrics.
Imports nothing else of the service."""
