"""Tolerances shared by the solvers and the search, declared once.

Each is relative to the radius (``hi - lo <= rtol * hi``) unless its comment says otherwise.
"""

#: A certified bracket narrower than this counts as exact (status ``exact``): HiGHS's MILP
#: tolerances (about 1e-7 on rows, 1e-4 relative gap) and bound propagation's bisection make
#: a bracket that is closed in exact arithmetic end up this wide.
BRACKET_RTOL = 1e-4
#: The exact tree solver's own closing test, inside its search: its bounds and candidates are
#: float64 costs of the same boxes, so a bracket it closes is closed to rounding.
TREE_BRACKET_RTOL = 1e-7
