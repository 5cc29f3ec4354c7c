"""A small mutation engine: mechanical mistakes made to the reference functions a lesson grades.

Each graded reference function's source is parsed with `ast`; every mutation operator below proposes
one change at one place in it (a mutant). A mutant is compiled the way a student's answer is: a
module-level function defined in a fresh namespace (module name __main__, a file name outside qkv),
next to plain copies of the reference module's other functions and of the qkv functions it imports,
so that nothing it calls trips the grader's "calls qkv's reference" wire.

A mutant that gives the reference's results on many independent inputs (`EQUIVALENCE_INPUTS`,
written from each function's contract, hard cases included, never taken from the hidden tests) is
equivalent and set aside; every other mutant must be rejected by the lesson's hidden tests.
"""
import ast
import copy
import importlib
import inspect
import itertools
import types
import warnings

import numpy as np

import qkv.lessons
from qkv.checking import REFERENCE_MODULES, close

# ---------------------------------------------------------------- what each lesson grades

# The graded reference functions: those of each lesson's GRADED_REFERENCES (qkv.lessons lists the lessons) that
# its hidden tests test under their own name, or under HIDDEN_TEST_NAMES; reference function -> (lesson, hidden test
# in qkv_grading.lessonNN). A new lesson is mutated without an edit here once EQUIVALENCE_INPUTS has its functions.
# Empty: every hidden test is named after its graded function, as CONTRIBUTING.md asks.
HIDDEN_TEST_NAMES = {}
NOT_MUTATED = {
    # a hidden test of its own, but it ablates SmolLM2's heads: equivalence inputs would each run the model
    "qkv.sinks.ablate_heads",
}


def hidden_module(lesson):
    return importlib.import_module(qkv.lessons.lesson(lesson).hidden_tests)


def graded_functions(rows=None):
    """{reference function: (lesson number, name of its hidden test)} for the lessons `rows` (default: all)."""
    graded = {}
    for row in qkv.lessons.LESSONS if rows is None else rows:
        hidden = hidden_module(row.number)
        for reference in hidden.GRADED_REFERENCES:
            test = HIDDEN_TEST_NAMES.get(reference, reference.rpartition(".")[2])
            if (reference not in NOT_MUTATED
                    and getattr(getattr(hidden, test, None), "__module__", None) == hidden.__name__):
                graded[reference] = (row.number, test)
    return graded


GRADED = graded_functions()

# helpers: private functions of the same module whose mutations count as mutations of the graded function (a
# student writes them inline)
HELPERS = {
    "qkv.scaling.softmax_jacobian": ("_jacobian_of_weights",),
    "qkv.scaling.query_jacobian": ("_jacobian_of_weights",),
    "qkv.heads.grouped_query_attention": ("repeat_kv_heads",),
    "qkv.sinks.perplexity": ("token_losses", "log_softmax"),
    "qkv.cost.chunked_attention": ("_online_softmax_state", "_online_softmax_update"),
    "qkv.cost.causal_chunked_attention": ("_online_softmax_state", "_online_softmax_update"),
}

LESSONS = sorted({lesson for lesson, _ in GRADED.values()})


# ---------------------------------------------------------------- plain copies of the library

_COPIES = {}


def _module_tree(module_name):
    return ast.parse(inspect.getsource(importlib.import_module(module_name)))


def _is_reference_import(node):
    # a lesson's checks module re-exports its companions' catalogues (lesson04_probe's, lesson07_chunked's): copied
    # too, so that a copy's mistake functions are a student's code, not the library's
    return (isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("qkv.")
            and (node.module.split(".")[1] in REFERENCE_MODULES or node.module.startswith("qkv.checks.lesson")))


def _exec_copy(module_name, tree, label):
    """Run a (possibly mutated) reference module as a student's notebook would: names imported from other
    reference modules are bound to plain copies of them."""
    namespace = {"__name__": "__main__", **INJECTED}
    body = []
    for node in tree.body:
        if _is_reference_import(node):
            source = library_copy(node.module)
            for alias in node.names:
                namespace[alias.asname or alias.name] = source[alias.name]
        elif isinstance(node, ast.ImportFrom) and node.module == "qkv" and any(
                alias.name in REFERENCE_MODULES for alias in node.names):
            for alias in node.names:  # `from qkv import attention as ref`: the copy, as a module-like object
                if alias.name in REFERENCE_MODULES:
                    namespace[alias.asname or alias.name] = types.SimpleNamespace(**library_copy(f"qkv.{alias.name}"))
                else:
                    namespace[alias.asname or alias.name] = importlib.import_module(f"qkv.{alias.name}")
        elif isinstance(node, ast.Expr) and ast.unparse(node).startswith("seal("):
            continue  # a copy is not the grader's module
        else:
            body.append(node)
    module = ast.Module(body=body, type_ignores=[])
    ast.fix_missing_locations(module)
    exec(compile(module, f"<student {label}>", "exec"), namespace)
    return namespace


def library_copy(module_name):
    """The reference module's functions, compiled outside qkv (so calling them trips nothing)."""
    if module_name not in _COPIES:
        _COPIES[module_name] = _exec_copy(module_name, _module_tree(module_name), module_name)
    return _COPIES[module_name]


def checks_copy(lesson):
    """qkv.checks.lessonNN compiled outside qkv: its mistake functions can play a student's function."""
    return library_copy(f"qkv.checks.lesson{lesson}")


def student_reference(dotted):
    """The unmutated reference function, compiled as a student's answer is."""
    module_name, name = dotted.rsplit(".", 1)
    return library_copy(module_name)[name]


# ---------------------------------------------------------------- mutation operators

SWAPPED_CALLS = {  # numpy functions and methods a slip turns into their sibling
    "max": "min", "min": "max", "argmax": "argmin", "argmin": "argmax", "maximum": "minimum",
    "minimum": "maximum", "all": "any", "any": "all", "sum": "mean", "mean": "sum", "tril": "triu",
    "triu": "tril", "repeat": "tile", "tile": "repeat", "var": "std", "std": "var", "exp": "log",
    "flatnonzero": "argmax", "outer": "multiply", "diag": "diagflat",
}
SWAPPED_FUNCTIONS = {  # qkv steps a student confuses with their neighbour, or replaces by a hard choice
    "scaled_scores": ("dot_scores",), "dot_scores": ("scaled_scores",), "masked_softmax": ("softmax", "_hardmax"),
    "softmax": ("_hardmax",),
}


def _hardmax(x, *args, axis=-1):
    """A 'softmax' that puts all the weight on the largest score (what a very low temperature looks like)."""
    if args and isinstance(args[-1], int):
        axis = args[-1]
    x = np.asarray(x, dtype=float)
    return (x == np.max(x, axis=axis, keepdims=True)).astype(float)


INJECTED = {"_hardmax": _hardmax}  # helpers a mutant may call, put in its namespace
SWAPPED_FIELDS = {"n_kv_heads": "n_heads", "n_heads": "n_kv_heads", "n_layers": "n_kv_heads"}
SWAPPED_COMPARE = {ast.Lt: [ast.LtE, ast.Gt], ast.LtE: [ast.Lt, ast.GtE], ast.Gt: [ast.GtE, ast.Lt],
                   ast.GtE: [ast.Gt, ast.LtE], ast.Eq: [ast.NotEq], ast.NotEq: [ast.Eq]}
SWAPPED_BINOP = {ast.Add: [ast.Sub, ast.Mult], ast.Sub: [ast.Add], ast.Mult: [ast.Div, ast.Add],
                 ast.Div: [ast.Mult, ast.FloorDiv], ast.FloorDiv: [ast.Div, ast.Mod], ast.Mod: [ast.FloorDiv],
                 ast.BitAnd: [ast.BitOr], ast.BitOr: [ast.BitAnd], ast.MatMult: [ast.Mult],
                 ast.Pow: [ast.Mult]}


def _name(node):
    return ast.unparse(node)


def _swapaxes(node):
    return ast.Call(func=ast.Attribute(value=ast.Name("np", ast.Load()), attr="swapaxes", ctx=ast.Load()),
                    args=[node, ast.Constant(-1), ast.Constant(-2)], keywords=[])


def _const_variants(value):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return []
    if isinstance(value, int):
        candidates = [value + 1, value - 1, -value, 0]
    else:
        candidates = [value * 2, value / 2, -value, 0.0, 1.0]
    return [c for c in dict.fromkeys(candidates) if c != value]


def _is_validation(stmt):
    """Input checks (require(...), as_float_array) only reject bad input; their mutants say nothing."""
    text = ast.unparse(stmt)
    return text.startswith("require(") or (isinstance(stmt, ast.Assign) and "as_float_array(" in text
                                           and "@" not in text) or text.startswith(("_check_", "_positive_"))


def _sites(function):
    """Every (node, replacement-maker, description) the operators propose inside one function."""
    skipped = set()
    for stmt in ast.walk(function):
        if isinstance(stmt, ast.stmt) and stmt is not function and _is_validation(stmt):
            skipped.update(id(n) for n in ast.walk(stmt))
    # keyword defaults of the signature: a student's default that differs is a mistake too
    for default in function.args.defaults + [d for d in function.args.kw_defaults if d is not None]:
        if isinstance(default, ast.Constant):
            for variant in _const_variants(default.value):
                yield default, (lambda v=variant: ast.Constant(v)), f"default {default.value!r} -> {variant!r}"
    parameters = [arg.arg for arg in function.args.args]
    for node in ast.walk(function):
        if id(node) in skipped or node is function:
            continue
        line = getattr(node, "lineno", "?")
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in parameters:
            for other in parameters:  # one input used in place of another (keys for values, W_K for W_Q)
                if other != node.id:
                    yield node, (lambda o=other: ast.Name(o, ast.Load())), f"line {line}: {node.id} -> {other}"
        if isinstance(node, ast.Constant) and not isinstance(node.value, str):
            for variant in _const_variants(node.value):
                yield node, (lambda v=variant: ast.Constant(v)), f"line {line}: constant {node.value!r} -> {variant!r}"
            if isinstance(node.value, bool):
                yield node, (lambda v=not node.value: ast.Constant(v)), f"line {line}: {node.value} -> {not node.value}"
        elif isinstance(node, ast.UnaryOp):
            yield node, (lambda n=node: n.operand), f"line {line}: dropped unary {_name(node)}"
        elif isinstance(node, ast.BinOp):
            for op in SWAPPED_BINOP.get(type(node.op), []):
                yield node, (lambda n=node, op=op: ast.BinOp(n.left, op(), n.right)), \
                    f"line {line}: {type(node.op).__name__} -> {op.__name__} in {_name(node)}"
            yield node, (lambda n=node: n.left), f"line {line}: {_name(node)} -> {_name(node.left)}"
            yield node, (lambda n=node: n.right), f"line {line}: {_name(node)} -> {_name(node.right)}"
            if isinstance(node.op, ast.MatMult):
                yield node, (lambda n=node: ast.BinOp(_swapaxes(n.left), n.op, n.right)), \
                    f"line {line}: transposed the left side of {_name(node)}"
                yield node, (lambda n=node: ast.BinOp(n.left, n.op, _swapaxes(n.right))), \
                    f"line {line}: transposed the right side of {_name(node)}"
                yield node, (lambda n=node: ast.BinOp(n.right, n.op, n.left)), \
                    f"line {line}: operands swapped in {_name(node)}"
        elif isinstance(node, ast.Compare) and len(node.ops) == 1:
            for op in SWAPPED_COMPARE.get(type(node.ops[0]), []):
                yield node, (lambda n=node, op=op: ast.Compare(n.left, [op()], n.comparators)), \
                    f"line {line}: {type(node.ops[0]).__name__} -> {op.__name__} in {_name(node)}"
        elif isinstance(node, ast.BoolOp):
            for value in node.values:
                yield node, (lambda v=value: v), f"line {line}: {_name(node)} -> {_name(value)}"
        elif isinstance(node, ast.Attribute):
            if node.attr == "T":
                yield node, (lambda n=node: n.value), f"line {line}: dropped .T in {_name(node)}"
            elif node.attr == "d_head" and isinstance(node.ctx, ast.Load):  # derived from fields the contract lacks
                yield node, (lambda n=node: ast.BinOp(ast.Attribute(n.value, "d_model", ast.Load()), ast.FloorDiv(),
                                                      ast.Attribute(n.value, "n_heads", ast.Load()))), \
                    f"line {line}: .d_head -> .d_model // .n_heads"
            if node.attr in SWAPPED_FIELDS:
                yield node, (lambda n=node: ast.Attribute(n.value, SWAPPED_FIELDS[n.attr], n.ctx)), \
                    f"line {line}: .{node.attr} -> .{SWAPPED_FIELDS[node.attr]}"
            elif node.attr in SWAPPED_CALLS:
                yield node, (lambda n=node: ast.Attribute(n.value, SWAPPED_CALLS[n.attr], n.ctx)), \
                    f"line {line}: {node.attr} -> {SWAPPED_CALLS[node.attr]}"
        elif isinstance(node, ast.Call):
            yield from _call_sites(node, line)
        elif isinstance(node, ast.Subscript):
            yield from _subscript_sites(node, line)
        elif isinstance(node, ast.Tuple) and isinstance(node.ctx, ast.Load) and len(node.elts) >= 2:
            for i in range(len(node.elts) - 1):
                yield node, (lambda n=node, i=i: ast.Tuple(_swapped(n.elts, i, i + 1), ast.Load())), \
                    f"line {line}: parts {i} and {i + 1} swapped in {_name(node)}"
        elif isinstance(node, ast.IfExp):
            yield node, (lambda n=node: n.body), f"line {line}: {_name(node)} -> always {_name(node.body)}"
            yield node, (lambda n=node: n.orelse), f"line {line}: {_name(node)} -> always {_name(node.orelse)}"
    yield from _statement_sites(function, skipped)


def _call_sites(node, line):
    func = _name(node.func)
    short = func.split(".")[-1]
    for keyword in node.keywords:
        if keyword.arg == "keepdims":
            yield node, (lambda n=node, k=keyword: _without_keyword(n, k)), f"line {line}: keepdims dropped in {func}"
        if keyword.arg == "axis" and isinstance(keyword.value, ast.Name):
            for axis in (0, -1):
                yield node, (lambda n=node, k=keyword, a=axis: _with_keyword(n, k, ast.Constant(a))), \
                    f"line {line}: axis={keyword.value.id} -> axis={axis} in {func}"
        if keyword.arg not in ("keepdims", "dtype", "out"):
            yield node, (lambda n=node, k=keyword: _without_keyword(n, k)), \
                f"line {line}: {keyword.arg}= dropped in {func}"
    if short in ("swapaxes", "transpose") and node.args:
        target = node.args[0] if short == "swapaxes" or isinstance(node.func, ast.Name) else node.func.value
        yield node, (lambda t=target: t), f"line {line}: dropped the transpose {_name(node)}"
    if short == "exp" and node.args and isinstance(node.args[0], ast.BinOp) and isinstance(node.args[0].op, ast.Sub):
        yield node, (lambda n=node: ast.Call(n.func, [n.args[0].left], n.keywords)), \
            f"line {line}: shift dropped from {_name(node)}"
    if short == "where" and len(node.args) == 3:
        yield node, (lambda n=node: ast.Call(n.func, [n.args[0], n.args[2], n.args[1]], n.keywords)), \
            f"line {line}: branches swapped in {_name(node)}"
    if isinstance(node.func, ast.Name) and node.func.id in SWAPPED_FUNCTIONS:
        for other in SWAPPED_FUNCTIONS[node.func.id]:
            yield node, (lambda n=node, o=other: ast.Call(ast.Name(o, ast.Load()), n.args, n.keywords)), \
                f"line {line}: {node.func.id} -> {other}"
    if isinstance(node.func, ast.Name) and node.func.id == "range" and len(node.args) == 1:
        n = node.args[0]
        yield node, (lambda c=node, n=n: ast.Call(c.func, [_shifted(n, -1)], [])), \
            f"line {line}: range({_name(n)}) -> range({_name(n)} - 1)"
        yield node, (lambda c=node, n=n: ast.Call(c.func, [ast.Constant(1), n], [])), \
            f"line {line}: range({_name(n)}) -> range(1, {_name(n)})"
    names = [i for i, a in enumerate(node.args) if isinstance(a, (ast.Name, ast.Call, ast.BinOp))]
    for i, j in zip(names, names[1:]):
        yield node, (lambda n=node, i=i, j=j: ast.Call(n.func, _swapped(n.args, i, j), n.keywords)), \
            f"line {line}: arguments {_name(node.args[i])} and {_name(node.args[j])} swapped in {func}"
    if isinstance(node.func, ast.Name) and len(node.args) >= 2 and isinstance(node.args[-1], ast.Name) \
            and node.func.id not in ("range", "require", "isinstance", "getattr"):
        yield node, (lambda n=node: ast.Call(n.func, n.args[:-1], n.keywords)), \
            f"line {line}: last argument {_name(node.args[-1])} not passed to {func}"
    if len(node.args) == 1 and short not in ("asarray", "as_float_array", "float", "int", "len"):
        yield node, (lambda n=node: n.args[0]), f"line {line}: call dropped, {_name(node)} -> {_name(node.args[0])}"


def _swapped(items, i, j):
    items = list(items)
    items[i], items[j] = items[j], items[i]
    return items


def _with_keyword(call, keyword, value):
    keywords = [ast.keyword(k.arg, value) if k is keyword else k for k in call.keywords]
    return ast.Call(call.func, call.args, keywords)


def _without_keyword(call, keyword):
    return ast.Call(call.func, call.args, [k for k in call.keywords if k is not keyword])


def _shifted(node, delta):
    op = ast.Add() if delta > 0 else ast.Sub()
    return ast.BinOp(node, op, ast.Constant(abs(delta)))


def _subscript_sites(node, line):
    index = node.slice
    parts = index.elts if isinstance(index, ast.Tuple) else [index]
    for position, part in enumerate(parts):
        if isinstance(part, ast.Slice):
            for field in ("lower", "upper"):
                bound = getattr(part, field)
                if bound is not None and not isinstance(bound, ast.Constant):
                    for delta in (1, -1):
                        yield node, (lambda n=node, p=position, f=field, d=delta: _replace_part(n, p, f, d)), \
                            f"line {line}: {field} bound {_name(bound)} {'+' if delta > 0 else '-'} 1 in {_name(node)}"
        elif isinstance(part, ast.Name):
            for delta in (1, -1):
                yield node, (lambda n=node, p=position, d=delta: _replace_part(n, p, None, d)), \
                    f"line {line}: index {part.id} {'+' if delta > 0 else '-'} 1 in {_name(node)}"


def _replace_part(node, position, field, delta):
    node = copy.deepcopy(node)
    parts = node.slice.elts if isinstance(node.slice, ast.Tuple) else None
    part = parts[position] if parts is not None else node.slice
    if field is None:
        new = _shifted(part, delta)
        if parts is not None:
            parts[position] = new
        else:
            node.slice = new
    else:
        setattr(part, field, _shifted(getattr(part, field), delta))
    return node


def _statement_sites(function, skipped):
    """Deleting a statement: only one that re-binds a name, updates in place or stands alone (deleting a
    first binding only produces a NameError, which says nothing about the tests)."""
    bound = {arg.arg for arg in function.args.args}
    for stmt in ast.walk(function):
        if not isinstance(stmt, ast.stmt) or stmt is function or id(stmt) in skipped:
            continue
        if isinstance(stmt, ast.Assign) and all(isinstance(t, ast.Name) for t in stmt.targets):
            names = {t.id for t in stmt.targets}
            if names <= bound:
                yield stmt, (lambda: ast.Pass()), f"line {stmt.lineno}: deleted `{ast.unparse(stmt)}`"
            bound |= names
        elif isinstance(stmt, (ast.AugAssign, ast.Expr)) or (
                isinstance(stmt, ast.Assign) and isinstance(stmt.targets[0], ast.Subscript)):
            yield stmt, (lambda: ast.Pass()), f"line {stmt.lineno}: deleted `{ast.unparse(stmt)}`"


class _Replace(ast.NodeTransformer):
    def __init__(self, target, make):
        self.target, self.make = target, make

    def visit(self, node):
        if node is self.target:
            return self.make()
        return super().visit(node)


# ---------------------------------------------------------------- mutants

class Mutant:
    def __init__(self, graded, where, description, fn):
        self.graded, self.where, self.description, self.fn = graded, where, description, fn

    def __repr__(self):
        where = "" if self.where == self.graded.rsplit(".", 1)[1] else f"[in {self.where}] "
        return f"{self.graded}: {where}{self.description}"


def mutants(graded):
    """Every mutant of one graded reference function (and of the helpers it owns), compiled."""
    module_name, name = graded.rsplit(".", 1)
    found = []
    for where in (name, *HELPERS.get(graded, ())):
        tree = _module_tree(module_name)
        function = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == where)
        for index, (_node, _make, description) in enumerate(list(_sites(function))):
            mutated_tree = _module_tree(module_name)
            mutated_function = next(n for n in mutated_tree.body if isinstance(n, ast.FunctionDef) and n.name == where)
            # the same walk over an identical tree reaches the same node at the same index
            node_again, make_again, _ = list(_sites(mutated_function))[index]
            _Replace(node_again, make_again).visit(mutated_function)
            try:
                namespace = _exec_copy(module_name, mutated_tree, f"mutant of {graded}")
            except Exception:
                continue  # not even valid Python; a student's notebook would not get that far
            found.append(Mutant(graded, where, description, namespace[name]))
    return found


def _outcome(fn, args, kwargs):
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        try:
            return "ok", fn(*copy.deepcopy(args), **copy.deepcopy(kwargs))
        except Exception as error:
            return "error", type(error).__name__


def _same(a, b):
    if isinstance(a, tuple) != isinstance(b, tuple):
        return False
    if isinstance(a, tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    try:
        a_arr, b_arr = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    except (TypeError, ValueError):
        return False
    if a_arr.shape != b_arr.shape:
        return False
    finite = np.isfinite(a_arr)
    if not np.array_equal(finite, np.isfinite(b_arr)):
        return False
    return close(a_arr[finite], b_arr[finite])


def is_equivalent(mutant, inputs):
    """Equal to the reference (within the grading tolerance) on every input the reference accepts."""
    reference = student_reference(mutant.graded)
    for args, kwargs in inputs:
        kind, expected = _outcome(reference, args, kwargs)
        if kind == "error":
            continue
        got_kind, got = _outcome(mutant.fn, args, kwargs)
        if got_kind == "error" or not _same(got, expected):
            return False
    return True


# ---------------------------------------------------------------- independent inputs for the equivalence filter

def _normal(rng, *shape, scale=1.0):
    return rng.normal(size=shape) * scale


def _distinct(rng, low, high, n):
    return [int(v) for v in rng.choice(np.arange(low, high), size=n, replace=False)]


def _softmax_inputs(rng):
    cases = []
    for _ in range(6):
        a, b, c = _distinct(rng, 2, 9, 3)
        cases += [((_normal(rng, a),), {}), ((_normal(rng, a, b),), {}), ((_normal(rng, a, b),), {"axis": 0}),
                  ((_normal(rng, a, b, c, scale=3),), {"axis": 1}), ((_normal(rng, a, b, c),), {"axis": -2})]
    cases += [((np.array([[0.0, 0.0], [1000.0, 1000.0]]),), {}),
              ((np.array([[0.0, 1000.0], [0.0, 1000.0]]),), {"axis": 0}),
              ((np.array([[-500.0, 300.0, 0.0], [800.0, 800.5, 799.0]]),), {}), ((_normal(rng, 3, 4, scale=1e4),), {}),
              ((_normal(rng, 4, 3, scale=1e-4),), {}), ((np.array([2.0]),), {}),
              ((np.array([[1.0, 2.0]]),), {"axis": 0}),
              ((_normal(rng, 3, 5).astype(np.float32),), {}), ((_normal(rng, 2, 3).tolist(),), {})]
    return cases


def _lookup_inputs(rng, temperature_key=True):
    cases = []
    for _ in range(8):
        n, d_k, d_v = _distinct(rng, 2, 9, 3)
        q, K, V = _normal(rng, d_k), _normal(rng, n, d_k), _normal(rng, n, d_v)
        for t in (1.0, float(rng.uniform(0.05, 5)), 1e-3):
            cases.append(((q, K, V), {"temperature": t} if temperature_key else {}))
        near = K.copy()
        near[1] = near[0] + 1e-3  # near tie
        cases.append(((K[0] * 5, near, V), {"temperature": 0.01}))
        cases.append(((K[0] * 200, K, V), {"temperature": 0.5}))
        cases.append(((q * 1e-5, K, V), {"temperature": 3.0}))
    return cases


def _hard_lookup_inputs(rng):
    # distinct keys only: which of two equal keys wins is not part of the contract
    cases = []
    for _ in range(8):
        n, d_k, d_v = _distinct(rng, 2, 9, 3)
        K = np.unique(rng.integers(-2, 3, size=(n, d_k)).astype(float), axis=0)
        K = K[rng.permutation(len(K))]
        V = _normal(rng, len(K), d_v)
        for i in range(len(K)):
            cases.append(((K[i].copy(), K, V), {}))
        miss = K[0].copy()
        miss[-1] += 0.5
        cases.append(((miss, K, V), {}))
    return cases


def _sweep_inputs(rng):
    cases = []
    for _ in range(8):
        n, d_k, d_v, n_t = _distinct(rng, 2, 9, 4)
        q, K, V = _normal(rng, d_k), _normal(rng, n, d_k), _normal(rng, n, d_v)
        temperatures = np.sort(rng.uniform(0.01, 5, size=n_t))[::-1]
        cases.append(((q, K, V, temperatures), {}))
        cases.append(((q, K, V, temperatures.tolist()), {}))
    return cases


def _qk_inputs(rng, with_v=False):
    cases = []
    for scale in (1.0, 1.0, 1.0, 5.0, 30.0, 1e-3):
        n_q, n_k, d_k, d_v = _distinct(rng, 1, 10, 4)
        args = (_normal(rng, n_q, d_k, scale=scale), _normal(rng, n_k, d_k, scale=scale))
        cases.append((args + ((_normal(rng, n_k, d_v),) if with_v else ()), {}))
    return cases


def _projection_inputs(rng):
    cases = []
    for scale in (1.0, 1.0, 1.0, 3.0, 1e-3):
        T, d_model, d_k, d_v = _distinct(rng, 1, 10, 4)
        cases.append(((_normal(rng, T, d_model), _normal(rng, d_model, d_k, scale=scale),
                       _normal(rng, d_model, d_k, scale=scale), _normal(rng, d_model, d_v)), {}))
    return cases


def _variance_inputs(rng):
    return [((d_k, n, np.random.default_rng(seed)), {})
            for d_k, n, seed in [(1, 5, 1), (3, 20, 2), (7, 11, 3), (16, 300, 4), (64, 50, 5)]]


def _weights_inputs(rng):
    cases = []
    for _ in range(4):
        a, b = _distinct(rng, 2, 9, 2)
        w = rng.exponential(size=(a, b)) * (rng.random((a, b)) > 0.3)
        w[:, 0] += 0.1
        cases.append(((w / w.sum(axis=-1, keepdims=True),), {}))
        v = rng.exponential(size=b)
        cases.append(((v / v.sum(),), {}))
    cases.append(((np.eye(3)[[1, 2]],), {}))
    return cases


def _scores_inputs(rng):
    return [((_normal(rng, n, scale=s),), {}) for n, s in [(1, 1), (2, 3), (5, 1), (7, 10), (4, 1e-3)]]


def _query_jacobian_inputs(rng):
    cases = []
    for scale in (1.0, 1.0, 4.0, 1e-3):
        n_k, d_k = _distinct(rng, 1, 9, 2)
        cases.append(((_normal(rng, d_k, scale=scale), _normal(rng, n_k, d_k)), {}))
    return cases


def _masked_softmax_inputs(rng):
    cases = []
    for _ in range(6):
        n_q, n_k, B = _distinct(rng, 2, 8, 3)
        mask = rng.random((n_q, n_k)) < 0.5
        mask[0] = False
        mask[1, 0] = True
        cases.append(((_normal(rng, n_q, n_k, scale=3), mask), {}))
        cases.append(((_normal(rng, B, n_q, n_k), mask), {}))
        loud = np.where(mask, _normal(rng, n_q, n_k), 1000.0 + _normal(rng, n_q, n_k))
        cases.append(((loud, mask), {}))
        cases.append(((_normal(rng, n_q, n_k) - 1000.0, mask), {}))
    return cases


def _attention_layer_inputs(rng):
    cases = []
    for scale in (1.0, 1.0, 3.0):
        T, d_model, d_k, d_v = _distinct(rng, 2, 10, 4)
        W = (_normal(rng, d_model, d_k, scale=scale), _normal(rng, d_model, d_k, scale=scale),
             _normal(rng, d_model, d_v))
        cases.append(((_normal(rng, T, d_model), *W), {}))
        cases.append(((_normal(rng, 3, T, d_model), *W), {}))
    return cases


def _lengths_inputs(rng):
    cases = []
    for _ in range(6):
        B, T = _distinct(rng, 1, 10, 2)
        lengths = rng.integers(0, T + 1, size=B)
        cases.append(((lengths.tolist(), T), {}))
    cases.append((([3, 0, 2], 3), {}))
    return cases


def _dependence_inputs(rng):
    from qkv import probes
    import functools
    cases = []
    for _ in range(3):
        T, d_in, d_out = _distinct(rng, 2, 8, 3)
        mix = rng.random((T, T)) < 0.5
        readout = _normal(rng, d_in, d_out)
        for sign in (1.0, -1.0):
            target = functools.partial(probes.mixed_readout, mix=mix, readout=sign * np.abs(readout))
            X = _normal(rng, T, d_in)
            cases.append(((target, X), {}))
            cases.append(((target, X), {"delta": 0.01, "tol": 1e-3}))
        ignoring = functools.partial(probes.mixed_readout, mix=mix, readout=readout, ignored=[0])
        cases.append(((ignoring, _normal(rng, T, d_in)), {}))
    return cases


def _heads_split_inputs(rng):
    cases = []
    for _ in range(5):
        T, n_heads, d_head = _distinct(rng, 1, 8, 3)
        cases.append(((_normal(rng, T, n_heads * d_head), n_heads), {}))
    return cases


def _heads_merge_inputs(rng):
    return [((_normal(rng, *_distinct(rng, 1, 8, 3)),), {}) for _ in range(5)]


def _mha_inputs(rng):
    from qkv.masking import causal_mask
    cases = []
    for _ in range(4):
        T, d_model, n_heads, d_head = _distinct(rng, 2, 9, 4)
        W = [_normal(rng, d_model, n_heads * d_head, scale=2 / np.sqrt(d_model)) for _ in range(3)]
        W_O = _normal(rng, n_heads * d_head, d_model)
        X = _normal(rng, T, d_model)
        cases.append(((X, *W, W_O, n_heads), {}))
        cases.append(((X, *W, W_O, n_heads), {"mask": causal_mask(T)}))
    return cases


def _gqa_inputs(rng):
    from qkv.masking import causal_mask
    cases = []
    for n_q, n_kv in [(6, 2), (6, 3), (8, 2), (4, 1), (3, 3), (12, 4)]:
        T, T_k, d_head = _distinct(rng, 2, 9, 3)
        q, k, v = (_normal(rng, n_q, T, d_head, scale=2), _normal(rng, n_kv, T_k, d_head, scale=2),
                   _normal(rng, n_kv, T_k, d_head + 1))
        cases.append(((q, k, v), {}))
        mask = rng.random((T, T_k)) < 0.7
        mask[:, 0] = True
        cases.append(((q, k, v), {"mask": mask}))
        q2, k2, v2 = _normal(rng, n_q, T, d_head), _normal(rng, n_kv, T, d_head), _normal(rng, n_kv, T, d_head)
        cases.append(((q2, k2, v2, causal_mask(T)), {}))
    return cases


def _kv_inputs(rng):
    from types import SimpleNamespace
    cases = []
    for _ in range(6):
        n_layers, n_kv, d_head, extra = _distinct(rng, 1, 30, 4)
        # only the attributes the exercise names
        config = SimpleNamespace(n_layers=n_layers, n_kv_heads=n_kv, n_heads=n_kv * (extra % 4 + 2), d_head=d_head)
        for b in (1, 2, 4, 3):
            cases.append(((config, b), {}))
    return cases



def _cost_ratio_inputs(rng):
    return [((int(a), int(b)), {}) for a, b in rng.integers(1, 50000, size=(8, 2))] + [((1000.0, 250.0), {})]


def _fit_inputs(rng):
    cases = []
    for n in (2, 3, 5, 8):
        sizes = np.sort(rng.choice(np.arange(10, 20000), size=n, replace=False)).astype(float)
        cases.append(((sizes, 2e-6 * sizes ** rng.uniform(0.5, 3) * np.exp(rng.normal(scale=0.3, size=n))), {}))
    return cases


def _step_inputs(rng):
    cases = []
    for n_q, n_kv, T in ((6, 2, 5), (6, 3, 1), (4, 4, 3), (4, 1, 6)):
        cases.append(((_normal(rng, n_q, 1, 4, scale=1.5), _normal(rng, n_kv, T, 4, scale=1.5),
                       _normal(rng, n_kv, T, 4)), {}))
    return cases


def _append_inputs(rng):
    return [((_normal(rng, h, T, d), _normal(rng, h, T, e), _normal(rng, h, n, d), _normal(rng, h, n, e)), {})
            for h, T, n, d, e in ((2, 3, 1, 4, 4), (3, 0, 2, 2, 5), (1, 5, 3, 3, 3))]


def _chunked_inputs(rng, causal=False):
    cases = []
    for n_q, n_k, chunk in ((3, 10, 1), (4, 10, 3), (5, 10, 5), (2, 10, 10), (3, 10, 14)):
        n_q = n_k if causal else n_q
        Q, K, V = _normal(rng, n_q, 4), _normal(rng, n_k, 4, scale=3.0), _normal(rng, n_k, 3)
        K = K + np.linspace(0, 6, n_k)[:, None] * Q.mean(axis=0)
        cases.append(((Q, K, V, chunk), {}))
    return cases



def _layer_weights_inputs(rng, with_period=False):
    cases = []
    for H, T in ((1, 2), (2, 4), (3, 6), (4, 8), (2, 10)):
        scores = _normal(rng, H, T, T, scale=2.0)
        causal = np.tril(np.ones((T, T), dtype=bool))
        weights = np.exp(np.where(causal, scores, -np.inf))
        weights /= weights.sum(axis=-1, keepdims=True)
        full = np.exp(scores) / np.exp(scores).sum(axis=-1, keepdims=True)
        for w in (weights, full):
            if with_period:
                cases += [((w, T // 2), {})] if T % 2 == 0 else []
            else:
                cases.append(((w,), {}))
    return cases


def _contribution_inputs(rng):
    cases = []
    for T, d, m in ((1, 2, 3), (3, 4, 2), (5, 2, 6), (4, 3, 3)):
        w = np.exp(_normal(rng, T))
        cases.append(((w / w.sum(), _normal(rng, T, d), _normal(rng, d, m)), {}))
    return cases


def _occlusion_inputs(rng):
    import functools
    from qkv import sinks
    cases = []
    for T, vocab in ((2, 5), (4, 8), (6, 10), (5, 12)):
        toy = functools.partial(sinks.toy_next_token_logprob, token_values=_normal(rng, vocab, scale=1.5),
                                decay=float(rng.uniform(0.4, 0.9)))
        sink = functools.partial(sinks.toy_first_token_logprob, token_values=_normal(rng, vocab), sink_bonus=2.0)
        cases += [((toy, rng.integers(0, vocab, size=T)), {}), ((sink, list(rng.integers(0, vocab, size=T))), {})]
    return cases


def _window_inputs(rng):
    return [((T, w, s), {}) for T, w, s in ((1, 1, 0), (5, 2, 1), (6, 3, 2), (7, 1, 3), (8, 8, 0), (9, 2, 0),
                                            (4, 2, 4), (10, 3, 1))]


def _perplexity_inputs(rng):
    cases = []
    for T, vocab, shift in ((2, 3, 0.0), (4, 6, 0.0), (6, 9, 800.0), (8, 5, 0.0), (3, 20, 2000.0)):
        logits = _normal(rng, T, vocab, scale=3.0) + rng.uniform(shift / 2, shift + 1e-9, size=(T, 1))
        cases.append(((logits, rng.integers(0, vocab, size=T)), {}))
    return cases

EQUIVALENCE_INPUTS = {
    "qkv.attention.softmax": _softmax_inputs,
    "qkv.lookup.hard_lookup": _hard_lookup_inputs,
    "qkv.lookup.soft_lookup": _lookup_inputs,
    "qkv.lookup.soft_lookup_by_temperature": _sweep_inputs,
    "qkv.attention.dot_scores": _qk_inputs,
    "qkv.attention.scaled_scores": _qk_inputs,
    "qkv.attention.attention_weights": _qk_inputs,
    "qkv.attention.attention": lambda rng: _qk_inputs(rng, with_v=True),
    "qkv.attention.project_qkv": _projection_inputs,
    "qkv.attention.self_attention": _projection_inputs,
    "qkv.scaling.dot_product_variance": _variance_inputs,
    "qkv.scaling.scale_for_unit_variance": lambda rng: [((d,), {}) for d in (1, 2, 3, 7, 64, 1000)],
    "qkv.scaling.entropy": _weights_inputs,
    "qkv.scaling.softmax_jacobian": _scores_inputs,
    "qkv.scaling.query_jacobian": _query_jacobian_inputs,
    "qkv.masking.causal_mask": lambda rng: [((T,), {}) for T in (1, 2, 3, 6, 11)],
    "qkv.attention.masked_softmax": _masked_softmax_inputs,
    "qkv.masking.causal_self_attention": _attention_layer_inputs,
    "qkv.masking.padding_mask": _lengths_inputs,
    "qkv.masking.causal_padding_mask": _lengths_inputs,
    "qkv.masking.dependence_matrix": _dependence_inputs,
    "qkv.heads.split_heads": _heads_split_inputs,
    "qkv.heads.merge_heads": _heads_merge_inputs,
    "qkv.heads.multi_head_attention": _mha_inputs,
    "qkv.heads.grouped_query_attention": _gqa_inputs,
    "qkv.heads.kv_cache_bytes_per_token": _kv_inputs,
    "qkv.sinks.first_token_share": _layer_weights_inputs,
    "qkv.sinks.contribution_norms": _contribution_inputs,
    "qkv.sinks.occlusion_effects": _occlusion_inputs,
    "qkv.sinks.sliding_window_mask": _window_inputs,
    "qkv.sinks.perplexity": _perplexity_inputs,
    "qkv.sinks.diagonal_score": _layer_weights_inputs,
    "qkv.sinks.previous_token_score": _layer_weights_inputs,
    "qkv.sinks.induction_score": lambda rng: _layer_weights_inputs(rng, with_period=True),
    "qkv.cost.cost_ratio": _cost_ratio_inputs,
    "qkv.cost.fit_exponent": _fit_inputs,
    "qkv.cost.attention_step": _step_inputs,
    "qkv.cost.append_to_cache": _append_inputs,
    "qkv.cost.chunked_attention": _chunked_inputs,
    "qkv.cost.causal_chunked_attention": lambda rng: _chunked_inputs(rng, causal=True),
}


def equivalence_inputs(graded, seeds=(0, 1)):
    return list(itertools.chain.from_iterable(EQUIVALENCE_INPUTS[graded](np.random.default_rng(s)) for s in seeds))


# ---------------------------------------------------------------- running the hidden tests



def killed(mutant, hidden_test):
    """True when the hidden test rejects the mutant: a Hint (an AssertionError), which is how every check fails,
    whatever the mutant raised inside it (`qkv.checking.call` turns that into a Hint too). Any other error escaped
    the hidden test itself: a crash of the grader, which is a defect and not a kill, so it is raised (naming the
    mutant) rather than counted, and a grader that crashes cannot inflate the kill rate."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            hidden_test(mutant.fn)
        except AssertionError:
            return True
        except Exception as error:
            raise RuntimeError(f"{getattr(hidden_test, '__name__', hidden_test)} crashed on {mutant!r}: "
                               f"{type(error).__name__}: {error}") from error
    return False


def report(results):
    """results: lesson -> list of (mutant, [killed on draw 1, draw 2, ...]). Returns printable lines."""
    lines = []
    for lesson, rows in sorted(results.items()):
        draws = len(rows[0][1]) if rows else 0
        rates = [sum(r[1][d] for r in rows) / len(rows) for d in range(draws)] if rows else []
        lines.append(f"lesson {lesson}: {len(rows)} non-equivalent mutants; kill rate per draw "
                     + ", ".join(f"{rate:.1%}" for rate in rates))
        for mutant, outcomes in rows:
            if not all(outcomes):
                kind = "FLAKY (killed on some draws only)" if any(outcomes) else "survives"
                lines.append(f"    {kind}: {mutant!r}")
    return lines
