"""Proven lower bounds on a schedule's cost: Lagrangian relaxation of the site
constraints (:mod:`.lagrange`), Dantzig-Wolfe column generation (:mod:`.decomposition`),
variable splitting inside a coupled window (:mod:`.split`) and the solve's relaxation
phases over them (:mod:`.relaxation`)."""
