"""The machinery behind every graded check: call the student's function safely, validate what came
back, compare it with the reference and, when it differs, say what is probably wrong.

Every failure is a `Hint`, an AssertionError whose message is written for a student: one sentence
naming the call, what was expected and what came back. Visible checks (qkv.checks.*) and the
instructor's hidden tests are both thin layers over `check_against`. One module a job:

- hints: `Hint`, and how calls and values are named in one;
- guard: the tamper guard (`assert_untampered`, `seal`) and the reference tripwire;
- calling: `call`, the student's function on copies of its inputs, its errors pointed at their line
  (keepdims: the one failing line read for a forgotten keepdims);
- memory: `call_with_peak_memory`, by `qkv.peak_memory.traced_peak`, the one way qkv measures peak memory;
- validation: `expect_array`, `expect_number`;
- compare: `check_against` and `check_boolean`, read from a `Check` declaration, and `close`;
- diagnosis: naming a known mistake only when it is certain, on `Probes`;
- questions: self-check answers (`answered_choice`, `answered_number`, `is_right`, `expect_answer`);
- display: a Hint shown in a notebook as one sentence;
- coverage: the kinds of input one call shows (`kinds_of_call`), which the visible checks must share with the hidden
  tests (qkv.checks.coverage).
"""
import sys

# the package's public names, read elsewhere as qkv.checking.<name> (checks, hidden tests, notebooks): re-exports
from qkv.checking.hints import Hint, call_text, describe  # noqa: F401
from qkv.checking.guard import REFERENCE_MODULES, assert_untampered, protect, seal  # noqa: F401
from qkv.checking.calling import call, likely_cause, where  # noqa: F401
from qkv.checking.memory import call_with_peak_memory, measured_by_grader, traced_peak  # noqa: F401
from qkv.checking.validation import expect_array, expect_number  # noqa: F401
from qkv.checking.diagnosis import EVIDENCE_NEEDED, Probes, certain_diagnosis  # noqa: F401
from qkv.checking.compare import (SINGLE_PRECISION_SLACK, Check, before_check, check_against, check_boolean,  # noqa: F401
                                  close, mismatch_text)
from qkv.checking.questions import (SELF_STUDY_VARIABLE, answer_key, answer_key_folder, answer_tolerance,  # noqa: F401
                                    answered_choice, answered_number, expect_answer, is_right, self_study)
from qkv.checking.display import install_short_hints
from qkv.checking import coverage  # noqa: F401  (imported here so that it is sealed with the rest, below)

# the private names tests used when this package was one module (tests/test_diagnosis.py, test_self_study.py)
_Probes, _certain_diagnosis, _answer_key, _answer_key_folder = Probes, certain_diagnosis, answer_key, answer_key_folder

install_short_hints()
# every module of this package, sealed and its functions recorded as the originals the tamper guard compares with
for _name in [name for name in sys.modules if name == __name__ or name.startswith(__name__ + ".")]:
    protect(_name)
