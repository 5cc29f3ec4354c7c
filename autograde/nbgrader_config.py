"""nbgrader configuration for the qkv course. Run every nbgrader command from this folder.

The course lives one level up: `solutions/` is nbgrader's source step and `notebooks/` its release
step, so `nbgrader generate_assignment 01-lookup` rewrites `../notebooks/01-lookup/`.
Class data (submitted/, autograded/, feedback/, gradebook.db) stays here and is ignored by git.
"""
import os
import sys

c = get_config()  # noqa: F821  (injected by traitlets)

HERE = os.path.dirname(os.path.abspath(__file__))

# The grader's own code (qkv_autograde) and the hidden tests (qkv_grading) live next to this file, importable by
# the nbgrader process only: they are not installed into the environment students use, and the sandboxed
# student kernels never see this folder.
sys.path.insert(0, HERE)
# Kernels that nbgrader itself starts unsandboxed (`nbgrader validate`, an instructor running a source notebook)
# import the hidden tests through PYTHONPATH; sandboxed kernels start with a clean environment.
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (HERE, os.environ.get("PYTHONPATH")) if p)

c.CourseDirectory.course_id = "qkv"
# nbgrader's exchange (release_assignment -> fetch -> submit -> collect): the folder `make exchange` makes, the same
# default as nbgrader's own; jupyter/exchange/nbgrader_config.py gives the students' side the same setting.
c.Exchange.root = os.environ.get("QKV_EXCHANGE", "/srv/nbgrader/exchange")
c.CourseDirectory.root = HERE
c.CourseDirectory.source_directory = os.path.join("..", "solutions")
c.CourseDirectory.release_directory = os.path.join("..", "notebooks")
c.CourseDirectory.db_url = "sqlite:///" + os.path.join(HERE, "gradebook.db")
# the graders and the lessons need nothing from the student's folder but the notebook itself
c.CourseDirectory.ignore = [".ipynb_checkpoints", "*.pyc", "__pycache__", "feedback", ".staged"]

c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
c.ClearSolutions.text_stub = "YOUR ANSWER HERE"

# The release is stored as JupyterLab saves it, so that a notebook opened and saved untouched keeps its bytes
# (qkv_edition/notebook_form.py: integral points as integers, the kernel's language_info, empty widget state)
from nbgrader.converters import GenerateAssignment  # noqa: E402
from qkv_edition.notebook_form import AsJupyterLabSaves  # noqa: E402
c.GenerateAssignment.preprocessors = [*GenerateAssignment.class_traits()["preprocessors"].default(),
                                      AsJupyterLabSaves]

# Grading runs each submission in a sandbox and computes every verdict outside the student's process
# (qkv_autograde/): the answer cells run in a bubblewrap-isolated kernel with no network and no view of this
# folder; the test cells run here and call the student's functions across the boundary with plain data.
import nbgrader.apps.autogradeapp  # noqa: E402
import nbgrader.apps.generatefeedbackapp  # noqa: E402
from nbgrader.preprocessors import (CheckCellMetadata, ClearOutput, DeduplicateIds, IgnorePattern,  # noqa: E402
                                    LimitOutput, OverwriteKernelspec)
from qkv_autograde.grading.converter import QkvAutograde  # noqa: E402
from qkv_autograde.reports.hand_scores import SaveAutoGradesAndHandScores  # noqa: E402
from qkv_autograde.intake.late import AssignLatePenaltiesHonouringTheLmsMark  # noqa: E402
from qkv_autograde.grading.preprocessors import (RecordAnomalies, RecoverMetadata, RestoreLockedCells,  # noqa: E402
                                                 SandboxedExecute)
from qkv_autograde.reports.feedback import QkvGenerateFeedback  # noqa: E402


def use_the_courses_converters():
    """`nbgrader autograde` and `nbgrader generate_feedback` run the course's converters (converter.py: staging,
    resume, the anomaly report; feedback.py: the pages whose grades changed since are written again).

    A patch, not a setting, because nbgrader 0.9 has none: AutogradeApp.start and GenerateFeedbackApp.start build
    `Autograde(...)` / `GenerateFeedback(...)` from their module's global name (no Type trait as ExportApp's
    plugin_class or ZipCollectApp's extractor_plugin), and the `nbgrader` command's subcommands are a plain class
    attribute. This file is read after the app is made and before its start, so the name is replaced in time."""
    nbgrader.apps.autogradeapp.Autograde = QkvAutograde
    nbgrader.apps.generatefeedbackapp.GenerateFeedback = QkvGenerateFeedback


use_the_courses_converters()
# RecoverMetadata first: nbgrader's own steps trust the cells' metadata, and a student can write anything there
from qkv_autograde.grading.variants import AssignVariant  # noqa: E402
c.Autograde.sanitize_preprocessors = [RecoverMetadata, ClearOutput, DeduplicateIds, OverwriteKernelspec,
                                      RestoreLockedCells, CheckCellMetadata, AssignVariant]

# Per-student self-check numbers (issue 43; README, "A term"): off until a salt and the lessons are named. Then
# `make student-edition` carries them and locks the pools, and `make grade LESSON=... ROSTER=<LMS export>` grades
# every self-check against the numbers of the submission's true identity.
# c.Variants.salt = "qkv-2026-autumn"
# c.Variants.lessons = ["01-lookup", "02-by-hand", "03-scaling", "04-masking", "05-heads", "07-cost"]
# c.Variants.key_label = "your university login (what you type to sign in to Canvas)"
# c.Variants.key_pattern = r"[a-z][a-z0-9]{1,15}"
# SaveAutoGradesAndHandScores: nbgrader's SaveAutoGrades, and a hand score whose answer changed is flagged for review;
# AssignLatePenaltiesHonouringTheLmsMark: nbgrader's AssignLatePenalties, which also penalises Canvas's late mark
# (no time), except for a student with an extension (qkv_autograde/intake/late.py)
c.Autograde.autograde_preprocessors = [SandboxedExecute, IgnorePattern, LimitOutput, SaveAutoGradesAndHandScores,
                                       AssignLatePenaltiesHonouringTheLmsMark, CheckCellMetadata, RecordAnomalies]
# A notebook is validated against nbformat's schema once, after the last of a step's preprocessors, not after each of
# them (nbconvert's default): 8 of the ~30 validations a submission went through in make grade's coordinator
c.Exporter.optimistic_validation = True
# Late work (README, "Late work"): no penalty unless set here, on both routes (make grade from an LMS export, and
# nbgrader's exchange). A late submission is one handed in after the due date and the student's extension, or one the
# LMS marked late without a time (Canvas). Either nbgrader's own "zero":
#   c.LateSubmissionPlugin.penalty_method = "zero"
# or a fraction of the score:
#   c.LatePenalty.fraction = 0.5
# Canvas's import matches a column to an assignment by its "Assignment name (id)" header (the first row of a
# gradebook export from Canvas); given here once per lesson, it heads that lesson's column of canvas-grades.csv:
#   c.CanvasGrades.assignment_headers = {"01-lookup": "Lesson 1: lookup (123456)"}
# `nbgrader zip_collect` (and `make grade SUBMISSIONS=export.zip`) unpacks LMS exports safely and knows their
# file names (qkv_autograde/intake/collector.py documents the patterns)
from qkv_autograde.intake.collector import SubmissionCollector  # noqa: E402
from qkv_autograde.intake.extractor import SafeExtractor  # noqa: E402
c.ZipCollectApp.extractor_plugin = SafeExtractor
c.ZipCollectApp.collector_plugin = SubmissionCollector
# `nbgrader export` (and make grade) writes grades.csv with csv quoting and spreadsheet-safe cells, an empty score
# for a student who handed nothing in (qkv_autograde/reports/exports.py)
from qkv_autograde.reports.exports import GradesCsvExport  # noqa: E402
c.ExportApp.plugin_class = GradesCsvExport

# One wall-clock budget per notebook (the model lessons run a 135M-parameter forward pass on 2 cores), a cap per
# cell so that one runaway cell cannot take the rest, and a cap per call of a student's function from a test.
c.SandboxedExecute.budget_seconds = 600
c.SandboxedExecute.cell_timeout = 300
# `nbgrader validate` (and an instructor's unsandboxed run) uses nbgrader's own Execute: its default is 30 s a cell
c.Execute.timeout = 600
c.SandboxedExecute.call_timeout = 60
c.SandboxedExecute.memory_limit = 2 << 30

# A student who deletes or reorders a graded cell gets it back instead of an error that stops grading.
c.OverwriteCells.add_missing_cells = True

# Harmless warnings that would otherwise clutter feedback: matplotlib font cache, jupyter paths.
c.IgnorePattern.enabled = True
c.IgnorePattern.pattern = (r"Matplotlib is building the font cache|Widget Javascript not detected"
                           r"|DeprecationWarning: Jupyter is migrating")

# Feedback pages: nbgrader's feedback template, rendered without nbconvert's BeautifulSoup pass, which costs more
# than the rendering itself and, for this classic template, only adds alt texts (done directly instead).
from qkv_autograde.reports.feedback_html import FeedbackExporter, TEMPLATES  # noqa: E402
c.GenerateFeedback.exporter_class = FeedbackExporter
# ...with the course's template: nbgrader's feedback page with each test named in its table of contents. The
# course's templates come first for formgrader too, which loads MathJax from the Jupyter server; a feedback page
# carries its maths as MathML and loads nothing, so it renders offline anywhere (feedback_html.py).
c.FeedbackExporter.template_name = "qkv_feedback"
c.HTMLExporter.extra_template_basedirs = [TEMPLATES, os.path.join(
    os.path.dirname(nbgrader.apps.autogradeapp.__file__), "..", "server_extensions", "formgrader", "templates")]
# `nbgrader release_feedback` releases the pages of students who handed in through the exchange, and names the others
from qkv_autograde.reports.feedback import ReleaseFeedbackOfExchangeSubmissions  # noqa: E402
c.ExchangeFactory.release_feedback = ReleaseFeedbackOfExchangeSubmissions
# `nbgrader collect` leaves what it collects readable and writable by the instructor alone (nbgrader's left it 0777)
from qkv_autograde.intake.exchange_collect import CollectPrivately  # noqa: E402
c.ExchangeFactory.collect = CollectPrivately
