"""The qkv grader: `make grade` (grade_class.py) and the nbgrader preprocessors it shares with `nbgrader autograde`."""
import sys
import time

STARTED = time.monotonic()  # make grade's start-up, printed in its summary, is measured from here

# nbformat imports jsonschema, which builds an Earley parser for the "iri" formats at import whenever rfc3987_syntax
# is installed (jupyter-events asks for it): 2.9 of the 3.2 s nbformat took to import on the course's 2-core
# machine, for two formats no notebook or nbgrader schema uses. Without it, jsonschema leaves those two unchecked.
sys.modules.setdefault("rfc3987_syntax", None)
