"""nbgrader preprocessors of the qkv grader, one job each, chained in nbgrader_config.py.

Sanitize step (RecoverMetadata first, before any of nbgrader's own steps reads the metadata):
    RecoverMetadata      every cell's nbgrader metadata is the assignment's again: corrupt or forged metadata and
                         duplicate graded cells repaired, stripped metadata given back by matching cell content
    RestoreLockedCells   nbgrader's OverwriteCells, but "locked cell edited" only when the student really changed it
Autograde step (in place of nbgrader's Execute):
    SandboxedExecute     answer cells in the sandboxed kernel, test cells in this process (verdicts.py)
    RecordAnomalies      (last) the anomalies and the "graded completely" stamp into the notebook's metadata

Anomalies travel in the notebook's metadata (`qkv.anomalies`), so the sanitize step's findings reach the report
through the file nbgrader writes between the two steps, and the report (report.py) reads them from the
autograded notebooks.
"""
import copy
import difflib
import functools
import os
import re

import nbformat
import qkv_grading
from nbgrader import utils
from nbgrader.coursedir import CourseDirectory
from nbgrader.preprocessors import NbGraderPreprocessor, OverwriteCells
from traitlets import Bool, Float, Integer

from qkv_autograde.kernels import forked_kernels, sandbox, student_kernel
from qkv_autograde.grading import variants, verdicts
from qkv_autograde.kernels.kernel_setup import kernel_walls

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
    """Make a submission's nbgrader metadata the assignment's again, before nbgrader reads any of it.

    First in the sanitize chain, because nbgrader's own steps trust that metadata and raise on what a student can
    write (a list for a `grade_id`, `"abc"` for points, a test cell flagged as an answer, whose checksum can then
    never match), which stopped the whole class. Each repair is named in the anomaly report:

    - `corrupt metadata`: a cell whose nbgrader metadata is not what the assignment gave that cell (other flags or
      points, absurd types, an id the assignment does not have) gets the released cell's metadata back, or loses it
      when it names no released cell;
    - `duplicate test cell` / `duplicate answer cell`: a graded cell handed in more than once is kept once (the
      last copy, as nbgrader's DeduplicateIds keeps); extra copies of a test cell are dropped, extra copies of an
      answer cell stay as ordinary cells;
    - `metadata stripped`: cells that lost their metadata (some editors drop it) get it back by content: the
      submission is aligned cell by cell with the released notebook (difflib over cell type and text), so cells
      the student did not change line up exactly, and the answer cells between them line up by place, or by the
      name they define (`def softmax(`) when the student added or removed cells around them.

    The notebook's own `qkv` metadata keeps only the anomalies staging wrote (submissions.py): a completion stamp
    or any other key in a submission is the student's, not the grader's.
    """

    def preprocess(self, nb, resources):
        nbg = resources["nbgrader"]
        course = _course(self.config)
        release = nbformat.read(os.path.join(course.format_path(course.release_directory, ".", nbg["assignment"]),
                                             f"{nbg['notebook']}.ipynb"), as_version=4)
        _keep_only_staged_anomalies(nb)
        reset = repair_metadata(nb, release)
        drop_duplicates(nb, release)
        wanted = {_grade_id(c) for c in release.cells if _grade_id(c)}
        missing = wanted - {_grade_id(c) for c in nb.cells if _grade_id(c)}
        if not missing:
            return nb, resources
        matched = match_stripped_cells(nb, release)
        stripped = [name for name, j in matched.items() if id(nb.cells[j]) not in reset]
        if stripped:
            add_anomaly(nb, "metadata stripped", f"restored nbgrader metadata of {len(stripped)} cells by content")
        release_ids = [_grade_id(c) for c in release.cells]
        lost = sorted(name for name in missing - set(matched)
                      if release.cells[release_ids.index(name)].metadata["nbgrader"].get("solution"))
        if lost:
            add_anomaly(nb, "answer cell missing", ", ".join(lost))
        return nb, resources


# what nbgrader decides with: a cell whose values of these differ from the release's is not the released cell
GRADING_KEYS = ("grade_id", "grade", "solution", "locked", "task", "points", "cell_type")


def _keep_only_staged_anomalies(nb):
    if not isinstance(nb.get("metadata"), dict):
        nb["metadata"] = nbformat.NotebookNode()
    qkv = nb.metadata.get("qkv")
    staged = qkv.get("anomalies") if isinstance(qkv, dict) else None
    nb.metadata["qkv"] = {"anomalies": [a for a in staged if _is_anomaly(a)] if isinstance(staged, list) else []}


def _is_anomaly(entry):
    return isinstance(entry, dict) and isinstance(entry.get("name"), str) and isinstance(entry.get("detail"), str)


def repair_metadata(nb, release):
    """Give every cell that claims an nbgrader role the released metadata of that role, or none; returns the ids
    (`id(cell)`) of the cells whose metadata was removed, which the content matching may give back."""
    released = {_grade_id(c): c.metadata["nbgrader"] for c in release.cells if _grade_id(c)}
    removed, notes = set(), []
    for index, cell in enumerate(nb.cells):
        if not isinstance(cell.get("metadata"), dict):
            cell["metadata"] = nbformat.NotebookNode()
            notes.append(f"cell {index}: its metadata was not a mapping")
        if not isinstance(cell.get("source"), str):
            cell["source"] = ""
            notes.append(f"cell {index}: its source was not text")
        if "nbgrader" not in cell.metadata:
            continue
        meta = cell.metadata["nbgrader"]
        name = meta.get("grade_id") if isinstance(meta, dict) else None
        if isinstance(name, str) and name in released:
            if any(_value(meta, key) != _value(released[name], key) for key in GRADING_KEYS):
                changed = [key for key in GRADING_KEYS if _value(meta, key) != _value(released[name], key)]
                notes.append(f"{name}: {', '.join(changed)} differed from the assignment; restored")
                cell.metadata["nbgrader"] = copy.deepcopy(released[name])
        else:
            del cell.metadata["nbgrader"]
            removed.add(id(cell))
            if meta:  # nbgrader's DeduplicateIds leaves an empty mapping: nothing claimed, nothing to say
                notes.append(f"cell {index}: nbgrader metadata naming no cell of the assignment "
                             f"({_shown(name if isinstance(meta, dict) else meta)}); removed")
    if notes:
        add_anomaly(nb, "corrupt metadata", "; ".join(notes)[:2000])
    return removed


def _value(meta, key):
    value = meta.get(key, False if key in ("grade", "solution", "locked", "task") else None)
    if key == "points" and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return value if isinstance(value, (str, bool, float, type(None))) else repr(value)


def _shown(value):
    return repr(value)[:80]


def drop_duplicates(nb, release):
    """Keep one copy (the last) of each graded cell: more copies of a test cell are removed, more copies of an
    answer cell keep their code but lose their nbgrader role."""
    last = {_grade_id(c): i for i, c in enumerate(nb.cells) if _grade_id(c)}
    tests, answers, kept = set(), set(), []
    for index, cell in enumerate(nb.cells):
        name = _grade_id(cell)
        if name is None or last[name] == index:
            kept.append(cell)
        elif cell.metadata["nbgrader"].get("solution"):
            answers.add(name)
            del cell.metadata["nbgrader"]
            kept.append(cell)
        else:
            tests.add(name)  # a test (or other locked) cell: a second copy would only run a test twice
    nb.cells = kept
    if tests:
        add_anomaly(nb, "duplicate test cell", f"{', '.join(sorted(tests))}: extra copies removed, the last one graded")
    if answers:
        add_anomaly(nb, "duplicate answer cell",
                    f"{', '.join(sorted(answers))}: the last copy graded, the others run as ordinary cells")


def match_stripped_cells(nb, release):
    """Copy the released cells' nbgrader metadata onto the submitted cells that lost it; {grade_id: index}."""
    def key(cell):
        return cell.cell_type, release_source(cell.source).strip()

    present = {_grade_id(c) for c in nb.cells if _grade_id(c)}
    pairs = []
    aligner = difflib.SequenceMatcher(a=[key(c) for c in release.cells], b=[key(c) for c in nb.cells], autojunk=False)
    for tag, i1, i2, j1, j2 in aligner.get_opcodes():
        if tag == "equal" or (tag == "replace" and i2 - i1 == j2 - j1):
            pairs += list(zip(range(i1, i2), range(j1, j2)))
        elif tag == "replace":  # cells added or removed around an answer: go by the name it defines
            for i in range(i1, i2):
                head = _defining_head(release.cells[i].source)
                same = [j for j in range(j1, j2) if head and _defining_head(nb.cells[j].source) == head
                        and nb.cells[j].cell_type == release.cells[i].cell_type]
                if same:
                    pairs.append((i, same[0]))
    matched = {}
    for i, j in pairs:
        name = _grade_id(release.cells[i])
        if (name and name not in present and not _grade_id(nb.cells[j])
                and nb.cells[j].cell_type == release.cells[i].cell_type):
            nb.cells[j].metadata["nbgrader"] = copy.deepcopy(release.cells[i].metadata["nbgrader"])
            matched[name] = j
    return matched


def _grade_id(cell):
    meta = cell.get("metadata", {}).get("nbgrader", {})
    name = meta.get("grade_id") if isinstance(meta, dict) else None
    return name if isinstance(name, str) else None


def _defining_head(source):
    for line in source.splitlines():
        match = re.match(r"\s*(def\s+\w+\s*\(|class\s+\w+|\w+\s*=(?!=))", line)
        if match:
            return re.sub(r"\s+", "", match.group(1))
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

# `%matplotlib inline` keeps the first setting: figures are still made as objects, but no PNG is made for the
# output; the course's figures show their description instead (qkv.figure_display.describe_figures_only)
NO_FIGURE_PICTURES = ("try:\n    __import__('qkv.figure_display').figure_display.describe_figures_only(get_ipython())\n"
                      "except ImportError:\n"
                      "    get_ipython().run_line_magic('config', 'InlineBackend.figure_formats = set()')")


class SandboxedExecute(NbGraderPreprocessor):
    """Run a submission: its own cells in a sandboxed kernel, its test cells here (see verdicts.py)."""

    budget_seconds = Float(600, help="Wall-clock seconds for the whole notebook, all cells and test calls."
                           ).tag(config=True)
    cell_timeout = Float(300, help="Most seconds one of the notebook's cells may run.").tag(config=True)
    call_timeout = Float(60, help="Most seconds one call of a student's function from a test may take."
                         ).tag(config=True)
    memory_limit = Integer(2 << 30, help="Bytes of memory for the student's kernel and all it starts, together (a "
                                         "cgroup; where none can be made, each process's address space)."
                           ).tag(config=True)
    output_limit = Integer(1 << 20, help="Bytes of output kept per cell; the rest is cut with a note.").tag(config=True)

    render_figures = Bool(False, help="Draw figures to PNG in the graded notebook (False: each figure is its text "
                                      "description, about 90 ms of CPU saved a figure; issue 45)."
                          ).tag(config=True)

    def preprocess(self, nb, resources):
        nbg = resources["nbgrader"]
        lesson, notebook = nbg["assignment"], nbg["notebook"]
        course = _course(self.config)
        source_path = os.path.join(course.format_path(course.source_directory, ".", lesson), f"{notebook}.ipynb")
        # the student id is nbgrader's, from the submitted/ folder: nothing in the notebook can choose the draw
        return self.execute(nb, lesson, nbformat.read(source_path, as_version=4), student=nbg["student"]), resources

    def execute(self, nb, lesson, source_notebook, kernel_template=None, *, student):
        """The graded notebook: answer cells run in the sandbox, test cells here. Needs no gradebook, so a
        worker on another machine can do it (parallel.py). With a warm `kernel_template` (forked_kernels.py, same
        walls) the kernel is forked from it instead of started afresh. The hidden tests draw `student`'s inputs
        (qkv_grading.draws_of), so a regrade of the same notebook draws the same ones."""
        namespace = verdicts.grader_namespace(source_notebook)
        variant = nb.metadata.get("qkv", {}).get("variant")  # the true key, from AssignVariant (sanitize step)
        limit_events = []  # (anomaly, detail): limits that could not be made here, processes the memory limit killed
        if kernel_template is not None and kernel_template.alive:
            walls = None
            make_kernel_manager = functools.partial(forked_kernels.ForkedKernelManager, template=kernel_template,
                                                    limit_events=limit_events)
        else:
            walls = sandbox.Sandbox(**kernel_walls(lesson, self.memory_limit))
            make_kernel_manager = functools.partial(sandbox.SandboxedKernelManager, sandbox=walls)
        mode = walls.mode if walls else "bwrap"
        if mode != "bwrap":
            self.log.warning("qkv grader: %s", sandbox.PARTIAL_ISOLATION)
            add_anomaly(nb, "isolation partial", sandbox.PARTIAL_ISOLATION)
        kernel = student_kernel.StudentKernel(
            make_kernel_manager, budget_seconds=self.budget_seconds,
            cell_seconds=self.cell_timeout, call_seconds=self.call_timeout, output_bytes=self.output_limit,
            log=self.log, preamble="\n".join(filter(None, ("" if self.render_figures else NO_FIGURE_PICTURES,
                                                             variants.preamble(variant)))))
        judged = set()  # test cells with a verdict
        try:
            kernel.start()
            for index, cell in enumerate(nb.cells):
                if cell.cell_type != "code":
                    continue
                cell.outputs = []
                if utils.is_grade(cell) and not utils.is_solution(cell):
                    with qkv_grading.draws_of(lesson, student), variants.grading(variant):
                        verdicts.run_test_cell(cell, kernel, namespace)
                    judged.add(index)
                else:
                    kernel.run_cell(cell, index)
                    _explain_withheld(cell)
                    _explain_widgets(cell)
            truncated = sorted(kernel.client.truncated_cells) if kernel.client else []
            if truncated:
                add_anomaly(nb, "output truncated", f"cells {', '.join(map(str, truncated))}")
        except student_kernel.StudentKernel.FailedToStart as error:  # graded 0 and named, never a missing row
            self.log.error("qkv grader: no kernel could be started for this submission: %s", error)
            add_anomaly(nb, "kernel failed to start", str(error)[:2000])
            _fail_unjudged_tests(nb, judged)
        finally:
            kernel.close()
            if walls:
                limit_events += sandbox.limit_events(walls.cgroup)
                walls.cleanup()
        for name, detail in kernel.events + limit_events:
            add_anomaly(nb, name, detail)
        nb.metadata.setdefault("qkv", {})["isolation"] = mode
        self.kernel_cpu_seconds = kernel.kernel_cpu_seconds
        return nb


def _fail_unjudged_tests(nb, judged):
    """Every test cell without a verdict fails (an error output is what nbgrader scores 0): an unrun test cell has no
    error, and would otherwise get its points."""
    for index, cell in enumerate(nb.cells):
        if cell.cell_type == "code" and utils.is_grade(cell) and not utils.is_solution(cell) and index not in judged:
            cell.outputs = [nbformat.v4.new_output(
                "error", ename="KernelFailedToStart", evalue=f"not graded: the grader could not start a kernel for "
                f"this notebook (tried {student_kernel.StudentKernel.START_ATTEMPTS} times); ask your instructor to "
                f"grade it again",
                traceback=["KernelFailedToStart: the grader could not start a kernel for this notebook"])]


def _explain_withheld(cell):
    """A demonstration cell that used a withheld reference gets a note instead of a confusing traceback."""
    if any(o.get("ename") == "WithheldDuringGrading" for o in cell.outputs):
        cell.outputs = [nbformat.v4.new_output(
            "stream", name="stdout",
            text="(Not run during grading: this cell uses the course's own version of a function this lesson "
                 "grades. The grader checks your functions separately.)\n")]


WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_NOTE = "(An interactive widget: it works when you run the notebook in JupyterLab, not on this page.)"


def _explain_widgets(cell):
    """A widget cannot be shown on a feedback page (a graded notebook keeps no widget state), where nbconvert falls
    back to its text form, `VBox(children=(HBox(children=(FloatSlider(...`: the page says what it is instead."""
    for output in cell.outputs:
        if WIDGET_VIEW in output.get("data", {}):
            output["data"]["text/plain"] = WIDGET_NOTE


class RecordAnomalies(NbGraderPreprocessor):
    """Last in the chain: stamp the notebook as completely graded (resume looks for the stamp)."""

    def preprocess(self, nb, resources):
        nb.metadata.setdefault("qkv", {})["graded"] = True
        anomalies(nb)
        return nb, resources
