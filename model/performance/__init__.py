"""Where a deployment's times come from: SPEC's rooflines with a calibration, measured
kernel tables composed into forward passes with the serving engine's overheads, the KV
link between the phases and speculative decoding."""
