# Students of a class that hands work in through nbgrader's exchange (JupyterHub, or one shared machine):
# the Assignments tab fetches and submits, against the folder the instructor made with `make exchange`.
# The same two settings as autograde/nbgrader_config.py, so both sides agree on where the exchange is.
import os

c = get_config()  # noqa: F821  (injected by traitlets)
c.CourseDirectory.course_id = "qkv"
c.Exchange.root = os.environ.get("QKV_EXCHANGE", "/srv/nbgrader/exchange")
