"""What `make grade` does before it grades, and how long that takes: the start-up of grade_class.grade.

`prepare_model` checks, for a lesson that runs SmolLM2, the model and its results cache by their stamps and builds
only what is missing or out of date (so after `make install` the grader starts at once); `Startup` is what the
summary says of it, its seconds measured from `COMMAND_STARTED` (the command's start, the package's import).
"""
import subprocess
import sys
import typing

from qkv_autograde import STARTED
from qkv_autograde.grading import parallel

# the start-up is measured from the command's start (the package's import) at the first grade() of a process, then
# from the call (a process that grades several lessons)
COMMAND_STARTED = [STARTED]


class Startup(typing.NamedTuple):
    """What make grade did before grading: its seconds (from the command's start to its workers started, or to
    knowing there is nothing to grade; the export's collection aside), whether the lesson runs SmolLM2, and what
    prepare_model built."""
    seconds: float
    uses_model: bool
    built: list

    def said(self):
        model = ("" if not self.uses_model else f": built {', '.join(self.built)}" if self.built
                 else ": the model and its results checked, not rebuilt")
        return f"start-up {self.seconds:.1f} s{model}"


def prepare_model(lesson):
    """What grading `lesson` needs of `make install`: nothing for a lesson without SmolLM2; else the model and its
    results cache, checked by their stamps (fill_model_cache.model_ready and .stale: nothing hashed or loaded) and
    built only when missing or out of date, by the commands `make model` runs, in processes of their own (this one
    must stay free of threads to fork its workers). Returns what was built: [] when all was in place."""
    if not parallel.uses_model(lesson):
        return []
    from qkv import fill_model_cache

    built = []
    if not fill_model_cache.model_ready():
        if subprocess.run([sys.executable, "-m", "qkv.model"]).returncode != 0:
            raise SystemExit(f"qkv grader: {lesson} runs SmolLM2, which could not be prepared (`python -m qkv.model` "
                             f"failed, above); nothing was graded: run `make model`, then grade again")
        built.append("the model")
    stale = fill_model_cache.stale((lesson,))
    if stale:
        subprocess.run([sys.executable, "-m", "qkv.fill_model_cache", lesson], check=True)
        built.append(f"the results of {lesson} at " + ", ".join(f"{count} BLAS thread(s)" for _, count in stale))
    return built
