import json
import os
import sys

import pytest

os.environ.setdefault("MPLBACKEND", "Agg")
sys.path.insert(0, os.path.dirname(__file__))
# the instructor-side hidden tests, importable here as they are in kernels nbgrader starts from autograde/
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "autograde"))

# the mutation engine's kill rates per lesson, and its survivors (tests/test_mutation.py): under pytest-xdist the
# test runs in a worker, which hands its lines to the controller that prints the summary
_MUTATION_REPORT = {}


def _mutation_lines():
    return getattr(sys.modules.get("test_mutation"), "REPORT", None) or {}


def pytest_sessionfinish(session):
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput["qkv_mutation_report"] = json.dumps(_mutation_lines())


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    _MUTATION_REPORT.update(json.loads(getattr(node, "workeroutput", {}).get("qkv_mutation_report", "{}")))


def pytest_terminal_summary(terminalreporter):
    report = {**_MUTATION_REPORT, **_mutation_lines()}
    if report:
        terminalreporter.section("hidden tests against mechanical mutants")
        for lesson in sorted(report):
            for line in report[lesson]:
                terminalreporter.write_line(line)
