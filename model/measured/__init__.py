"""Measurements and what is fitted or checked against them: power and throughput
records, their screening, the calibrations and engine overheads fitted to them, and the
model's predictions and decisions against measured deployments and clock series."""
