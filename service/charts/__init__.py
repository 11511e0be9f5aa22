"""The charts of the answers (PNG): a schedule, a front, a demand-response what-if and a
flexibility curve. Imports nothing else of the service."""
