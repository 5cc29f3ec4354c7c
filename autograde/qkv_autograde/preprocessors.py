"""nbgrader preprocessors of the qkv grader, one job each, chained in nbgrader_config.py.

Sanitize step (before nbgrader's own OverwriteCells):
    RecoverMetadata      a notebook whose nbgrader cell metadata was stripped gets it back by matching cell content
    RestoreLockedCells   nbgrader's OverwriteCells, but "locked cell edited" only when the student really changed it
Autograde step (in place of nbgrader's Execute):
    SandboxedExecute     answer cells in the sandboxed kernel, test cells in this process (verdicts.py)
    RecordAnomalies      (last) the anomalies and the "graded completely" stamp into the notebook's metadata

Anomalies travel in the notebook's metadata (`qkv.anomalies`), so the sanitize step's findings reach the report
through the file nbgrader writes between the two steps, and the report (report.py) reads them from the
autograded notebooks.
"""
import os
import re

import nbformat
from nbgrader import utils
from nbgrader.api import Gradebook
from nbgrader.coursedir import CourseDirectory
from nbgrader.preprocessors import NbGraderPreprocessor, OverwriteCells
from traitlets import Float, Integer

from . import kernel_view, sandbox, student_kernel, verdicts

HIDDEN_TESTS = re.compile(r"^[ \t]*#+ *BEGIN HIDDEN TESTS.*?^[ \t]*#+ *END HIDDEN TESTS[^\n]*\n?", re.S | re.M)


def anomalies(nb):
    return nb.metadata.setdefault("qkv", {}).setdefault("anomalies", [])


def add_anomaly(nb, name, detail=""):
    entry = {"name": name, "detail": detail}
    if entry not in anomalies(nb):
        anomalies(nb).append(entry)


def release_source(source):
    """What the student received for a locked cell: the source without its hidden tests."""
    return HIDDEN_TESTS.sub("", source).rstrip()


def _course(config):
    return CourseDirectory(config=config)


# ---------------------------------------------------------------- sanitize

class RecoverMetadata(NbGraderPreprocessor):
    """Give back nbgrader metadata stripped from a submission (some editors and tools drop it), matched by content.

    Locked cells match on their exact released text; answer cells on their first line up to the name they define
    (`def softmax(`, `lookup_on_miss =`), else by position before the locked cell that follows them.
    """

    def preprocess(self, nb, resources):
        nbg = resources["nbgrader"]
        with Gradebook(nbg["db_url"]) as gb:
            source_cells = [dict(name=c.name, cell_type=c.cell_type, locked=c.locked, source=c.source,
                                 checksum=c.checksum)
                            for c in gb.find_notebook(nbg["notebook"], nbg["assignment"]).source_cells]
            graded = {c.name: c.max_score for c in gb.find_notebook(nbg["notebook"], nbg["assignment"]).grade_cells}
            solutions = {c.name for c in gb.find_notebook(nbg["notebook"], nbg["assignment"]).solution_cells}
        present = {_grade_id(c) for c in nb.cells if _grade_id(c)}
        missing = [c for c in source_cells if c["name"] not in present]
        if not missing:
            return nb, resources
        free = [i for i, c in enumerate(nb.cells) if not _grade_id(c)]
        matched = {}
        for source in missing:  # locked cells first: exact text
            if source["locked"] and source["name"] not in solutions:
                text = release_source(source["source"])
                for i in free:
                    if i not in matched.values() and nb.cells[i].cell_type == source["cell_type"] \
                            and release_source(nb.cells[i].source) == text:
                        matched[source["name"]] = i
                        break
        for source in missing:  # then answers: the name they define, or the place they stand
            if source["name"] not in solutions or source["name"] in matched:
                continue
            head = _defining_head(source["source"])
            candidates = [i for i in free if i not in matched.values() and nb.cells[i].cell_type == source["cell_type"]]
            found = [i for i in candidates if head and _defining_head(nb.cells[i].source) == head]
            if not found:
                after = _locked_after(source["name"], source_cells, matched)
                found = [i for i in candidates if after is not None and i == after - 1]
            if found:
                matched[source["name"]] = found[0]
        for source in missing:
            if source["name"] not in matched:
                continue
            cell = nb.cells[matched[source["name"]]]
            cell.metadata["nbgrader"] = {
                "grade_id": source["name"], "grade": source["name"] in graded, "solution": source["name"] in solutions,
                "locked": bool(source["locked"]), "schema_version": 3,
                **({"points": graded[source["name"]]} if source["name"] in graded else {})}
        if matched:
            add_anomaly(nb, "metadata stripped", f"restored nbgrader metadata of {len(matched)} cells by content")
        lost = [s["name"] for s in missing if s["name"] not in matched and s["name"] in solutions]
        if lost:
            add_anomaly(nb, "answer cell missing", ", ".join(lost))
        return nb, resources


def _grade_id(cell):
    return cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")


def _defining_head(source):
    for line in source.splitlines():
        match = re.match(r"\s*(def\s+\w+\s*\(|class\s+\w+|\w+\s*=(?!=))", line)
        if match:
            return re.sub(r"\s+", "", match.group(1))
    return None


def _locked_after(name, source_cells, matched):
    names = [c["name"] for c in source_cells]
    for later in names[names.index(name) + 1:]:
        if later in matched:
            return matched[later]
    return None


class RestoreLockedCells(OverwriteCells):
    """nbgrader's OverwriteCells, reporting an edited locked cell only when its text differs from the release.

    The stock checksum covers the hidden tests, which the release never contained, so every honest notebook
    triggered a warning per test cell and a real edit was lost among them.
    """

    def preprocess(self, nb, resources):
        self._nb = nb
        return super().preprocess(nb, resources)

    def report_change(self, name, attr, old, new):
        if attr == "checksum":
            return  # judged in preprocess_cell against the released text instead
        add_anomaly(self._nb, "locked cell edited", f"{name}: {attr} changed from {old!r} to {new!r}")

    def preprocess_cell(self, cell, resources, cell_index):
        grade_id = _grade_id(cell)
        before = cell.source
        cell, resources = super().preprocess_cell(cell, resources, cell_index)
        if grade_id and cell.source != before and release_source(cell.source) != release_source(before):
            add_anomaly(self._nb, "locked cell edited", f"{grade_id}: restored from the assignment")
            self.log.warning("%s: locked cell %s was edited; restored from the assignment",
                             resources["nbgrader"]["student"], grade_id)
        return cell, resources


# ---------------------------------------------------------------- autograde

_views = {}


def library_view(lesson):
    """The kernel's qkv for this lesson, built once per grading process."""
    if lesson not in _views:
        _views[lesson] = kernel_view.build(lesson)
    return _views[lesson]


class SandboxedExecute(NbGraderPreprocessor):
    """Run a submission: its own cells in a sandboxed kernel, its test cells here (see verdicts.py)."""

    budget_seconds = Float(600, help="Wall-clock seconds for the whole notebook, all cells and test calls.").tag(config=True)
    cell_timeout = Float(300, help="Most seconds one of the notebook's cells may run.").tag(config=True)
    call_timeout = Float(60, help="Most seconds one call of a student's function from a test may take.").tag(config=True)
    memory_limit = Integer(2 << 30, help="Address-space limit of the student's kernel, in bytes.").tag(config=True)
    output_limit = Integer(1 << 20, help="Bytes of output kept per cell; the rest is cut with a note.").tag(config=True)

    def preprocess(self, nb, resources):
        nbg = resources["nbgrader"]
        lesson, notebook = nbg["assignment"], nbg["notebook"]
        course = _course(self.config)
        source_path = os.path.join(course.format_path(course.source_directory, ".", lesson), f"{notebook}.ipynb")
        namespace = verdicts.grader_namespace(nbformat.read(source_path, as_version=4))
        walls = sandbox.Sandbox((kernel_view.LIBRARY, library_view(lesson)),
                                limits=sandbox.Limits(memory_bytes=self.memory_limit),
                                read_only=[_model_cache()])
        if walls.mode != "bwrap":
            self.log.warning("qkv grader: %s", sandbox.PARTIAL_ISOLATION)
            add_anomaly(nb, "isolation partial", sandbox.PARTIAL_ISOLATION)
        kernel = student_kernel.StudentKernel(
            lambda: sandbox.SandboxedKernelManager(sandbox=walls), budget_seconds=self.budget_seconds,
            cell_seconds=self.cell_timeout, call_seconds=self.call_timeout, output_bytes=self.output_limit,
            log=self.log)
        try:
            kernel.start()
            for index, cell in enumerate(nb.cells):
                if cell.cell_type != "code":
                    continue
                cell.outputs = []
                if utils.is_grade(cell) and not utils.is_solution(cell):
                    verdicts.run_test_cell(cell, kernel, namespace)
                else:
                    kernel.run_cell(cell, index)
                    _explain_withheld(cell)
            truncated = sorted(kernel.client.truncated_cells) if kernel.client else []
            if truncated:
                add_anomaly(nb, "output truncated", f"cells {', '.join(map(str, truncated))}")
        finally:
            kernel.close()
            walls.cleanup()
        for name, detail in kernel.events:
            add_anomaly(nb, name, detail)
        nb.metadata.setdefault("qkv", {})["isolation"] = walls.mode
        return nb, resources


def _explain_withheld(cell):
    """A demonstration cell that used a withheld reference gets a note instead of a confusing traceback."""
    if any(o.get("ename") == "WithheldDuringGrading" for o in cell.outputs):
        cell.outputs = [nbformat.v4.new_output(
            "stream", name="stdout",
            text="(Not run during grading: this cell uses the course's own version of a function this lesson "
                 "grades. The grader checks your functions separately.)\n")]


def _model_cache():
    from qkv import fetch

    return str(fetch.cache_dir())


class RecordAnomalies(NbGraderPreprocessor):
    """Last in the chain: stamp the notebook as completely graded (resume looks for the stamp)."""

    def preprocess(self, nb, resources):
        nb.metadata.setdefault("qkv", {})["graded"] = True
        anomalies(nb)
        return nb, resources
