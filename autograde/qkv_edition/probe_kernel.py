"""The probe's kernel (qkv_edition.probe): a sandboxed kernel whose qkv is the probed folder's, holding every
candidate of that folder and the solution notebook's own functions (the controls).

The kernel imports every module of the package (one that fails is reported, not fatal) and lists every top-level
function, every class's staticmethod and classmethod, every method of a module-level object (and the object itself
when callable), and every callable held in a module-level list, tuple, dict, dataclass or NamedTuple (mistake
catalogues, Check declarations), each named by its dotted path (`qkv.checks.lesson01.SOFTMAX_MISTAKES[3][0]`), each
once, and inside each function every nested function and lambda that closes over nothing (issue 41). Its qkv is the
folder's: PYTHONPATH first, the folder's package also bound where the editable install looks, the editable finder
removed, and every `qkv` module the kernel imported checked to come from the folder.
"""
import functools
import os

import nbformat

from qkv import NO_FRONT_END, lessons as registry

from qkv_autograde.kernels import sandbox, student_kernel
from qkv_edition.probe_glue import ARGUMENT_GLUES, GLUES, KERNEL_GLUE, PRESCREEN_SECONDS  # noqa: F401 - GLUES read by probe

LIBRARY = os.path.dirname(os.path.abspath(registry.__file__))  # the full library (the editable install's folder)


class ProbeError(RuntimeError):
    """The probe could not judge the folder (no qkv in it, a kernel whose qkv is not the folder's, a control that a
    candidate broke)."""


PREFIX = "_qkv_probe_"

# Run in the kernel first, before anything imports qkv: the folder's package, checked, every module imported, every
# candidate bound to a global _qkv_probe_c<i>, and the catalogue in _qkv_probe_catalogue (plain data, read by wire).
KERNEL_SETUP = r'''
def _qkv_probe_setup(folder):
    import ast, dataclasses, functools, importlib, inspect, os, sys, types
    folder = os.path.realpath(folder)
    # the full library is an editable install: its finder must not answer for a module the folder lacks
    sys.meta_path[:] = [f for f in sys.meta_path if not str(getattr(f, "__module__", "")).startswith("__editable__")]
    if any(name == "qkv" or name.startswith("qkv.") for name in sys.modules):
        raise RuntimeError("qkv was imported in the probe's kernel before its set-up")

    def inside(path):
        return bool(path) and os.path.realpath(path).startswith(folder + os.sep)

    import qkv
    if not inside(qkv.__file__):
        raise RuntimeError(f"the kernel imported qkv from {qkv.__file__}, not from {folder}")
    package = os.path.dirname(os.path.realpath(qkv.__file__))
    modules, failures = [], []
    for root, dirs, files in os.walk(package):
        dirs[:] = sorted(d for d in dirs if os.path.exists(os.path.join(root, d, "__init__.py")))
        for file in sorted(files):
            if not file.endswith(".py"):
                continue
            parts = os.path.relpath(os.path.join(root, file), os.path.dirname(package))[:-3].split(os.sep)
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            try:
                modules.append(importlib.import_module(name))
            except BaseException as error:
                failures.append([name, f"{type(error).__name__}: {error}"[:500]])
    outside = sorted(name for name, module in list(sys.modules.items())
                     if (name == "qkv" or name.startswith("qkv.")) and getattr(module, "__file__", None)
                     and not inside(module.__file__))
    if outside:
        raise RuntimeError(f"modules of qkv imported from outside {folder}: {outside[:5]}")

    def code_of(obj):
        obj = getattr(obj, "__func__", obj)
        while isinstance(obj, functools.partial):
            obj = obj.func
        try:
            obj = inspect.unwrap(obj)
        except ValueError:
            return None
        obj = getattr(obj, "__func__", obj)
        code = getattr(obj, "__code__", None)
        return code.co_filename if code is not None else None

    def ours(obj):
        return inside(code_of(obj))

    def ours_class(cls):
        try:
            return inside(inspect.getfile(cls))
        except (TypeError, OSError):
            return False

    found, seen = [], set()

    def add(path, fn):
        key = (id(getattr(fn, "__func__", fn)), id(getattr(fn, "__self__", None)))
        if key in seen:
            return
        seen.add(key)
        found.append((path, fn))
        if isinstance(fn, types.FunctionType):
            nested(path, fn.__code__, fn.__globals__)

    def nested(path, code, namespace):
        # the functions and lambdas defined inside a function, made callable on their own where they close over
        # nothing (a catalogue's `(lambda e: e / np.sum(e))(...)`, a helper def inside a check): each a candidate
        for inner in code.co_consts:
            if isinstance(inner, types.CodeType) and (inner.co_name == "<lambda>" or not inner.co_name.startswith("<")):
                name = f"{path}.<locals>.{inner.co_name}"
                if inner.co_freevars:
                    nested(name, inner, namespace)
                elif (id(inner), None) not in seen:
                    seen.add((id(inner), None))
                    made = types.FunctionType(inner, namespace, inner.co_name)
                    made.__defaults__, made.__kwdefaults__ = literal_defaults(inner)
                    found.append((name, made))
                    nested(name, inner, namespace)

    sources = {}

    def literal_defaults(code):
        # a nested function's defaults are made when its def runs: read them from its source where they are literals
        if code.co_filename not in sources:
            try:
                with open(code.co_filename, encoding="utf-8") as f:
                    sources[code.co_filename] = list(ast.walk(ast.parse(f.read())))
            except (OSError, SyntaxError, ValueError):
                sources[code.co_filename] = []
        names = list(code.co_varnames[:code.co_argcount + code.co_kwonlyargcount])
        for node in sources[code.co_filename]:
            if isinstance(node, (ast.Lambda, ast.FunctionDef)) and node.lineno == code.co_firstlineno and \
                    [a.arg for a in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs)] == names:
                try:
                    defaults = tuple(ast.literal_eval(d) for d in node.args.defaults) or None
                    keywords = {a.arg: ast.literal_eval(d) for a, d in zip(node.args.kwonlyargs,
                                                                           node.args.kw_defaults) if d is not None}
                    return defaults, keywords or None
                except ValueError:
                    return None, None
        return None, None

    def methods(path, obj):
        for attr in sorted(dir(type(obj))):
            if attr.startswith("__"):
                continue
            try:
                raw = inspect.getattr_static(type(obj), attr)
                bound = getattr(obj, attr)
            except Exception:
                continue
            if callable(bound) and not inspect.isclass(bound) and ours(raw):
                add(f"{path}.{attr}", bound)

    def visit(path, value, depth):
        if isinstance(value, (types.ModuleType, str, bytes, int, float, complex, bool, type(None))):
            return
        if inspect.isclass(value):
            if ours_class(value):
                for attr, raw in vars(value).items():
                    if isinstance(raw, (staticmethod, classmethod)) and ours(raw.__func__):
                        add(f"{path}.{attr}", getattr(value, attr))
            return
        if isinstance(value, (types.FunctionType, functools.partial, types.MethodType)) or (
                callable(value) and hasattr(value, "__wrapped__")):
            if ours(value):
                canonical = getattr(value, "__module__", None), getattr(value, "__qualname__", "")
                module = sys.modules.get(canonical[0]) if canonical[0] else None
                if module is not None and "." not in canonical[1] and "<" not in canonical[1] \
                        and getattr(module, canonical[1], None) is value:
                    path = f"{canonical[0]}.{canonical[1]}"
                add(path, value)
            return
        if depth >= 4:
            return
        if isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):
            for index, item in enumerate(value[:10_000]):
                visit(f"{path}[{index}]", item, depth + 1)
        elif isinstance(value, dict):
            for key, item in list(value.items())[:10_000]:
                visit(f"{path}[{key!r}]", item, depth + 1)
        elif dataclasses.is_dataclass(value) or hasattr(value, "_fields") or isinstance(value, types.SimpleNamespace):
            if hasattr(value, "_fields"):
                fields = value._fields
            elif dataclasses.is_dataclass(value):
                fields = [f.name for f in dataclasses.fields(value)]
            else:
                fields = list(vars(value))
            for field in fields:
                visit(f"{path}.{field}", getattr(value, field, None), depth + 1)
            if ours_class(type(value)):
                methods(path, value)
        elif ours_class(type(value)):
            if callable(value):
                add(path, value)
            methods(path, value)

    for module in modules:
        for name, value in list(vars(module).items()):
            if not (name.startswith("__") and name.endswith("__")) or name in ("__getattr__", "__dir__"):
                visit(f"{module.__name__}.{name}", value, 0)

    catalogue = []
    for index, (path, fn) in enumerate(found):
        globals()[f"_qkv_probe_c{index}"] = fn
        catalogue.append([f"_qkv_probe_c{index}", path, _qkv_probe_signature(fn)])
    return {"candidates": catalogue, "failures": failures, "qkv_file": qkv.__file__}


def _qkv_probe_signature(fn):
    import inspect
    try:
        return [[p.name, int(p.kind), p.default is not inspect.Parameter.empty]
                for p in inspect.signature(fn).parameters.values()]
    except (TypeError, ValueError):
        return None


_qkv_probe_catalogue = _qkv_probe_setup(FOLDER)
del _qkv_probe_setup
'''

# The student's pasted code (candidates named pasted.<name>), and the routes of qkv_edition.probe_routes (named
# route.<name>): run as a notebook cell would, in the kernel's globals.
KERNEL_PASTED = r'''
_qkv_probe_before = set(globals())
exec(compile(PASTED, "<pasted>", "exec"), globals())
_qkv_probe_catalogue["candidates"] += [
    [_qkv_probe_name, NAMED + _qkv_probe_name, _qkv_probe_signature(globals()[_qkv_probe_name])]
    for _qkv_probe_name in list(globals())
    if _qkv_probe_name not in _qkv_probe_before and not _qkv_probe_name.startswith("_qkv_probe_")
    and callable(globals()[_qkv_probe_name]) and not isinstance(globals()[_qkv_probe_name], type)
    and type(globals()[_qkv_probe_name]).__name__ != "module"]
del _qkv_probe_before
'''

# The solution notebook's setup imports and answer cells, in a namespace of their own: the controls, and the other
# functions of a test that takes several. A cell that fails is named; the controls then say what is missing.
KERNEL_SOLUTIONS = r'''
_qkv_probe_solution_failures = []
for _qkv_probe_lesson, _qkv_probe_sources in SOLUTIONS.items():
    _qkv_probe_ns = {"__name__": "__main__"}
    for _qkv_probe_source in _qkv_probe_sources:
        try:
            exec(compile(_qkv_probe_source, "<solution " + _qkv_probe_lesson + ">", "exec"), _qkv_probe_ns)
        except BaseException as _qkv_probe_error:
            _qkv_probe_solution_failures.append([_qkv_probe_lesson, type(_qkv_probe_error).__name__ + ": "
                                                 + str(_qkv_probe_error)[:300]])
    for _qkv_probe_name, _qkv_probe_value in list(_qkv_probe_ns.items()):
        if callable(_qkv_probe_value) and not _qkv_probe_name.startswith("__"):
            globals()["_qkv_probe_s" + _qkv_probe_lesson[:2] + "_" + _qkv_probe_name] = _qkv_probe_value
'''


class CandidateKernel:
    """The sandboxed kernel holding the folder's candidates (and the solutions' functions, for the controls)."""

    def __init__(self, folder, call_seconds=20, memory_bytes=2 << 30, log=None):
        self.folder = os.path.realpath(folder)
        package = os.path.join(self.folder, "qkv")
        if not os.path.isfile(os.path.join(package, "__init__.py")):
            raise ProbeError(f"{folder} holds no package named qkv (no qkv/__init__.py)")
        from qkv import fetch

        cache = str(fetch.cache_dir())
        self.walls = sandbox.Sandbox(
            library_view=(LIBRARY, package), limits=sandbox.Limits(memory_bytes=memory_bytes),
            read_only=[self.folder, cache, str(registry.course_paths().notebooks)],
            env={"QKV_CACHE": cache, NO_FRONT_END: "1", "PYTHONPATH": self.folder})
        self.kernel = student_kernel.StudentKernel(
            functools.partial(sandbox.SandboxedKernelManager, sandbox=self.walls), budget_seconds=7 * 24 * 3600,
            cell_seconds=600, call_seconds=call_seconds, output_bytes=1 << 20, log=log)
        self.catalogue = None
        self.solution_failures = []

    def start(self, pasted=None, solutions=None, routes=None):
        self.kernel.start()
        self._run(KERNEL_SETUP.replace("FOLDER", repr(self.folder)), "the probe's set-up")
        for source, named, what in ((routes, "route.", "the probe's routes"), (pasted, "pasted.", "the pasted code")):
            if source:
                self._run(KERNEL_PASTED.replace("NAMED", repr(named)).replace("PASTED", repr(source)), what)
        glue = KERNEL_GLUE.replace("ARGUMENT_GLUES", repr(ARGUMENT_GLUES)).replace("GLUES", repr(GLUES))
        self._run(glue.replace("SECONDS", repr(PRESCREEN_SECONDS)), "the candidates' glue")
        if solutions:
            self._run(KERNEL_SOLUTIONS.replace("SOLUTIONS", repr(solutions)), "the solutions' cells")
            self.solution_failures = self.kernel.get("_qkv_probe_solution_failures")
        self.catalogue = self.kernel.get("_qkv_probe_catalogue")
        return self.catalogue

    def _run(self, source, what):
        cell = nbformat.v4.new_code_cell(source)
        status = self.kernel.run_cell(cell, len(self.kernel.ran))  # kept in `ran`: replayed after a restart
        if status != "ok":
            errors = [f"{o.get('ename')}: {o.get('evalue')}" for o in cell.outputs if o.get("output_type") == "error"]
            raise ProbeError(f"{what} failed in the probe's kernel ({status}): {'; '.join(errors)[:2000]}")

    def function(self, target, name):
        """The grader's stand-in for the kernel's global `target`, as the student's `name` (module __main__)."""
        return student_kernel.RemoteFunction(self.kernel, target, name)

    def close(self):
        self.kernel.close()
        self.walls.cleanup()

