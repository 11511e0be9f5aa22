"""The processes a solve runs in: forked workers with the solve's data, the HiGHS
child's parent-death signal, and a running solve's stop request."""
