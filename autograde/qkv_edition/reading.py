"""Whether anything an edition ships reads as the answer to one of its open exercises (issue 41, item 3).

`read(folder, released, handouts)` compares the reference of every exercise the edition withholds (the full
library's text of each function qkv_autograde.kernels.holdings withholds that is a hidden test's exercise) with every
text file under `folder` and, when it is a git repository, every blob of its history, in two ways:
- the course's winnowing (qkv_autograde.reports.similarity: names, strings, comments and layout normalised away,
  k-grams hashed and winnowed): a text holding most of a reference's fingerprints holds a copy of it;
- a names-normalised body comparison: every function, nested function and lambda of each Python text (a module,
  a notebook's code cells) whose body, with its names renamed in order of appearance and its docstring dropped, is
  the reference's body (lesson 01's `_sweep_of` lambda was soft_lookup_by_temperature's with other names).
Each finding names the file (or the blob and its path) and the function. Only copies are caught: a rewrite is
guarded by the probe and by the rule that nothing shipped computes an open exercise (issue 41, item 2).
"""
import ast
import dataclasses
import importlib
import inspect
import os
import pathlib
import subprocess

import nbformat

from qkv_autograde.kernels import holdings
from qkv_autograde.reports import similarity

# a text holding at least this share of a reference's fingerprints, and as many as copy detection asks of a student
# (about three lines: fewer are the checks of its arguments, which many functions share), holds its copy
SHARE = similarity.REFERENCE_SHARE
MIN_SHARED = similarity.MIN_SHARED
TEXT_SUFFIXES = {".py", ".ipynb", ".md", ".txt", ".yml", ".yaml", ".json", ".cfg", ".toml", ".ini", ".sh", ""}
MAX_TEXT = 2_000_000  # characters of one text read


@dataclasses.dataclass(frozen=True)
class Finding:
    where: str      # "qkv/checks/lesson01.py" or "git blob 1a2b3c4d5e qkv/checks/lesson01.py"
    function: str   # "_sweep_of.<lambda> (line 153)", or "" for a fingerprint match of the whole text
    reference: str  # "qkv.lookup.soft_lookup_by_temperature"
    how: str        # "the same body, names aside" or "9 of 11 fingerprints"

    def __str__(self):
        inside = f" {self.function}" if self.function else ""
        return f"{self.where}{inside} reads as {self.reference} ({self.how})"


def open_references(released, handouts):
    """{dotted name: the full library's source} of every exercise the edition withholds."""
    found = {}
    for dotted, owner in holdings.withheld_functions(released, handouts).items():
        if owner.exercise:
            module, _, name = dotted.rpartition(".")
            found[dotted] = inspect.getsource(getattr(importlib.import_module(module), name))
    return found


class _Renamer(ast.NodeTransformer):
    """Every name and argument becomes v0, v1, ... in order of first appearance; attributes after a dot stay."""

    def __init__(self):
        self.names = {}

    def _new(self, name):
        return self.names.setdefault(name, f"v{len(self.names)}")

    def visit_Name(self, node):
        return ast.copy_location(ast.Name(self._new(node.id), node.ctx), node)

    def visit_arg(self, node):
        return ast.copy_location(ast.arg(self._new(node.arg)), node)


def body_key(node):
    """The names-normalised text of a function's or lambda's body: its statements (a lambda's expression as one
    `return`), docstring dropped, names renamed in order of first appearance."""
    if isinstance(node, ast.Lambda):
        statements = [ast.Return(node.body)]
    else:
        statements = list(node.body)
        if statements and isinstance(statements[0], ast.Expr) and isinstance(statements[0].value, ast.Constant) \
                and isinstance(statements[0].value.value, str):
            statements = statements[1:]
    renamer = _Renamer()
    renamed = [renamer.visit(ast.parse(ast.unparse(statement)).body[0]) for statement in statements]
    return ast.dump(ast.Module(renamed, []), annotate_fields=False)


def functions_of(source):
    """[(name with its enclosing functions, line, node)] of every function, nested function and lambda of `source`."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    found = []

    def visit(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                name = child.name if not isinstance(child, ast.Lambda) else "<lambda>"
                qualified = f"{prefix}.{name}" if prefix else name
                found.append((qualified, child.lineno, child))
                visit(child, qualified)
            else:
                visit(child, prefix)

    visit(tree, "")
    return found


def python_of(name, text):
    """The Python code of a text: a module's whole text, a notebook's code cells; None for other texts."""
    if name.endswith(".py"):
        return text
    if name.endswith(".ipynb"):
        try:
            notebook = nbformat.reads(text, as_version=4)
        except Exception:  # a text that is not a notebook has no code
            return None
        cells = [cell.source for cell in notebook.cells if cell.cell_type == "code"]
        return "\n\n".join("\n".join("" if line.lstrip().startswith(("%", "!")) else line
                                     for line in cell.splitlines()) for cell in cells)
    return None


def texts_of(folder):
    """[(where, text)]: every text file under `folder` (.git aside) and every blob of its git history."""
    folder = pathlib.Path(folder)
    found = []
    for path in sorted(folder.rglob("*")):
        relative = path.relative_to(folder)
        if path.is_file() and relative.parts[0] != ".git" and path.suffix in TEXT_SUFFIXES:
            try:
                found.append((str(relative), path.read_text(encoding="utf-8")[:MAX_TEXT]))
            except (UnicodeDecodeError, OSError):
                continue
    if (folder / ".git").exists():
        found += _blobs(folder)
    return found


def _blobs(folder):
    listed = subprocess.run(["git", "rev-list", "--objects", "--all"], cwd=folder, capture_output=True, text=True,
                            check=True).stdout.splitlines()
    paths = {}
    for line in listed:
        sha, _, path = line.partition(" ")
        if path and os.path.splitext(path)[1] in TEXT_SUFFIXES:
            paths.setdefault(sha, path)
    # one `git cat-file --batch` for them all: "<sha> <type> <size>\n<content>\n" each
    asked = "".join(f"{sha}\n" for sha in paths).encode()
    out = subprocess.run(["git", "cat-file", "--batch"], cwd=folder, input=asked, capture_output=True,
                         check=True).stdout
    found, at = [], 0
    while at < len(out):
        header_end = out.index(b"\n", at)
        sha, kind, size = out[at:header_end].decode().split()[:3]
        content = out[header_end + 1:header_end + 1 + int(size)]
        at = header_end + 1 + int(size) + 1
        if kind == "blob":
            try:
                found.append((f"git blob {sha[:10]} {paths[sha]}", content.decode("utf-8")[:MAX_TEXT]))
            except UnicodeDecodeError:
                continue
    return found


def read(folder, released, handouts, texts=None):
    """[Finding]: what under `folder` (an edition, or its library's parent) reads as an open exercise's reference."""
    references = open_references(released, handouts)
    prints = {dotted: similarity.fingerprints_of(source) for dotted, source in references.items()}
    bodies = {}
    for dotted, source in references.items():
        node = ast.parse(source.strip()).body[0] if source.startswith((" ", "\t")) else ast.parse(source).body[0]
        bodies.setdefault(body_key(node), []).append(dotted)
    findings = []
    for where, text in (texts_of(folder) if texts is None else texts):
        held = similarity.fingerprints_of(text)
        for dotted, own in prints.items():
            shared = len(own.keys() & held.keys())
            if own and shared >= MIN_SHARED and shared >= SHARE * len(own):
                findings.append(Finding(where, "", dotted, f"{shared} of {len(own)} fingerprints"))
        code = python_of(where, text)
        for name, line, node in functions_of(code) if code else ():
            for dotted in bodies.get(body_key(node), ()):
                findings.append(Finding(where, f"{name} (line {line})", dotted, "the same body, names aside"))
    return findings
