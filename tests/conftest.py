import os
import sys

os.environ.setdefault("MPLBACKEND", "Agg")
sys.path.insert(0, os.path.dirname(__file__))
# the instructor-side hidden tests, importable here as they are in kernels nbgrader starts from autograde/
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "autograde"))


def pytest_terminal_summary(terminalreporter):
    # the mutation engine's kill rates per lesson, and its survivors (tests/test_mutation.py)
    report = getattr(sys.modules.get("test_mutation"), "REPORT", None)
    if report:
        terminalreporter.section("hidden tests against mechanical mutants")
        for lesson in sorted(report):
            for line in report[lesson]:
                terminalreporter.write_line(line)
