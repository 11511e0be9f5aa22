"""Mixed-integer programs: the compact schedule MILP of SPEC 4 (:mod:`.compact`) and
HiGHS run in a process of its own (:mod:`.highs`, :mod:`.highs_child`)."""
