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

import math
from dataclasses import dataclass, field
from itertools import combinations

import networkx as nx
import numpy as np
import scipy.linalg as la
import scipy.sparse as sp

from mbs.errors import ModelError, warn_user
from mbs.model import RANK_TOLERANCE
from mbs.quadratic import QuadraticTable

#: Blocks with more columns than this are not rank-checked (dense SVD would be too slow).
MAX_BLOCK_COLUMNS = 3000
#: Redundant blocks with at most this many columns choose the equations they drop along
#: walks over the configurations the mechanism can reach (:func:`_reachable_null_spaces`);
#: larger ones at the initial state only.
SAMPLED_BLOCK_COLUMNS = 240
#: Steps of each walk and their length: the largest change of a director entry (about that
#: many radians) or of a position in units of the block's size.
WALK_STEPS, WALK_STEP = 12, 0.25
#: The step, measured as WALK_STEP, from the initial configuration to the neighbours whose
#: rank tells whether it is a singular one.
PROBE_STEP = 1e-2
#: Singular values of those neighbours below this fraction of the largest do not count.
PROBE_RANK_TOLERANCE = 1e-2 * PROBE_STEP
#: The equations dropped by the initial state's choice are replaced by another choice only
#: when that keeps the remaining equations this many times better conditioned on the walks.
BETTER_CHOICE = 2.0
#: Blocks with more redundant equations than this choose at the initial state only (the
#: choice among many rows costs their number to the fourth power).
SAMPLED_REDUNDANCY = 12
#: Models up to this many coordinates evaluate a block's Jacobian on the walks densely.
DENSE_WALK_SIZE = 2000


@dataclass
class ConstraintGroup:
    """Rows of one joint (or user constraint) and the bodies it connects."""

    name: str
    bodies: tuple[str, ...]
    rows: np.ndarray
    #: Equations invariant under a common rigid motion of the bodies (all built-in joints).
    invariant: bool = True
    #: Equations that prescribe a motion in time (drives).
    prescribed: bool = False


@dataclass
class BlockRank:
    """Result of the rank analysis of one block."""

    joints: tuple[str, ...]
    equations: int
    rank: int
    involved: tuple[str, ...]
    #: Rows (global indices) whose removal leaves an independent set of equations.
    dependent_rows: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=int))
    #: How many more independent equations the block has at configurations a short step from
    #: the initial one (:func:`_reachable_null_spaces`): more than zero means that the
    #: initial state is a singular configuration of the mechanism.
    rank_gain: int = 0

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
                 ground: str, kept_rows: np.ndarray | None = None,
                 table: QuadraticTable | None = None, q0: np.ndarray | None = None
                 ) -> list[BlockRank]:
    """Rank of the joint equations of every block at the configuration ``q0`` of
    ``jacobian``.

    ``kept_rows`` (user constraints and drives, which the quadratic tables cannot hold and
    removal cannot drop) are never chosen as dependent rows; when they are dependent among
    themselves, or on the joints' equations (they constrain a motion the joints already
    fix), a :class:`~mbs.errors.ModelError` names them.

    The dependent rows of a redundant block are chosen so that the others stay regular: at
    ``q0`` by pivoted QR, and, given the constraint ``table`` (rows 0 .. table.n_rows - 1
    of ``jacobian``), along the configurations the block can reach from ``q0``
    (:func:`_reachable_null_spaces`): a choice that is regular at ``q0`` may lose rank
    further along the motion where the mechanism does not (a Bennett linkage), and a
    solver then follows a wrong branch. A block with drives is walked along its joints'
    motions; one with user constraints keeps the choice at ``q0``."""
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
        # user constraints and drives have the scale their author gave them (a
        # dimensionless constraint on a model of micrometres has entries of 1e6): to unit
        # norm, so that the rank tolerance relative to the largest singular value does
        # not take the joints' rows for zero
        given = np.flatnonzero(np.isin(rows, kept_rows))
        norms = np.linalg.norm(dense[given], axis=1)
        dense[given[norms > 0.0]] /= norms[norms > 0.0, None]
        if dense.size == 0:
            results.append(BlockRank(names, joint_rows.size, 0, names))
            continue
        u, s, _ = np.linalg.svd(dense)
        rank_total = int(np.sum(s > RANK_TOLERANCE * max(s[0], 1e-300)))
        rank = rank_total - internal.size
        involved: tuple[str, ...] = ()
        dependent = np.zeros(0, dtype=int)
        gain = 0
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
            _check_drives_independent_of_joints(dense, joint_rows.size, kept, owner, block,
                                                rank_total, u, s)
            local = _dependent_rows(dense[:joint_rows.size][free], fixed,
                                    rank - int(kept.sum()))
            # Drives are independent of the joints (checked above), so the joints' own
            # dependencies decide the rows to drop, over every pose the joints allow (a
            # drive may take the loop to any of them); a user constraint may take part in
            # them, and the walk cannot follow its equations.
            prescribed = np.concatenate([g.rows for g in block if g.prescribed]
                                        + [np.zeros(0, dtype=int)])
            walk_rank = rank_total - int(kept.sum())
            if (table is not None and q0 is not None
                    and np.isin(joint_rows[kept], prescribed).all()
                    and columns.size <= SAMPLED_BLOCK_COLUMNS
                    and columns.size > walk_rank  # a loop that can move
                    and joint_rows.size - rank <= SAMPLED_REDUNDANCY):
                directors = np.concatenate(
                    [body_columns[b][3:] for b in bodies if internal_rows[b].size]
                    + [np.zeros(0, dtype=int)])
                walk_rows = np.concatenate([joint_rows[free], internal]).astype(int)
                nulls, highest = _reachable_null_spaces(table.rows(walk_rows), columns,
                                                        directors, q0, walk_rank)
                local = _sampled_dependent_rows(nulls, local, free.size)
                gain = highest - walk_rank
            dependent = joint_rows[free[local]]
        results.append(BlockRank(names, joint_rows.size, rank, involved, dependent, gain))
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


def _check_drives_independent_of_joints(dense: np.ndarray, joint_count: int,
                                        kept: np.ndarray, owner: np.ndarray,
                                        block: list[ConstraintGroup], rank_total: int,
                                        u: np.ndarray, singular: np.ndarray) -> None:
    """Raise when a drive fixes a motion that the joints of its block already fix at the
    initial pose (a loop driven twice, a structure driven, or a driven coordinate at a dead
    point): dropping a joint's equation to make room for it would change the mechanism. A
    user constraint that repeats a joint's equation is redundant like a joint and only
    makes that equation droppable.

    ``dense`` holds the block's joint rows (``kept`` marking user constraints and drives),
    then its internal rows; ``u``, ``singular`` its SVD, of rank ``rank_total``."""
    if not any(group.prescribed for group in block):
        return  # only drives can clash (a rank test of the whole block, skipped)
    rest = np.vstack([dense[joint_count:], dense[:joint_count][~kept]])
    tolerance = RANK_TOLERANCE * singular[0]
    if np.linalg.matrix_rank(rest, tol=tolerance) + int(kept.sum()) <= rank_total:
        return
    # the rows in the dependencies among all rows
    weight = np.max(np.abs(u[:joint_count, rank_total:]), axis=1)
    involved = set(owner[weight > 1e-8])
    prescribed = [group.name for group in block if group.prescribed and group.name in involved]
    if not prescribed:
        return
    joints = [name for name in dict.fromkeys(owner[~kept]) if name in involved]
    raise ModelError(
        f"{', '.join(prescribed)} prescribe{'s' if len(prescribed) == 1 else ''} a motion "
        f"that the joints {', '.join(joints)} already fix at the initial pose: either the "
        f"loop is driven more often than it can move (remove a drive, or drive a joint whose "
        f"coordinate the others leave free), or the driven coordinate cannot move at this "
        f"pose (a dead point: start from another pose). A drive cannot be removed as "
        f"redundant, and dropping a joint's equation for it would change the mechanism")


def _reachable_null_spaces(block: QuadraticTable, columns: np.ndarray,
                           directors: np.ndarray, q0: np.ndarray, rank: int
                           ) -> tuple[list[np.ndarray], int]:
    """Left null spaces (rows, redundant) of the Jacobian of a block's equations ``block``
    (its joint rows, then its bodies' internal rows) at configurations it can reach from
    ``q0``, ``q0``'s first: walks of :data:`WALK_STEPS` steps both ways along each of (at
    most three of) the motions the equations leave free, every step projected back onto
    g = 0 by Gauss-Newton with the rank-``rank`` pseudo-inverse. Configurations where the
    equations have another rank (singular ones) are skipped. Returned with the null spaces:
    the highest rank at configurations a short step from ``q0``. The rank on the constraint
    manifold is highest at its regular configurations, so one above ``rank`` (that of
    ``q0``) makes ``q0`` a singular configuration (a parallelogram folded flat).

    Only the block's ``columns`` move. A step changes a director entry (``directors``, in
    ``q``'s numbering) by at most :data:`WALK_STEP`, and a position by at most that
    fraction of the block's size."""
    def jacobian(q):
        if block.n <= DENSE_WALK_SIZE:
            return block.jacobian_dense(q)[:, columns]
        return block.jacobian(q)[:, columns].toarray()

    def spaces(q):  # (left null space or None where the rank differs, right null space,
        # the rank)
        u, singular, vt = np.linalg.svd(jacobian(q))
        here = int(np.sum(singular > RANK_TOLERANCE * max(singular[0], 1e-300)))
        return (u[:, rank:] if here == rank else None), vt[rank:].T, here

    # a step's size: director entries count as they are, positions in units of the
    # block's size (the spread of its bodies, or their distance from the origin)
    turning = np.isin(columns, directors)
    positions = q0[columns[~turning]].reshape(-1, 3)
    length = float(np.max(np.linalg.norm(positions - positions.mean(axis=0), axis=1)))
    length = length or float(np.max(np.linalg.norm(positions, axis=1))) or 1.0
    weights = np.where(turning, 1.0, 1.0 / length)
    tolerance = 1e-12 * max(1.0, float(np.max(np.abs(q0[columns]))))
    null, free, highest = spaces(q0)
    nulls = [null]
    # A singular q0 is isolated on the manifold: a short step along a free motion, projected
    # back onto g = 0 by Gauss-Newton at the iterates' own rank, finds the higher rank of its
    # regular neighbours, where the rank-``rank`` walks below cannot project. Their extra
    # singular values grow with the distance from q0 (PROBE_STEP), while equations that hold
    # only at an extremum (a distance at its largest value) project back to within
    # sqrt(tolerance) of where they lose rank: PROBE_RANK_TOLERANCE tells them apart.
    for direction in free[:, :3].T:
        candidate = q0.copy()
        candidate[columns] += PROBE_STEP / np.max(np.abs(weights * direction)) * direction
        for _ in range(20):
            residual = block.value(candidate)
            if np.max(np.abs(residual)) <= tolerance:
                singular = np.linalg.svd(jacobian(candidate), compute_uv=False)
                highest = max(highest, int(np.sum(
                    singular > PROBE_RANK_TOLERANCE * max(singular[0], 1e-300))))
                break
            candidate[columns] -= np.linalg.lstsq(jacobian(candidate), residual,
                                                  rcond=RANK_TOLERANCE)[0]
    for direction in np.hstack([free[:, :3], -free[:, :3]]).T:
        q = q0.copy()
        for _ in range(WALK_STEPS):
            candidate = q.copy()
            candidate[columns] += WALK_STEP / np.max(np.abs(weights * direction)) * direction
            # Gauss-Newton with the pseudo-inverse at the predicted point (chord iteration)
            u, singular, vt = np.linalg.svd(jacobian(candidate), full_matrices=False)
            inverse = vt[:rank].T @ (u[:, :rank].T / singular[:rank, None])
            for _ in range(20):
                residual = block.value(candidate)
                if np.max(np.abs(residual)) <= tolerance:
                    break
                candidate[columns] -= inverse @ residual
            else:
                break
            null, free_here, _ = spaces(candidate)
            turned = free_here @ (free_here.T @ direction)
            if np.linalg.norm(turned) < 1e-3:  # the motion ends here (a fold)
                break
            direction, q = turned / np.linalg.norm(turned), candidate
            nulls.append(null)
    return [null for null in nulls if null is not None], highest


def _sampled_dependent_rows(nulls: list[np.ndarray], initial: np.ndarray, candidates: int
                            ) -> np.ndarray:
    """Rows to drop (local indices below ``candidates``) so that the other equations stay
    regular at every configuration of ``nulls``: dropping rows D leaves a full-rank set
    exactly where N[D] is invertible (N the orthonormal left null space there), and |det
    N[D]| (at most 1) measures how far the rest is from losing rank, as in pivoted QR. The
    choice ``initial`` (the initial state's) is kept unless another one is
    :data:`BETTER_CHOICE` times better at its worst configuration; every choice is
    compared when there are few, else rows are added greedily."""
    null = np.stack(nulls)  # (configurations, rows, redundant)
    count = null.shape[2]
    # rows outside every dependency cannot be dropped (N[D] would have a zero row)
    droppable = np.flatnonzero(np.max(np.abs(null[:, :candidates, :]), axis=(0, 2)) > 1e-8)

    def worst(choices: np.ndarray) -> np.ndarray:  # (choices, count) -> min over configs
        return np.abs(np.linalg.det(null[:, choices, :])).min(axis=0)

    if math.comb(droppable.size, count) * null.shape[0] <= 200_000:
        choices = np.array(list(combinations(droppable, count)), dtype=int)
    else:  # greedily: each row the one that keeps the chosen rows' volume largest
        chosen = np.zeros(0, dtype=int)
        for size in range(1, count + 1):
            others = np.setdiff1d(droppable, chosen)
            trial = np.column_stack([np.tile(chosen, (others.size, 1)), others])
            singular = np.linalg.svd(null[:, trial, :], compute_uv=False)
            volume = np.prod(singular[..., :size], axis=-1).min(axis=0)
            chosen = np.append(chosen, others[int(np.argmax(volume))])
        choices = chosen[None, :]
    scores = worst(choices)
    best = np.sort(choices[int(np.argmax(scores))])
    initial_score = float(worst(np.sort(initial)[None, :])[0])
    return best if float(np.max(scores)) > BETTER_CHOICE * initial_score else initial


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
