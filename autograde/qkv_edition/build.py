"""`make student-edition DEST=... [LESSONS=...] [HANDOUTS=...]`: the repository an instructor publishes for a graded
class (issue 33). Its own `git init` and one commit, no history of this repository; it holds the released lessons'
notebooks, the student build of `qkv` (qkv_edition.library.build_student_library), and what Binder and `make lab`
need: environment.yml without the test-only lines, postBuild, start (self-study answers off), jupyter/student,
jupyter/lab-overrides.json, a Makefile and a README for students (templates/). Nothing else: no solutions/,
autograde/, tests/, bench/, hidden tests, answer keys, no bytecode.

Released lessons are LESSONS (default: all); HANDOUTS (default: none) are lessons whose reference code ships as-is.
A released lesson that is not a handout is open: its graded functions are withheld. The command refuses, naming
the lesson to add to HANDOUTS, when a released lesson needs something another lesson withholds. What a lesson
needs is read from the source (ast), never from a hand list: every qkv name its released notebook imports or uses
and, transitively, everything those refer to in the library (function bodies, defaults, decorators, lazy imports,
what a module runs when imported). The withheld functions of a lesson are its hidden tests' GRADED_REFERENCES
(autograde/qkv_grading/lessonNN.py, as the grader's kernel view reads them); a withheld function becomes a stub
that calls nothing, so the walk stops there.

    python -m qkv_edition.build --dest DEST [--lessons 01-lookup,02-by-hand] [--handouts 01-lookup]
"""
import argparse
import ast
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import time
from typing import NamedTuple

from qkv_autograde.kernels.kernel_view import (graded_references)  # noqa: F401 - first: makes nbformat import faster; tests read it here

import nbformat

import qkv.lessons

STARTED = time.monotonic()  # the command's time (python -m qkv_edition.build)
ROOT = pathlib.Path(__file__).resolve().parents[2]  # autograde/qkv_edition/build.py -> the course checkout
TEMPLATES = pathlib.Path(__file__).resolve().parent / "templates"
# what the edition takes from the course as it is (beside the notebooks and the student build of qkv)
COPIED = ("jupyter/student", "jupyter/lab-overrides.json", "jupyter/ipython_kernel_config.py",
          "source_lib/pyproject.toml")


class Refused(Exception):
    """The edition cannot be built as asked; the message says why and what to do."""


# ================================================================ what a lesson needs (ast)

class _Module(NamedTuple):
    name: str              # qkv.checking.compare
    tree: ast.Module
    symbols: dict          # top-level name -> its definition (FunctionDef, ClassDef) or assigned value
    aliases: dict          # top-level name an import binds -> dotted target ("qkv.attention", "qkv.attention.softmax")
    imports: frozenset     # qkv modules its top level imports (run when it is imported)


def _is_package(path):
    return path.name == "__init__.py"


def _import_targets(node, module_name, is_package):
    """(bound name, dotted target, imported modules) for each name an import statement binds."""
    if isinstance(node, ast.Import):
        for alias in node.names:
            if alias.asname:
                yield alias.asname, alias.name, (alias.name,)
            else:  # `import qkv.attention` binds qkv and imports qkv.attention
                yield alias.name.split(".")[0], alias.name.split(".")[0], (alias.name,)
        return
    base = node.module or ""
    if node.level:
        package = module_name.split(".") if is_package else module_name.split(".")[:-1]
        package = package[:len(package) - (node.level - 1)]
        base = ".".join(package + ([node.module] if node.module else []))
    for alias in node.names:
        target = f"{base}.{alias.name}"
        yield alias.asname or alias.name, target, (base, target)


class Library:
    """An index of the qkv package's source: who refers to what."""

    def __init__(self, package_folder):
        self.folder = pathlib.Path(package_folder)
        self.modules = {}
        for path in sorted(self.folder.rglob("*.py")):
            if "__pycache__" in path.parts:
                continue
            parts = ("qkv",) + path.relative_to(self.folder).with_suffix("").parts
            name = ".".join(parts[:-1] if _is_package(path) else parts)
            self.modules[name] = self._index(name, path)
        self._references = {}

    def _index(self, name, path):
        tree = ast.parse(path.read_text(), str(path))
        symbols, aliases, imports = {}, {}, set()
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                symbols[node.name] = node
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    for leaf in ast.walk(target):
                        if isinstance(leaf, ast.Name):
                            symbols[leaf.id] = node.value
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                for bound, target, modules in _import_targets(node, name, _is_package(path)):
                    aliases[bound] = target
                    imports.update(m for m in modules if m.split(".")[0] == "qkv")
        return _Module(name, tree, symbols, aliases, frozenset(imports))

    def _import_time(self, module):
        """What importing a module runs: every call and decorator outside function bodies (class bodies run too),
        and whole any other statement at the top level (an if, a loop, an expression)."""
        found = set()
        for node in module.tree.body:
            for executed in _executed_at_import(node):
                target = executed.func if isinstance(executed, ast.Call) else executed
                found |= self._names_in(module, target, local_imports={}, local_names=set())
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Assign, ast.AnnAssign,
                                     ast.AugAssign, ast.Import, ast.ImportFrom)):
                found |= self._names_in(module, node, local_imports={}, local_names=set())
        return found

    # ------------------------------------------------------------ resolving names

    def resolve(self, dotted, _seen=None):
        """The definition a dotted name reaches: ('symbol', 'qkv.attention.softmax'), ('module', 'qkv.attention'),
        or None when it is not qkv's (numpy, a builtin, an instance attribute)."""
        if not dotted or dotted.split(".")[0] != "qkv":
            return None
        parts = dotted.split(".")
        for cut in range(len(parts), 0, -1):
            module = ".".join(parts[:cut])
            if module not in self.modules:
                continue
            if cut == len(parts):
                return ("module", module)
            name = parts[cut]
            info = self.modules[module]
            if name in info.symbols:
                return ("symbol", f"{module}.{name}")  # Class.method and object.attr stop at the top-level name
            if name in info.aliases:
                seen = set(_seen or ())
                if (module, name) in seen:
                    return None
                seen.add((module, name))
                return self.resolve(".".join([info.aliases[name]] + parts[cut + 1:]), seen)
            return None
        return None

    def _names_in(self, module, node, local_imports, local_names):
        """Every qkv symbol a piece of code refers to (by a name or an attribute chain)."""
        found = set()

        def chain(expr):
            attrs = []
            while isinstance(expr, ast.Attribute):
                attrs.append(expr.attr)
                expr = expr.value
            if not isinstance(expr, ast.Name):
                return None
            return expr.id, list(reversed(attrs))

        def base_target(name):
            if name in local_imports:
                return local_imports[name]
            if name in local_names:
                return None
            if name in module.symbols:
                return f"{module.name}.{name}"
            return module.aliases.get(name)

        for sub in ast.walk(node):
            if isinstance(sub, (ast.Attribute, ast.Name)) and isinstance(getattr(sub, "ctx", None), ast.Load):
                parsed = chain(sub)
                if parsed is None:
                    continue
                base = base_target(parsed[0])
                if base is None:
                    continue
                resolved = self.resolve(".".join([base] + parsed[1]))
                if resolved and resolved[0] == "symbol":
                    found.add(resolved[1])
                elif resolved and resolved[0] == "module":
                    found.add(resolved[1])
        return found

    def references(self, qualname):
        """What a symbol or module refers to (symbols and modules, dotted): for a module, what importing it runs;
        for a function or class, its whole definition (body, defaults, decorators, lazy imports)."""
        if qualname in self._references:
            return self._references[qualname]
        if qualname in self.modules:
            info = self.modules[qualname]
            refs = {m for m in info.imports if m in self.modules} | self._import_time(info)
            parent = qualname.rsplit(".", 1)[0]
            if parent != qualname and parent in self.modules:
                refs.add(parent)  # importing qkv.checks.lesson01 runs qkv/__init__ and qkv/checks/__init__ first
        else:
            module_name, name = qualname.rsplit(".", 1)
            info = self.modules[module_name]
            node = info.symbols[name]
            local_imports, local_names, imported_modules = {}, set(), set()
            for sub in ast.walk(node):
                if isinstance(sub, (ast.Import, ast.ImportFrom)):
                    for bound, target, modules in _import_targets(sub, module_name, module_name in self._packages()):
                        local_imports[bound] = target
                        imported_modules.update(m for m in modules if m in self.modules)
                elif isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
                    local_names.add(sub.id)
                elif isinstance(sub, ast.arg):
                    local_names.add(sub.arg)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                local_names.discard(name)
            refs = self._names_in(info, node, local_imports, local_names) | imported_modules | {module_name}
        refs.discard(qualname)
        self._references[qualname] = frozenset(refs)
        return self._references[qualname]

    def _packages(self):
        return {name for name in self.modules if (self.folder / "/".join(name.split(".")[1:]) / "__init__.py").exists()
                or name == "qkv"}

    def reachable(self, roots, stop=lambda name: False):
        """Everything reachable from `roots` (dotted name -> how: the chain of names that leads there from a root);
        the walk does not go through a name for which `stop(name)` is true (it is reached, not followed)."""
        how = {root: (root,) for root in roots}
        queue = list(roots)
        while queue:
            name = queue.pop(0)
            if stop(name):
                continue
            for ref in sorted(self.references(name)):
                if ref not in how:
                    how[ref] = how[name] + (ref,)
                    queue.append(ref)
        return how


def _executed_at_import(node):
    """Call and decorator nodes that run when a top-level statement runs (function bodies do not)."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        yield from node.decorator_list
        for default in node.args.defaults + [d for d in node.args.kw_defaults if d is not None]:
            yield from (n for n in ast.walk(default) if isinstance(n, ast.Call))
        return
    if isinstance(node, ast.ClassDef):
        yield from node.decorator_list
        yield from node.bases
        for statement in node.body:
            yield from _executed_at_import(statement)
        return
    if isinstance(node, ast.Lambda):
        return
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.Call):
            yield child
            yield from _executed_at_import(child)
        else:
            yield from _executed_at_import(child)


def _code_cells(notebook_path):
    notebook = nbformat.read(notebook_path, as_version=4)
    for index, cell in enumerate(notebook.cells):
        if cell.cell_type == "code":
            # IPython magics and shell lines are not Python
            source = "\n".join("" if re.match(r"\s*[%!]", line) else line for line in cell.source.splitlines())
            yield index, ast.parse(source, f"{notebook_path.name}, cell {index}")


def notebook_uses(notebook_path, library):
    """The qkv names a notebook imports or uses (its imports, and the attributes of imported qkv modules)."""
    fake = _Module(f"<{notebook_path.name}>", ast.Module(body=[], type_ignores=[]), {}, {}, frozenset())
    uses = set()
    cells = list(_code_cells(notebook_path))
    for _, tree in cells:
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)) and not getattr(node, "level", 0):
                for bound, target, modules in _import_targets(node, fake.name, False):
                    if target.split(".")[0] == "qkv":
                        fake.aliases[bound] = target
                        uses.update(m for m in modules if m in library.modules)
                        resolved = library.resolve(target)
                        if resolved:
                            uses.add(resolved[1])
    for _, tree in cells:
        uses |= library._names_in(fake, tree, local_imports={}, local_names=set())
    return uses




class Conflict(NamedTuple):
    lesson: object      # the released lesson that needs the function
    function: str       # qkv.attention.softmax
    owners: tuple       # the lessons, not handouts, that withhold it
    path: tuple         # how the lesson reaches it: (what its notebook uses, ..., the function)


def removed_checks(released, handouts, library):
    """qkv.checks modules an edition leaves out: those of lessons neither released nor handouts (lessonNN and its
    lessonNN_* companions)."""
    kept = {row.number for row in (*released, *handouts)}
    pattern = re.compile(r"qkv\.checks\.lesson(\d+)(_\w+)?$")
    return {name for name in library.modules if (m := pattern.match(name)) and m.group(1) not in kept}


def _is_checks(name):
    return name.startswith("qkv.checks.")


def conflicts(released, handouts, library, notebooks_folder):
    """For every released lesson, each thing it needs that the edition will not hold whole: a function another
    lesson (not a handout) withholds, or the checks of a lesson that is not in the edition.

    A lesson's own exercises are not counted: its checks reach them (the fixtures answer those calls), and a tool of
    an earlier lesson may reach them on a path the notebook does not take (lesson 02's self_attention reaches
    lesson 04's masked_softmax only with a mask), which reading the source cannot tell. Whether each lesson's
    notebook runs in its edition is run, not read: tests/test_edition.py runs every lesson's solution answers in the
    edition of its usual term."""
    from qkv_edition.library import withheld_functions, withholds  # the student build's own rule of what becomes a stub

    # a lesson's own: its GRADED_REFERENCES and its twins (its checks reach those, and its fixtures answer them)
    references = {row.slug: frozenset(withholds(row)) for row in qkv.lessons.LESSONS}
    stubs = set(withheld_functions(released, handouts))
    missing = removed_checks(released, handouts, library)
    found = []
    for lesson in released:
        roots = sorted(notebook_uses(notebook_of(notebooks_folder, lesson), library))
        how = library.reachable(roots, stop=stubs.__contains__)
        own = references[lesson.slug]
        for function in sorted(set(how) & stubs - own):
            owners = tuple(row for row in qkv.lessons.LESSONS
                           if row not in handouts and row != lesson and function in references[row.slug])
            found.append(Conflict(lesson, function, owners, how[function]))
        for module in sorted(set(how) & missing):
            number = re.match(r"qkv\.checks\.lesson(\d+)", module).group(1)
            found.append(Conflict(lesson, module, (qkv.lessons.lesson(number),), how[module]))
    return found


def _names(rows):
    slugs = [row.slug for row in rows]
    return slugs[0] if len(slugs) == 1 else ", ".join(slugs[:-1]) + " and " + slugs[-1]


def refusal(found, released, handouts, still_missing):
    """What a refused command prints: which lesson needs what, from which lesson, and the HANDOUTS that would do
    (`still_missing(handouts)` -> the conflicts left with those handouts)."""
    lines = []
    for lesson in sorted({c.lesson for c in found}):
        lines.append(f"Lesson {lesson.slug} would not run in this edition:")
        for c in (c for c in found if c.lesson == lesson):
            use = f"its notebook uses {c.path[0]}"
            if len(c.path) > 1:
                use += f", which uses {c.path[-1]}"
                if len(c.path) > 2:
                    use += " (through " + " -> ".join(c.path[1:-1]) + ")"
            if _is_checks(c.function):
                lines.append(f"  - {use}: the checks of lesson {_names(c.owners)}, which this edition leaves out.")
            elif len(c.owners) == 1:
                lines.append(f"  - {use}: an exercise of lesson {c.owners[0].slug}, which is not a handout.")
            else:
                lines.append(f"  - {use}: an exercise of lessons {_names(c.owners)}, none of them a handout.")
    # the fewest handouts, earliest lessons first (they close first), that leave nothing missing that they can fix
    suggested = set(handouts)
    for _ in qkv.lessons.LESSONS:
        left = still_missing(tuple(sorted(suggested)))
        if not left:
            break
        for c in left:
            if not suggested & set(c.owners):
                suggested.add(min(c.owners))
    added = sorted(suggested - set(handouts))
    lines.append(f"Add {_names(added)} to HANDOUTS (HANDOUTS={','.join(row.slug for row in sorted(suggested))}) "
                 f"once {'that lesson is' if len(added) == 1 else 'those lessons are'} closed: a handout's reference "
                 f"code ships as-is. Or leave {_names(sorted({c.lesson for c in found}))} out of LESSONS.")
    return "\n".join(lines)


# ================================================================ the edition

def notebook_of(notebooks_folder, lesson):
    found = sorted((pathlib.Path(notebooks_folder) / lesson.slug).glob("*.ipynb"))
    if not found:
        raise Refused(f"no notebook in {notebooks_folder}/{lesson.slug}: run make release first")
    return found[0]


def parse_lessons(text, what):
    """Lessons named by slug ('01-lookup,02-by-hand', commas or spaces), in the course's order."""
    slugs = [s for s in re.split(r"[,\s]+", text or "") if s]
    known = {row.slug: row for row in qkv.lessons.LESSONS}
    unknown = [s for s in slugs if s not in known]
    if unknown:
        raise Refused(f"{what}: no lesson {', '.join(unknown)} in qkv.lessons.LESSONS; the lessons are "
                      + ",".join(known))
    return tuple(row for row in qkv.lessons.LESSONS if row.slug in slugs)


def environment_for_students(text):
    """environment.yml without its test-only part: the `#test:` lines, the comments that introduce them, and the
    header's sentences about `make test` (replaced by the edition's own)."""
    lines = text.splitlines()
    kept = []
    for index, line in enumerate(lines):
        if line.startswith("#test:"):
            continue
        if line.lstrip().startswith("#") and index + 1 < len(lines) and lines[index + 1].startswith("#test:"):
            continue  # the comment that says what the test-only line after it is for
        kept.append(line)
    body = kept[next(i for i, line in enumerate(kept) if not line.startswith("#")):]
    return ("# The packages and versions of this edition of qkv. Binder builds from this file; `make install`\n"
            "# (used by `make lab`) installs its pip section.\n" + "\n".join(body).rstrip("\n") + "\n")


def fill(template, **values):
    text = (TEMPLATES / template).read_text()
    for key, value in values.items():
        text = text.replace("{{" + key + "}}", value)
    leftover = re.findall(r"\{\{\w+\}\}", text)
    assert not leftover, f"templates/{template}: nothing fills {leftover}"
    return text


def notebook_title(path):
    """The first heading of a notebook ('Lesson 01 · Attention is a soft lookup')."""
    for cell in nbformat.read(path, as_version=4).cells:
        if cell.cell_type == "markdown":
            match = re.search(r"^#\s+(.+)$", cell.source, re.M)
            if match:
                return match.group(1).strip()
    return path.stem


def write_edition(stage, root, released, handouts, build_student_library):
    notebooks = root / "notebooks"
    for lesson in released:
        for path in sorted((notebooks / lesson.slug).rglob("*")):
            relative = path.relative_to(notebooks)
            if any(part.startswith(".") or part == "__pycache__" for part in relative.parts) or path.is_dir():
                continue
            (stage / "notebooks" / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, stage / "notebooks" / relative)
    for item in COPIED:
        source, target = root / item, stage / item
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, target, ignore=shutil.ignore_patterns(".*", "__pycache__", "*.pyc"))
        else:
            shutil.copy2(source, target)
    build_student_library(stage / "source_lib", tuple(row.slug for row in released),
                          tuple(row.slug for row in handouts))

    first = released[0]
    uses_model = any(row.uses_model for row in released)
    (stage / "environment.yml").write_text(environment_for_students((root / "environment.yml").read_text()))
    model = fill("postBuild-model") if uses_model else ""
    for script, text in (("postBuild", fill("postBuild", model=model.rstrip("\n")).rstrip("\n") + "\n"),
                         ("start", fill("start"))):
        (stage / script).write_text(text)
        (stage / script).chmod(0o755)
    (stage / "Makefile").write_text(fill("Makefile", first_lesson=first.slug, uses_model="yes" if uses_model else ""))
    (stage / ".gitignore").write_text(fill("gitignore"))
    notebook = {row: f"notebooks/{row.slug}/{notebook_of(notebooks, row).name}" for row in released}
    rows = "\n".join(f"| [{notebook_title(root / notebook[row])}]({notebook[row]}) | `notebooks/{row.slug}/` |"
                     for row in released)
    (stage / "README.md").write_text(fill("README.md", first_notebook=notebook[first], lessons=rows,
                                          model_note=fill("README-model.md") if uses_model else ""))
    # the edition ships no bytecode of anything (of the full library least of all)
    for path in sorted(stage.rglob("*"), reverse=True):
        if path.name == "__pycache__" and path.is_dir():
            shutil.rmtree(path)
        elif path.suffix in (".pyc", ".pyo") and path.is_file():
            path.unlink()


def commit(stage, released, handouts, root):
    def git(*args, **kwargs):
        return subprocess.run(["git", *args], cwd=stage, check=True, capture_output=True, text=True, **kwargs)

    git("init", "--quiet", "--initial-branch=main", "--template=")
    git("add", "--all")
    source = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True)
    revision = source.stdout.strip() if source.returncode == 0 else ""
    built_from = f" (built from qkv {revision})" if revision else ""
    message = (f"qkv student edition: lessons {', '.join(row.slug for row in released)}{built_from}\n\n"
               f"Handouts (reference code shipped as-is): {', '.join(row.slug for row in handouts) or 'none'}.\n")
    identity = []
    for key, default in (("user.name", "qkv student edition"), ("user.email", "qkv-student-edition@localhost")):
        if subprocess.run(["git", "config", key], cwd=stage, capture_output=True).returncode != 0:
            identity += ["-c", f"{key}={default}"]
    subprocess.run(["git", *identity, "-c", "commit.gpgsign=false", "commit", "--quiet", "--no-verify", "-m", message],
                   cwd=stage, check=True, capture_output=True, text=True)


def size_of(folder):
    files = [p for p in folder.rglob("*") if p.is_file() and ".git" not in p.relative_to(folder).parts]
    history = [p for p in (folder / ".git").rglob("*") if p.is_file()]
    return len(files), sum(p.stat().st_size for p in files), sum(p.stat().st_size for p in history)


def build(dest, lessons=None, handouts=None, root=ROOT, build_student_library=None):
    """Write the student edition at `dest`. `lessons`/`handouts`: comma- or space-separated slugs (lessons default:
    all; handouts: none). Raises Refused with the reason. Returns (files, bytes, bytes of its .git)."""
    root = pathlib.Path(root).resolve()
    dest = pathlib.Path(dest).resolve()
    released = parse_lessons(lessons, "LESSONS") if lessons else tuple(qkv.lessons.LESSONS)
    handed_out = parse_lessons(handouts, "HANDOUTS") if handouts else ()
    if not released:
        raise Refused("LESSONS names no lesson")
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise Refused(f"{dest} already exists and is not empty: choose a new folder for DEST (the edition is a new "
                      "repository, never written over another)")
    library_source = root / "source_lib" / "qkv"
    if pathlib.Path(qkv.lessons.LIBRARY) != library_source:
        raise Refused(f"this Python imports qkv from {qkv.lessons.LIBRARY}, not from {library_source}: run "
                      f"`make student-edition` in {root} (it puts that checkout's library first)")
    paths = qkv.lessons.course_paths(root)
    library = Library(library_source)

    def missing(handouts):
        return conflicts(released, handouts, library, paths.notebooks)

    found = missing(handed_out)
    if found:
        raise Refused(refusal(found, released, handed_out, missing))
    if build_student_library is None:
        from qkv_edition.library import build_student_library

    dest.parent.mkdir(parents=True, exist_ok=True)
    stage = pathlib.Path(tempfile.mkdtemp(prefix=f".{dest.name}.partial-", dir=dest.parent))
    try:
        write_edition(stage, root, released, handed_out, build_student_library)
        commit(stage, released, handed_out, root)
        if dest.exists():
            dest.rmdir()  # empty: checked above
        os.rename(stage, dest)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    return size_of(dest)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m qkv_edition.build", description=__doc__.split("\n\n")[0])
    parser.add_argument("--dest", required=True, help="a new or empty folder")
    parser.add_argument("--lessons", default="", help="released lessons, by slug (default: all)")
    parser.add_argument("--handouts", default="", help="lessons whose reference code ships as-is (default: none)")
    options = parser.parse_args(argv)
    try:
        files, size, history = build(options.dest, options.lessons or None, options.handouts or None)
    except Refused as refused:
        print(f"make student-edition: refused.\n{refused}", file=sys.stderr)
        return 2
    released = parse_lessons(options.lessons, "LESSONS") if options.lessons else qkv.lessons.LESSONS
    handouts = parse_lessons(options.handouts, "HANDOUTS") if options.handouts else ()
    print(f"student edition at {pathlib.Path(options.dest).resolve()}\n"
          f"  lessons {','.join(row.slug for row in released)}; handouts "
          f"{','.join(row.slug for row in handouts) or 'none'}\n"
          f"  {files} files, {size / 1e6:.2f} MB, and {history / 1e6:.2f} MB of git (one commit); "
          f"the command took {time.monotonic() - STARTED:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
