"""Schedules that meet every constraint: the baselines priced beside every answer
(:mod:`.baselines`), per-deployment re-optimisation (:mod:`.heuristics`), the exact
solve by lazy coupling, the MILP only where the site constraints bind (:mod:`.window`),
the schedules drawn from the relaxation (:mod:`.relaxed`) and the local search around
the incumbent (:mod:`.search`)."""
