"""Degrees of freedom and redundant constraints from the rank of the constraint Jacobian.

Redundancy is local to the blocks (biconnected components) of the joint graph: two blocks share
at most one body, and the equations of a block without the ground are invariant under a common
rigid motion of its bodies, so no combination of equations of different blocks can cancel
(an induction over the leaves of the block-cut tree). Hence

    rank G = (internal rows) + sum over blocks of rank(G_block restricted to the tangent
    space of the bodies' internal constraints),

which costs one small SVD per block instead of one SVD of the whole Jacobian; a 1000-link chain
is 1000 blocks of two bodies.

User constraints need not be invariant under rigid motions, so the argument does not cover
them: every block that shares a body (directly or through other blocks, not counting the
ground) with a user constraint is merged into one block with it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import networkx as nx
import numpy as np
import scipy.linalg as la
import scipy.sparse as sp

from mbs.errors import ModelError, warn_user

#: Singular values below this fraction of the largest one count as zero.
RANK_TOLERANCE = 1e-9
#: Blocks with more columns than this are not rank-checked (dense SVD would be too slow).
MAX_BLOCK_COLUMNS = 3000


@dataclass
class ConstraintGroup:
    """Rows of one joint (or user constraint) and the bodies it connects."""

    name: str
    bodies: tuple[str, ...]
    rows: np.ndarray
    #: Equations invariant under a common rigid motion of the bodies (all built-in joints).
    invariant: bool = True


@dataclass
class BlockRank:
    """Result of the rank analysis of one block."""

    joints: tuple[str, ...]
    equations: int
    rank: int
    involved: tuple[str, ...]
    #: Rows (global indices) whose removal leaves an independent set of equations.
    dependent_rows: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=int))

    @property
    def redundant(self) -> int:
        return self.equations - self.rank


def joint_blocks(groups: list[ConstraintGroup], ground: str) -> list[list[ConstraintGroup]]:
    """Partition the constraint groups into the blocks of the joint graph."""
    graph = nx.Graph()
    for group in groups:
        names = group.bodies
        for i, a in enumerate(names):
            for b in names[i + 1:]:
                graph.add_edge(a, b)
    edge_block = {}
    for index, edges in enumerate(nx.biconnected_component_edges(graph)):
        for a, b in edges:
            edge_block[frozenset((a, b))] = index
    merged = _non_invariant_components(groups, ground)
    blocks: dict[int, list[ConstraintGroup]] = {}
    for group in groups:
        body = next(b for b in group.bodies if b != ground)
        if body in merged:
            key = ("merged", merged[body])
        elif len(group.bodies) == 1:  # a constraint on one body is its own block
            key = ("single", group.bodies[0])
        else:
            key = edge_block[frozenset(group.bodies[:2])]
        blocks.setdefault(key, []).append(group)
    return list(blocks.values())


def _non_invariant_components(groups: list[ConstraintGroup], ground: str) -> dict[str, int]:
    """Component index of every body connected (not through the ground) to a constraint that
    is not invariant under rigid motions; such components are analysed as one block."""
    if all(group.invariant for group in groups):
        return {}
    graph = nx.Graph()
    for group in groups:
        names = [b for b in group.bodies if b != ground]
        graph.add_nodes_from(names)
        graph.add_edges_from(zip(names[:-1], names[1:]))
    out = {}
    for index, component in enumerate(nx.connected_components(graph)):
        if any(not g.invariant and g.bodies[0] in component for g in groups):
            out.update(dict.fromkeys(component, index))
    return out


def analyse_rank(jacobian: sp.csr_matrix, groups: list[ConstraintGroup],
                 body_columns: dict[str, np.ndarray], internal_rows: dict[str, np.ndarray],
                 ground: str, kept_rows: np.ndarray | None = None) -> list[BlockRank]:
    """Rank of the joint equations of every block at the configuration of ``jacobian``.

    ``kept_rows`` (user constraints and drives, which the quadratic tables cannot hold and
    removal cannot drop) are never chosen as dependent rows; when they are dependent among
    themselves a :class:`~mbs.errors.ModelError` names them."""
    kept_rows = np.zeros(0, dtype=int) if kept_rows is None else np.asarray(kept_rows)
    results = []
    for block in joint_blocks(groups, ground):
        bodies = sorted({b for g in block for b in g.bodies if b != ground})
        columns = np.concatenate([body_columns[b] for b in bodies]) if bodies else np.zeros(
            0, dtype=int)
        joint_rows = np.concatenate([g.rows for g in block])
        owner = np.concatenate([[g.name] * g.rows.size for g in block])
        names = tuple(g.name for g in block)
        if columns.size > MAX_BLOCK_COLUMNS:
            warn_user(f"rank check skipped for a loop of {len(bodies)} bodies "
                      f"({columns.size} coordinates); redundant constraints there are not "
                      f"detected")
            results.append(BlockRank(names, joint_rows.size, joint_rows.size, ()))
            continue
        internal = np.concatenate([internal_rows[b] for b in bodies]) if bodies else np.zeros(
            0, dtype=int)
        rows = np.concatenate([joint_rows, internal]).astype(int)
        dense = jacobian[rows][:, columns].toarray()
        if dense.size == 0:
            results.append(BlockRank(names, joint_rows.size, 0, names))
            continue
        u, s, _ = np.linalg.svd(dense)
        rank_total = int(np.sum(s > RANK_TOLERANCE * max(s[0], 1e-300)))
        rank = rank_total - internal.size
        involved: tuple[str, ...] = ()
        dependent = np.zeros(0, dtype=int)
        if rank < joint_rows.size:
            null = u[:joint_rows.size, rank_total:]
            weight = np.max(np.abs(null), axis=1) if null.size else np.zeros(0)
            involved = tuple(dict.fromkeys(str(name) for name in owner[weight > 1e-8]))
            kept = np.isin(joint_rows, kept_rows)
            fixed = np.vstack([dense[joint_rows.size:], dense[:joint_rows.size][kept]])
            if kept.any() and np.linalg.matrix_rank(
                    fixed, tol=RANK_TOLERANCE * max(s[0], 1e-300)) < fixed.shape[0]:
                clashing = ", ".join(dict.fromkeys(str(name) for name in owner[kept]))
                raise ModelError(
                    f"the constraints of {clashing} are redundant with each other (in the "
                    f"loop of {', '.join(names)}); user constraints and drives cannot be "
                    f"removed as redundant: remove one of them, or drive a joint whose "
                    f"coordinate the other constraints leave free")
            free = np.flatnonzero(~kept)
            dependent = joint_rows[free[_dependent_rows(dense[:joint_rows.size][free], fixed,
                                                        rank - int(kept.sum()))]]
        results.append(BlockRank(names, joint_rows.size, rank, involved, dependent))
    return results


def _dependent_rows(joint: np.ndarray, internal: np.ndarray, rank: int) -> np.ndarray:
    """Local indices of joint rows to drop so that the rest, together with the (always
    independent) internal rows, has full row rank: pivoted QR of the joint rows projected onto
    the complement of the internal rows' span keeps the ``rank`` best-conditioned rows."""
    if internal.size:
        basis = la.orth(internal.T)
        joint = joint - (joint @ basis) @ basis.T
    _, _, pivots = la.qr(joint.T, mode="economic", pivoting=True)
    return np.sort(pivots[rank:])


#: Fraction of the largest singular value below which a falling smallest one is taken as the
#: approach to a singular configuration (see :func:`rank_loss_time`).
NEAR_SINGULAR = 0.05


def rank_loss_time(times: np.ndarray, jacobians: list[np.ndarray], horizon: float
                   ) -> float | None:
    """The time at which the constraint Jacobian G, given as dense arrays at the
    increasing ``times``, is extrapolated to lose rank, if that is no later than
    ``horizon`` after the last time; else None.

    At a fold of the constraint manifold (a dead point, a mechanism driven into a position
    it cannot pass) the smallest singular value of G vanishes as sqrt(t* - t), so its
    square is linear in t near t*: t* is the zero of the line through the last two squares.
    It is accepted when the smallest singular value falls at every given time, is below
    :data:`NEAR_SINGULAR` times the largest at the last one, and was not at round-off at
    the first (G of a model that kept redundant equations is singular throughout)."""
    if len(times) < 3:
        return None
    ratios = []
    for jacobian in jacobians:
        singular = np.linalg.svd(jacobian, compute_uv=False)
        ratios.append(singular[-1] / singular[0] if singular.size and singular[0] > 0 else 0.0)
    ratios = np.asarray(ratios)
    if not (ratios[0] > RANK_TOLERANCE and np.all(np.diff(ratios) < 0.0)
            and ratios[-1] < NEAR_SINGULAR):
        return None
    squares = ratios[-2:] ** 2
    slope = (squares[1] - squares[0]) / (times[-1] - times[-2])
    crossing = times[-1] - squares[1] / slope
    return float(crossing) if crossing <= times[-1] + horizon else None
