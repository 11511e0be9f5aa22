"""The exact pieces every algorithm builds on: one deployment alone over the horizon
(:mod:`.dp`, a shortest path) and one period alone across deployments (:mod:`.period`,
a multiple-choice knapsack)."""
