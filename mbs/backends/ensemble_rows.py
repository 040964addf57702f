"""Whole-row vector operations of the ensemble kernels (:mod:`mbs.backends.ensemble_numba`).

numba intrinsics that act on rows of LANES float64 values, one value per ensemble member,
emitted as LLVM operations on ``<LANES x double>`` vectors. Plain IEEE operations in the order
written in each comment, without fast-math flags: every lane rounds exactly as the scalar
expression would, so a member of an ensemble computes what a single run computes.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

#: Members per SIMD block, the vector width of the row operations (<LANES x double>,
#: a compile-time constant of the intrinsics; the remaining loops over lanes read the lane
#: count from their arrays' shapes: with a compile-time constant LLVM unrolls such loops
#: completely and, numba's pipeline having no SLP vectoriser, leaves them scalar).
#: More lanes spread the fixed costs of a row operation over more members; past 16 little is
#: left to gain, and blocks of fewer members share the cores better.
LANES = 16


# -- whole-row vector operations ---------------------------------------------------------------
# The kernels of mbs.backends.ensemble_numba work on rows of LANES values, one row per vector or
# matrix entry (``d[t] -= x[i] * y[j]``). Written as loops over the lanes, each such operation
# pays the loop vectoriser's set-up (trip count and alias checks) and the index wraparound, more
# than its arithmetic. The intrinsics below emit each row operation as LLVM operations on <LANES x
# double> values, which LLVM splits into the machine's vector registers (4 AVX2 registers for 16
# lanes): plain IEEE mul, add, sub, div, compares and selects without fast-math flags, each lane
# rounding exactly as the scalar expression written in the comment (same operations, same order).
# Their arrays must be C-contiguous float64 (rows, LANES) (the typing rejects others); row indices
# are not checked (nor are they in numba's own indexing).


def _rows_array(ty):
    return (isinstance(ty, types.Array) and ty.ndim == 2 and ty.layout == "C"
            and ty.dtype == types.float64)


def _vector_type():
    return ir.VectorType(ir.DoubleType(), LANES)


def _row_pointer(context, builder, array_type, array, index_type, index):
    """<LANES x double>* to row ``index`` of a C-contiguous (rows, LANES) array."""
    data = context.make_array(array_type)(context, builder, array).data
    index = context.cast(builder, index, index_type, types.intp)
    offset = builder.mul(index, ir.Constant(index.type, LANES))
    pointer = builder.gep(data, [offset], inbounds=True)
    return builder.bitcast(pointer, _vector_type().as_pointer())


def _splat(builder, value):
    vector = _vector_type()
    value = builder.insert_element(ir.Constant(vector, None), value,
                                   ir.Constant(ir.IntType(32), 0))
    return builder.shuffle_vector(value, ir.Constant(vector, None),
                                  ir.Constant(ir.VectorType(ir.IntType(32), LANES),
                                              [0] * LANES))


def _rows_intrinsic(name, arity, emit, scalars=0):
    """The intrinsic ``name(d, t, c_1 .. c_scalars, x_1, i_1, .., x_arity, i_arity)``: row t of
    d becomes ``emit(builder, d[t], c_1, .., x_1[i_1], ..)`` (vector values; the scalars
    splat to every lane)."""
    def typing(args):
        arrays = [args[0]] + [args[2 + scalars + 2 * k] for k in range(arity)]
        indices = [args[1]] + [args[3 + scalars + 2 * k] for k in range(arity)]
        if not (all(_rows_array(a) for a in arrays)
                and all(isinstance(i, types.Integer) for i in indices)
                and all(isinstance(args[2 + k], (types.Float, types.Integer))
                        for k in range(scalars))):
            return None

        def codegen(context, builder, sig, values):
            kinds = sig.args
            target = _row_pointer(context, builder, kinds[0], values[0], kinds[1], values[1])
            operands = [builder.load(target, align=8)]
            for k in range(2, 2 + scalars):
                operands.append(_splat(builder, context.cast(builder, values[k], kinds[k],
                                                             types.float64)))
            for k in range(arity):
                at = 2 + scalars + 2 * k
                pointer = _row_pointer(context, builder, kinds[at], values[at],
                                       kinds[at + 1], values[at + 1])
                operands.append(builder.load(pointer, align=8))
            builder.store(emit(builder, *operands), target, align=8)
            return context.get_dummy_value()

        return types.void(*args), codegen

    # an intrinsic's typer needs explicit parameters (no *args): write them out
    params = (["d", "t"] + [f"c{k}" for k in range(scalars)]
              + [f"{p}{k}" for k in range(arity) for p in ("x", "i")])
    namespace = {"typing": typing}
    exec(f"def {name}(typingctx, {', '.join(params)}):\n"
         f"    return typing(({', '.join(params)},))\n", namespace)
    return intrinsic(namespace[name])


def _fabs(b, x):
    fabs = cgutils.get_or_insert_function(b.module, ir.FunctionType(x.type, [x.type]),
                                          f"llvm.fabs.v{LANES}f64")
    return b.call(fabs, [x])


def _infinity():
    return ir.Constant(_vector_type(), [float("inf")] * LANES)


# d[t] = d[t] - x[i] * y[j]
_v_sub_mul = _rows_intrinsic("_v_sub_mul", 2, lambda b, d, x, y: b.fsub(d, b.fmul(x, y)))
# d[t] = d[t] + (c * x[i]) * y[j]
_v_add_cmul = _rows_intrinsic("_v_add_cmul", 2,
                              lambda b, d, c, x, y: b.fadd(d, b.fmul(b.fmul(c, x), y)), 1)
# d[t] = d[t] + c * x[i]
_v_add_scaled = _rows_intrinsic("_v_add_scaled", 1,
                                lambda b, d, c, x: b.fadd(d, b.fmul(c, x)), 1)
# d[t] = d[t] * x[i];  d[t] = d[t] / x[i]
_v_mul = _rows_intrinsic("_v_mul", 1, lambda b, d, x: b.fmul(d, x))
_v_div = _rows_intrinsic("_v_div", 1, lambda b, d, x: b.fdiv(d, x))
# d[t] = c;  d[t] = x[i];  d[t] = -x[i]
_v_fill = _rows_intrinsic("_v_fill", 0, lambda b, d, c: c, 1)
_v_copy = _rows_intrinsic("_v_copy", 1, lambda b, d, x: x)
_v_neg = _rows_intrinsic("_v_neg", 1, lambda b, d, x: b.fneg(x))
# d[t] = d[t] + x[i] where m[k] != 0 (lanes of a mask row), else d[t]
_v_add_where = _rows_intrinsic(
    "_v_add_where", 2,
    lambda b, d, x, m: b.select(b.fcmp_unordered("!=", m, ir.Constant(_vector_type(), None)),
                                b.fadd(d, x), d))
# d[t] = x[i] where m[k] != 0, else d[t]
_v_copy_where = _rows_intrinsic(
    "_v_copy_where", 2,
    lambda b, d, x, m: b.select(b.fcmp_unordered("!=", m, ir.Constant(_vector_type(), None)),
                                x, d))
# d[t] = max(d[t], abs(x[i])) as Python's max (a NaN x leaves d)
_v_abs_max = _rows_intrinsic(
    "_v_abs_max", 1, lambda b, d, x: b.select(b.fcmp_ordered(">", _fabs(b, x), d),
                                              _fabs(b, x), d))
# d[t] = d[t] if abs(x[i]) < inf else inf
_v_flag_nonfinite = _rows_intrinsic(
    "_v_flag_nonfinite", 1,
    lambda b, d, x: b.select(b.fcmp_ordered("<", _fabs(b, x), _infinity()), d, _infinity()))


# Runs of row operations driven by index tables, the loop inside the intrinsic: the rows
# that every operation of the run shares (the multipliers of an elimination step, an
# accumulated sum) stay in registers instead of being stored and loaded again.


def _int_table(ty):
    return (isinstance(ty, types.Array) and ty.ndim == 2 and ty.layout == "C"
            and ty.dtype == types.int64)


def _table_entry(context, builder, table, columns, o, k):
    """table[o, k] of a C-contiguous int64 (N, columns) table with data pointer ``table``."""
    offset = builder.add(builder.mul(o, ir.Constant(o.type, columns)), ir.Constant(o.type, k))
    return builder.load(builder.gep(table, [offset], inbounds=True))


def _sub_mul_run(name, k):
    """``name(d, m, l_1, .., l_k, s, ops, start, stop)``: for every row o of the int64 table
    ``ops`` (N, k + 1) from start to stop, with t = ops[o, 0] and u_j = ops[o, j]:
    d[t] = (((d[t] - m[l_1] * s[u_1]) - m[l_2] * s[u_2]) ...) (the rows m[l_j] loaded once)."""
    def typing(args):
        d, mult, *ls, src, ops, start, stop = args
        if not (_rows_array(d) and _rows_array(mult) and _rows_array(src) and _int_table(ops)
                and all(isinstance(i, types.Integer) for i in (*ls, start, stop))):
            return None

        def codegen(context, builder, sig, values):
            kinds = sig.args
            mults = [builder.load(_row_pointer(context, builder, kinds[1], values[1],
                                               kinds[2 + j], values[2 + j]), align=8)
                     for j in range(k)]
            table = context.make_array(kinds[3 + k])(context, builder, values[3 + k]).data
            begin = context.cast(builder, values[4 + k], kinds[4 + k], types.intp)
            end = context.cast(builder, values[5 + k], kinds[5 + k], types.intp)
            with cgutils.for_range_slice(builder, begin, end, ir.Constant(begin.type, 1)) as (o,
                                                                                         _):
                target = _row_pointer(context, builder, kinds[0], values[0], types.int64,
                                      _table_entry(context, builder, table, k + 1, o, 0))
                value = builder.load(target, align=8)
                for j in range(k):
                    source = _row_pointer(context, builder, kinds[2 + k], values[2 + k],
                                          types.int64,
                                          _table_entry(context, builder, table, k + 1, o, j + 1))
                    value = builder.fsub(value, builder.fmul(mults[j],
                                                             builder.load(source, align=8)))
                builder.store(value, target, align=8)
            return context.get_dummy_value()

        return types.void(*args), codegen

    params = ["d", "m"] + [f"l{j}" for j in range(k)] + ["s", "ops", "start", "stop"]
    namespace = {"typing": typing}
    exec(f"def {name}(typingctx, {', '.join(params)}):\n"
         f"    return typing(({', '.join(params)},))\n", namespace)
    return intrinsic(namespace[name])


_v_sub_mul_run = _sub_mul_run("_v_sub_mul_run", 1)
_v_sub_mul2_run = _sub_mul_run("_v_sub_mul2_run", 2)


@intrinsic
def _v_dot_div(typingctx, x, i, lu, ops, start, stop, dg):
    """x[i] = (x[i] - lu[ops[start, 0]] * x[ops[start, 1]] - ...) / lu[dg] for the rows of
    the int64 table ``ops`` (N, 2) from start to stop (the sum accumulated in registers, the
    terms subtracted in table order)."""
    if not (_rows_array(x) and _rows_array(lu) and _int_table(ops)
            and all(isinstance(v, types.Integer) for v in (i, start, stop, dg))):
        return None

    def codegen(context, builder, sig, values):
        kinds = sig.args
        target = _row_pointer(context, builder, kinds[0], values[0], kinds[1], values[1])
        table = context.make_array(kinds[3])(context, builder, values[3]).data
        begin = context.cast(builder, values[4], kinds[4], types.intp)
        end = context.cast(builder, values[5], kinds[5], types.intp)
        accumulator = cgutils.alloca_once_value(builder, builder.load(target, align=8))
        with cgutils.for_range_slice(builder, begin, end, ir.Constant(begin.type, 1)) as (o, _):
            u = _row_pointer(context, builder, kinds[2], values[2], types.int64,
                             _table_entry(context, builder, table, 2, o, 0))
            v = _row_pointer(context, builder, kinds[0], values[0], types.int64,
                             _table_entry(context, builder, table, 2, o, 1))
            builder.store(builder.fsub(builder.load(accumulator),
                                       builder.fmul(builder.load(u, align=8),
                                                    builder.load(v, align=8))), accumulator)
        pivot = _row_pointer(context, builder, kinds[2], values[2], kinds[6], values[6])
        builder.store(builder.fdiv(builder.load(accumulator), builder.load(pivot, align=8)),
                      target, align=8)
        return context.get_dummy_value()

    return types.void(x, i, lu, ops, start, stop, dg), codegen


@intrinsic
def _v_assemble(typingctx, a, xv, a_const, t_ptr, t_coef, t_var):
    """a[e] = a_const[e] + (t_coef[o] xv[t_var[o, 0]]) xv[t_var[o, 1]] + ... over the terms o
    of entry e (t_ptr[e] .. t_ptr[e + 1]), summed in registers in that order, for every
    entry e."""
    floats = (isinstance(a_const, types.Array) and a_const.ndim == 1
              and a_const.dtype == types.float64 and isinstance(t_coef, types.Array)
              and t_coef.ndim == 1 and t_coef.dtype == types.float64)
    ints = (isinstance(t_ptr, types.Array) and t_ptr.ndim == 1
            and t_ptr.dtype == types.int64 and _int_table(t_var))
    if not (_rows_array(a) and _rows_array(xv) and floats and ints):
        return None

    def codegen(context, builder, sig, values):
        kinds = sig.args
        const = context.make_array(kinds[2])(context, builder, values[2])
        ptr = context.make_array(kinds[3])(context, builder, values[3]).data
        coef = context.make_array(kinds[4])(context, builder, values[4]).data
        table = context.make_array(kinds[5])(context, builder, values[5]).data
        entries = cgutils.unpack_tuple(builder, const.shape)[0]
        accumulator = cgutils.alloca_once(builder, _vector_type())
        with cgutils.for_range(builder, entries) as loop:
            e = loop.index
            builder.store(_splat(builder, builder.load(builder.gep(const.data, [e],
                                                                   inbounds=True))),
                          accumulator)
            begin = builder.load(builder.gep(ptr, [e], inbounds=True))
            end = builder.load(builder.gep(ptr, [builder.add(e, ir.Constant(e.type, 1))],
                                           inbounds=True))
            with cgutils.for_range_slice(builder, begin, end, ir.Constant(begin.type, 1)) as (
                    o, _):
                c = _splat(builder, builder.load(builder.gep(coef, [o], inbounds=True)))
                x = _row_pointer(context, builder, kinds[1], values[1], types.int64,
                                 _table_entry(context, builder, table, 2, o, 0))
                y = _row_pointer(context, builder, kinds[1], values[1], types.int64,
                                 _table_entry(context, builder, table, 2, o, 1))
                term = builder.fmul(builder.fmul(c, builder.load(x, align=8)),
                                    builder.load(y, align=8))
                builder.store(builder.fadd(builder.load(accumulator), term), accumulator)
            builder.store(builder.load(accumulator),
                          _row_pointer(context, builder, kinds[0], values[0], types.intp, e),
                          align=8)
        return context.get_dummy_value()

    return types.void(a, xv, a_const, t_ptr, t_coef, t_var), codegen


# ok[t] = ok[t] where p = abs(a[i]) satisfies p >= c * m[j] and 0 < p < inf, else 0.0
_v_pivot_ok = _rows_intrinsic(
    "_v_pivot_ok", 2,
    lambda b, d, c, x, m: b.select(
        b.and_(b.and_(b.fcmp_ordered(">=", _fabs(b, x), b.fmul(c, m)),
                      b.fcmp_ordered(">", _fabs(b, x), ir.Constant(_vector_type(), None))),
               b.fcmp_ordered("<", _fabs(b, x), _infinity())),
        d, ir.Constant(_vector_type(), None)), 1)
