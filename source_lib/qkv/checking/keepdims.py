"""Reading the student's failing line for one mistake: a reduction over an axis, without keepdims, broadcast
against its own input (`x - x.max(axis=1)`, or `x - m` after `m = x.max(axis=1)`)."""
import ast

_REDUCTIONS = {"sum", "max", "min", "mean", "amax", "amin", "std", "var", "prod", "nansum", "nanmax", "nanmin",
               "nanmean", "logsumexp", "median", "average"}


def _parsed(line):
    text = line.strip()
    for candidate in (text, text.rstrip(":") + ": pass" if text.endswith(":") else None):
        if candidate:
            try:
                return ast.parse(candidate)
            except SyntaxError:
                continue
    return None


def _reduced_input(node, bound):
    """The source of what `node` reduces over an axis without keepdims=True, or None."""
    if isinstance(node, ast.Name):
        return bound.get(node.id)
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _REDUCTIONS):
        return None
    keywords = {k.arg: k.value for k in node.keywords}
    keepdims = keywords.get("keepdims")
    if isinstance(keepdims, ast.Constant) and keepdims.value is True:
        return None
    is_function = isinstance(node.func.value, ast.Name) and node.func.value.id in ("np", "numpy")
    source = node.args[0] if is_function and node.args else (None if is_function else node.func.value)
    has_axis = "axis" in keywords or len(node.args) > (1 if is_function else 0)
    return ast.unparse(source) if source is not None and has_axis else None


def reduction_against_its_input(line, earlier):
    """Does `line` broadcast a reduction without keepdims against that reduction's input (`earlier`: the lines
    of code before it, where a name may have been bound to such a reduction)?"""
    bound = {}  # names holding a reduction without keepdims, from the lines before
    for text in earlier:
        tree = _parsed(text)
        statement = tree.body[0] if tree and tree.body else None
        if (isinstance(statement, ast.Assign) and len(statement.targets) == 1
                and isinstance(statement.targets[0], ast.Name)):
            reduced = _reduced_input(statement.value, {})
            if reduced:
                bound[statement.targets[0].id] = reduced
            else:
                bound.pop(statement.targets[0].id, None)
    tree = _parsed(line)
    if tree is None:
        return False
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp):
            for side, other in ((node.left, node.right), (node.right, node.left)):
                reduced = _reduced_input(side, bound)
                if reduced:
                    reduced_names = {n.id for n in ast.walk(ast.parse(reduced, mode="eval")) if isinstance(n, ast.Name)}
                    other_names = {n.id for n in ast.walk(other) if isinstance(n, ast.Name)}
                    if reduced in ast.unparse(other) or (reduced_names - {"np", "numpy"}) & other_names:
                        return True
    return False
