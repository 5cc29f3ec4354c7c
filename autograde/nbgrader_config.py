"""nbgrader configuration for the qkv course. Run every nbgrader command from this folder.

The course lives one level up: `solutions/` is nbgrader's source step and `notebooks/` its release
step, so `nbgrader generate_assignment 01-lookup` rewrites `../notebooks/01-lookup/`.
Class data (submitted/, autograded/, feedback/, gradebook.db) stays here and is ignored by git.
"""
import os

c = get_config()  # noqa: F821  (injected by traitlets)

HERE = os.path.dirname(os.path.abspath(__file__))

# The hidden tests (qkv_grading, next to this file) are importable only in kernels that nbgrader starts
# from here: they are not installed into the environment students use, so answers stay instructor-side.
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (HERE, os.environ.get("PYTHONPATH")) if p)

c.CourseDirectory.course_id = "qkv"
c.CourseDirectory.root = HERE
c.CourseDirectory.source_directory = os.path.join("..", "solutions")
c.CourseDirectory.release_directory = os.path.join("..", "notebooks")
c.CourseDirectory.db_url = "sqlite:///" + os.path.join(HERE, "gradebook.db")
# the graders and the lessons need nothing from the student's folder but the notebook itself
c.CourseDirectory.ignore = [".ipynb_checkpoints", "*.pyc", "__pycache__", "feedback"]

c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
c.ClearSolutions.text_stub = "YOUR ANSWER HERE"

# the model lessons run a 135M-parameter forward pass; 10 minutes per cell is generous on 2 cores
c.Execute.timeout = 600

# A student who deletes or reorders a graded cell gets it back instead of an error that stops grading.
c.OverwriteCells.add_missing_cells = True

# Harmless warnings that would otherwise clutter feedback: matplotlib font cache, jupyter paths.
c.IgnorePattern.enabled = True
c.IgnorePattern.pattern = r"Matplotlib is building the font cache|Widget Javascript not detected|DeprecationWarning: Jupyter is migrating"
