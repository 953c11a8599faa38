"""The exact tree solver's tunables, declared once.

Every module of the solver reads them as ``settings.NAME`` at call time, so a test (or a
user) may change one with ``monkeypatch.setattr(settings, "NAME", value)``. Tolerances the
tree solver shares with the search (``TREE_BRACKET_RTOL``, ``BRACKET_RTOL``) live in
:mod:`robustscope.solvers.tolerances`.
"""

from __future__ import annotations

# -- relations between features (milp_rows.relation_block, milp.solve_class) ------------------
#: Under relations a feature's column moves at most this many scales from the input (radius
#: units), so that its big-M rows stay finite; bounds certified under relations are capped here.
REL_RADIUS_CAP = 1e6
#: HiGHS primal and MIP feasibility tolerance set when the program holds relations, so that a
#: solution sits within the relations' own tolerance (1e-9 relative).
REL_FEASIBILITY_TOLERANCE = 1e-9
#: L2 under relations: rounds of tangent cuts on the related features' squared distances.
OA_ROUNDS = 30

# -- HiGHS options (milp.Backend, milp.run_highspy, milp.run_scipy) ---------------------------
#: HiGHS optimality gaps (relative, absolute) asked for.
MIP_REL_GAP = 1e-9
MIP_ABS_GAP = 1e-12
#: HiGHS options of the feasibility programs. Presolve is off: the program handed over is
#: already reduced (fixed cuts, unreachable leaves and constant trees removed), and HiGHS's
#: presolve then costs more than it saves (3-5x slower on LightGBM programs of ~400 binaries,
#: measured). The MIP feasibility tolerance (also used when pruning nodes against the
#: incumbent) is tightened from 1e-6: with it, HiGHS returned an L2 optimum 1.6e-4 too large
#: as optimal.
HIGHS_OPTIONS = {"presolve": "off", "mip_feasibility_tolerance": 1e-9}
#: Changes for programs that minimise the norm (L1, L2; Linf under relations). Presolve on:
#: with it off, HiGHS 1.16 returned moves above the optimum as optimal: 1% on a one-hot forest
#: under L1 (with an objective-cutoff row), 0.5% on a random forest under L2 (without one:
#: input 11 of the benchmark). ``milp_search.solve_input`` also refuses a dual bound above a
#: verified counterexample (:data:`BOUND_SLACK`). Restarts off and primal heuristics at effort
#: 0.02 (HiGHS's default 0.05): the minimisation starts with the walks' counterexample as its
#: objective bound, and HiGHS's root node (restarts, sub-MIP heuristics) was most of its time.
#: Measured on 2 Dec 2026 against presolve on alone, in one run per model and norm (the first
#: 16 benchmark inputs, time limit 10 s, same radii wherever both closed), seconds in all:
#: XGBoost L1 9.5 to 3.2, L2 3.0 to 1.6; LightGBM L1 87 to 69, L2 34.5 to 18.6; random
#: forest L1 107 to 105 (closed 9 against 8), L2 84.5 to 71.5 (closed 14 against 11). Where the
#: forest's L1 programs hit the time limit, the counterexamples of 3 of 8 inputs were 2-14%
#: above those of the default options. Effort 0 with RINS / RENS off was a little faster on
#: XGBoost, but left the forest's timed-out counterexamples up to 46% above; restarts and
#: feasibility jump off with the default effort (measured earlier) cost the forest 3 more
#: timeouts of 24.
MINIMISE_OPTIONS = {"presolve": "on", "mip_allow_restart": False, "mip_heuristic_effort": 0.02}

# -- the MILP search (milp_search) ------------------------------------------------------------
#: A program's dual bound more than this (relative) above a verified counterexample's cost
#: shows the solver was wrong: that level certifies nothing (``meta["refused_bounds"]``).
BOUND_SLACK = 1e-6
#: A verified counterexample's cost, raised by this (relative), is the objective bound the
#: minimisation prunes against: its own cell stays inside despite rounding.
INCUMBENT_SLACK = 1e-7

# -- the bracket before any program (bracket) -------------------------------------------------
#: Beam width of the leaf walks (:func:`~robustscope.solvers.exact.trees.leaf_bounds.walk`; 1
#: would be a greedy walk). At the exact Linf radius, width 32 found a counterexample on 24 of
#: 24 LightGBM inputs of the benchmark, width 1 on 17.
WALK_WIDTH = 32
#: Leaf walks tried per input (at candidate radii: up from the certified bound, then
#: bisection) before the MILP takes over.
MAX_WALKS = 10
#: Nodes the branch and bound over leaf choices (``bracket.exhaust``) may visit per input and
#: class before the MILP takes over (about 1.5 s on the LightGBM model of the benchmark).
SEARCH_NODES = 100_000
#: Nodes per second the leaf search is assumed to reach at the least (the slowest measured
#: is about 65,000 / s): what is left of an input's time limit caps its nodes at this rate.
SEARCH_NODES_PER_SECOND = 20_000
#: Radii tried at once when a walk's counterexample is pulled towards its input
#: (``bracket.shrink``).
SHRINK_STEPS = 24
#: Rounds of ``bracket.polish`` per counterexample (each moves one feature back).
POLISH_ROUNDS = 32

# -- the compiled-program cache (compiled) ----------------------------------------------------
#: Compiled (ensemble, feature space) pairs kept in the process, least recently used out first.
COMPILED_CACHE_SIZE = 8
