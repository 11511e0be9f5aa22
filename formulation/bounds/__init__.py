"""Proven lower bounds on a schedule's cost: Lagrangian relaxation of the site
constraints (:mod:`.lagrange`), Dantzig-Wolfe column generation (:mod:`.decomposition`)
and variable splitting inside a coupled window (:mod:`.split`)."""
