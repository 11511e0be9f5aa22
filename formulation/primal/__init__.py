"""Schedules that meet every constraint: the baselines priced beside every answer
(:mod:`.baselines`), per-deployment re-optimisation (:mod:`.heuristics`) and the exact
solve by lazy coupling, the MILP only where the site constraints bind (:mod:`.window`)."""
