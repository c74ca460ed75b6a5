"""A mixed-integer linear program solved by HiGHS (`highspy`), behind a small typed interface.

One place talks to the solver, so that the models read as models and the solver's options that
make an answer reproducible are set once: one thread, a fixed seed, a time limit, no output.
Single-threaded with a fixed seed, a HiGHS release takes the same steps on any machine; only its time limit
depends on the machine's speed, which is why a model that must give the same answer everywhere
also passes `max_nodes` (a work limit) and keeps the time limit as a safety net.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import highspy
import numpy as np

# The bare solver class (in every release from 1.7.2 on): highspy's Python subclass prints HiGHS's
# banner on stdout as it is made, before any option can silence it, which would corrupt a command's
# JSON output.
from highspy._core import _Highs as Solver

INFINITY = math.inf
FEASIBLE = 2
"""HiGHS's kSolutionStatusFeasible: a primal solution is there."""


@dataclass(slots=True)
class LinearProgram:
    """minimize costs . x subject to row_lower <= A x <= row_upper, lower <= x <= upper, some
    columns integer. Rows are added one at a time as sparse (column, coefficient) pairs."""

    costs: list[float] = field(default_factory=list)
    lower: list[float] = field(default_factory=list)
    upper: list[float] = field(default_factory=list)
    integer: list[bool] = field(default_factory=list)
    row_lower: list[float] = field(default_factory=list)
    row_upper: list[float] = field(default_factory=list)
    row_starts: list[int] = field(default_factory=lambda: [0])
    row_columns: list[int] = field(default_factory=list)
    row_values: list[float] = field(default_factory=list)

    def column(self, cost: float, lower: float, upper: float, *, integer: bool = True) -> int:
        """A new column (variable); its index."""
        self.costs.append(cost)
        self.lower.append(lower)
        self.upper.append(upper)
        self.integer.append(integer)
        return len(self.costs) - 1

    def row(self, terms: Sequence[tuple[int, float]], lower: float, upper: float) -> None:
        for column, value in terms:
            self.row_columns.append(column)
            self.row_values.append(value)
        self.row_starts.append(len(self.row_columns))
        self.row_lower.append(lower)
        self.row_upper.append(upper)


@dataclass(frozen=True, slots=True)
class Solution:
    values: tuple[float, ...] | None
    """The best solution found (None: none, within the time limit or at all)."""
    objective: float | None
    dual_bound: float
    """A proven lower bound on the optimum (minimization); -inf when nothing was proven."""
    optimal: bool
    """The solver proved `values` optimal (to its integrality tolerance, with a zero gap asked)."""
    time_limited: bool = False
    """The time limit stopped the solver: where it stopped depends on the machine's speed."""
    row_duals: tuple[float, ...] | None = None
    """A linear program solved to its optimum: each row's dual value (HiGHS's sign: a column's
    reduced cost is its cost less its column of the matrix times these)."""


def solve(
    program: LinearProgram,
    *,
    time_limit_seconds: float,
    relaxed: bool = False,
    start: Sequence[float] | None = None,
    max_nodes: int | None = None,
) -> Solution:
    """Solve the program (`relaxed`: every column continuous, its LP relaxation), from a known
    feasible `start` when given. `max_nodes` stops the branch and bound after that many nodes: a
    limit that, unlike the time limit, ends it at the same point on any machine."""
    highs = Solver()
    for option, value in (
        ("output_flag", False),
        ("threads", 1),
        ("random_seed", 0),
        ("time_limit", float(time_limit_seconds)),
        ("mip_rel_gap", 0.0),
        ("mip_abs_gap", 1e-6),
    ):
        highs.setOptionValue(option, value)
    if max_nodes is not None:
        highs.setOptionValue("mip_max_nodes", max_nodes)
    lp = highspy.HighsLp()
    lp.num_col_ = len(program.costs)
    lp.num_row_ = len(program.row_lower)
    lp.col_cost_ = np.array(program.costs, dtype=np.float64)
    lp.col_lower_ = np.array(program.lower, dtype=np.float64)
    lp.col_upper_ = np.array(program.upper, dtype=np.float64)
    lp.row_lower_ = np.array(program.row_lower, dtype=np.float64)
    lp.row_upper_ = np.array(program.row_upper, dtype=np.float64)
    lp.a_matrix_.format_ = highspy.MatrixFormat.kRowwise
    lp.a_matrix_.num_col_ = lp.num_col_
    lp.a_matrix_.num_row_ = lp.num_row_
    lp.a_matrix_.start_ = np.array(program.row_starts, dtype=np.int32)
    lp.a_matrix_.index_ = np.array(program.row_columns, dtype=np.int32)
    lp.a_matrix_.value_ = np.array(program.row_values, dtype=np.float64)
    if not relaxed and any(program.integer):
        lp.integrality_ = [
            highspy.HighsVarType.kInteger if integer else highspy.HighsVarType.kContinuous
            for integer in program.integer
        ]
    highs.passModel(lp)
    if start is not None and not relaxed:
        given = highspy.HighsSolution()
        given.col_value = [float(value) for value in start]
        given.value_valid = True
        highs.setSolution(given)
    highs.run()
    status = highs.getModelStatus()
    info = highs.getInfo()
    has_values = info.primal_solution_status == FEASIBLE
    values = tuple(highs.getSolution().col_value) if has_values else None
    optimal = status == highspy.HighsModelStatus.kOptimal and has_values
    objective = info.objective_function_value if has_values else None
    if relaxed or not any(program.integer):
        dual_bound = objective if optimal and objective is not None else -INFINITY
    else:
        dual_bound = info.mip_dual_bound if math.isfinite(info.mip_dual_bound) else -INFINITY
    time_limited = status == highspy.HighsModelStatus.kTimeLimit
    linear = relaxed or not any(program.integer)
    duals = tuple(highs.getSolution().row_dual) if linear and optimal else None
    return Solution(values, objective, dual_bound, optimal, time_limited, duals)
