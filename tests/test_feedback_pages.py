"""Feedback pages as an instructor opens them: real pages of a graded lesson-01 class, in headless chromium.

A hostile student's cells output <script>, `Javascript(...)`, an <img onerror>, a javascript: link, an iframe and a
picture whose metadata breaks out of nbconvert's unquoted `width=`; their written answer and a raw cell hold raw
HTML. The class is graded by `make grade` (python -m qkv_autograde), and its feedback written again by the stock
`nbgrader generate_feedback`; on every page of both no student script runs, while the figure, the table and the
maths are there. The network is blocked in the browser (only file: URLs load): the maths are MathML written into
the pages (issue 35), drawn with no script. A page written by nbconvert's own HTMLExporter from the same gradebook
is the control: there the payloads run and the maths stays raw TeX, so the checks can fail.

Formgrader, served by a real Jupyter server, renders the same maths with the network blocked (only loopback).
A hand grade given after the pages were written rewrites exactly that student's page.
One student hands in through nbgrader's exchange (release_assignment, fetch, submit, collect with
--Exchange.root) and gets the feedback back with release_feedback and fetch_feedback; the LMS student is named.
"""
import os
import pathlib
import subprocess
import sys

import nbformat
import pytest

from lessons import ROOT, copy_course, hand_in, jupyter_lab, solved_release
from test_browser import CHROMIUM, CHROMIUM_ARGS, MINUTE

sys.path.insert(0, str(ROOT / "autograde"))

LESSON = "01-lookup"
BIN = pathlib.Path(sys.executable).parent
pytestmark = pytest.mark.grading_class
TITLE = LESSON  # nbgrader's feedback template titles a page with the notebook's name
BROKEN_PNG = "AAAA"  # a picture that fails to load, so that an onerror smuggled next to it fires

HOSTILE_OUTPUTS = f'''\
from IPython.display import HTML, Javascript, Markdown, display
import matplotlib.pyplot as plt
plt.plot([0, 1], [1, 0])
plt.show()
display(HTML('<table class="dataframe"><thead><tr><th>column</th></tr></thead>'
             '<tbody><tr><td>table cell 42</td></tr></tbody></table>'))
display(HTML("<script>window.__pwned = 'script'; document.title = 'pwned'; alert('script')</script>"))
display(Javascript("window.__pwned = 'Javascript'; document.title = 'pwned'"))
display(HTML('<img src="x" onerror="window.__pwned = \\'onerror\\'; document.title = \\'pwned\\'">'))
display(HTML('<a id="bad-link" href="javascript:window.__pwned=\\'link\\'">click me</a>'))
display(HTML('<iframe srcdoc="<script>parent.__pwned = \\'iframe\\'</script>"></iframe>'))
display(Markdown('<img src="y" onerror="window.__pwned = \\'markdown output\\'">'))
display({{"image/png": "{BROKEN_PNG}"}}, raw=True,
        metadata={{"image/png": {{"width": "1 onerror=window.__pwned='width'"}}}})
'''
HOSTILE_MARKDOWN = ("\n\nScaled by $\\sqrt{d_k}$. <img src=\"z\" onerror=\"window.__pwned = 'markdown'; "
                    "document.title = 'pwned'\"> <script>window.__pwned = 'markdown script'</script>")
HOSTILE_RAW = "<script>window.__pwned = 'raw'</script><img src=\"q\" onerror=\"window.__pwned = 'raw img'\">"


def env():
    return dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", MPLBACKEND="Agg")


def run(args, cwd):
    done = subprocess.run(args, cwd=cwd, env=env(), capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, f"{args}: {done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return done


def nbgrader(*args, cwd):
    return run([str(BIN / "nbgrader"), *args], cwd)


def hostile_notebook():
    nb = solved_release(LESSON)
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") == "written_trophy":
            cell.source += HOSTILE_MARKDOWN
    nb.cells += [nbformat.v4.new_code_cell(HOSTILE_OUTPUTS), nbformat.v4.new_raw_cell(HOSTILE_RAW)]
    return nb


def hand_in_through_the_exchange(instructor, exchange, home):
    """release_assignment, then as the student fetch, solve and submit, then collect: nbgrader's exchange route."""
    nbgrader("release_assignment", LESSON, f"--Exchange.root={exchange}", cwd=instructor)
    home.mkdir()
    nbgrader("fetch_assignment", LESSON, "--course=qkv", f"--Exchange.root={exchange}", cwd=home)
    nbformat.write(solved_release(LESSON), home / LESSON / f"{LESSON}.ipynb")
    nbgrader("submit", LESSON, "--course=qkv", f"--Exchange.root={exchange}", cwd=home)
    nbgrader("collect", LESSON, f"--Exchange.root={exchange}", cwd=instructor)


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """A lesson-01 class (a hostile student, and one who handed in through the exchange) graded by make grade; its
    feedback also written by the stock command and, as the control, by nbconvert's HTMLExporter."""
    parent = tmp_path_factory.mktemp("feedback-pages")
    instructor = copy_course(parent)
    nbgrader("generate_assignment", LESSON, "--force", cwd=instructor)
    hand_in(instructor, LESSON, "mallory", hostile_notebook())
    exchange, student_home = parent / "exchange", parent / "student"
    hand_in_through_the_exchange(instructor, exchange, student_home)
    with open(instructor / "nbgrader_config.py", "a") as f:
        f.write("\nc.SandboxedExecute.cell_timeout = 20\nc.SandboxedExecute.call_timeout = 10\n")
    done = run([sys.executable, "-m", "qkv_autograde", LESSON, "--jobs", "2"], instructor)
    assert "graded 2 submission(s)" in done.stdout, done.stdout
    nbgrader("generate_feedback", LESSON, "--CourseDirectory.feedback_directory=stock-feedback", cwd=instructor)
    nbgrader("generate_feedback", LESSON, "--CourseDirectory.feedback_directory=control-feedback",
             "--GenerateFeedback.exporter_class=nbconvert.exporters.HTMLExporter",
             "--HTMLExporter.template_name=feedback", cwd=instructor)
    return instructor, exchange, student_home


def pages(instructor, folder):
    found = sorted((instructor / folder).glob(f"*/{LESSON}/{LESSON}.html"))
    assert len(found) == 2, found
    return found


@pytest.fixture(scope="module")
def browser():
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"{CHROMIUM} is not installed")
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


def opened(browser, url, allowed=("file:",)):
    """The page at `url` as chromium shows it with the network blocked (only URLs starting with one of `allowed`
    load): (page, requests refused, dialogs)."""
    context = browser.new_context()
    context.set_default_timeout(MINUTE)
    refused, dialogs = [], []

    def only_files(route):
        if route.request.url.startswith(allowed):
            route.continue_()
        else:
            refused.append(route.request.url)
            route.abort()

    context.route("**/*", only_files)
    page = context.new_page()
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    page.goto(url, wait_until="load")
    page.wait_for_timeout(1500)  # onerror handlers of broken pictures, MathJax's typesetting queue
    return page, refused, dialogs


def typeset(page):
    """True once the page's maths are drawn: MathML written into the page and laid out (the course's feedback pages,
    which load no script), or MathJax's typesetting done (formgrader: its queue is empty and it drew something)."""
    try:
        page.wait_for_function("() => [...document.querySelectorAll('math')].some(m => m.getBoundingClientRect()"
                               ".width > 0) || (window.MathJax && MathJax.Hub && MathJax.Hub.queue.pending === 0 "
                               "&& document.querySelectorAll('.MathJax, .MathJax_Display, mjx-container').length > 0)",
                               timeout=30_000)
        return True
    except Exception:  # playwright's TimeoutError: nothing rendered
        return False


@pytest.mark.parametrize("route", ["feedback", "stock-feedback"])
def test_no_student_script_runs_and_figures_tables_and_maths_stay(graded, browser, route):
    instructor = graded[0]
    for path in pages(instructor, route):
        page, refused, dialogs = opened(browser, path.as_uri())
        try:
            if page.locator("#bad-link").count():
                page.click("#bad-link")
            assert page.evaluate("() => window.__pwned") is None, path
            assert page.title() == TITLE and dialogs == [], path
            assert typeset(page), f"{path}: maths not rendered offline (refused: {refused})"
            text = page.inner_text("body")
            assert "$\\sqrt" not in text, path
            if path.parts[-3] == "mallory":
                assert page.locator("table.dataframe td", has_text="table cell 42").count() == 1
                # the figure as its description (issues 44, 45: not drawn by the grader), and the raw PNG
                assert page.locator(".output_html p.qkv-figure-text", has_text="Figure: ").count() >= 1
                assert page.locator(".output_png img[src^='data:image/png']").count() >= 1
                widths = page.locator(".output_png img").evaluate_all("imgs => imgs.map(i => i.outerHTML)")
                assert not any("onerror" in w for w in widths), widths
            assert not [url for url in refused if "mathjax" in url.lower()], "MathJax asked the network"
        finally:
            page.context.close()


def test_the_control_page_runs_the_payloads_and_shows_raw_tex(graded, browser):
    """nbconvert's own HTMLExporter on the same graded notebook: the attacks are real, and offline maths fail."""
    instructor = graded[0]
    path = next(p for p in pages(instructor, "control-feedback") if p.parts[-3] == "mallory")
    page, refused, dialogs = opened(browser, path.as_uri())
    try:
        assert page.evaluate("() => window.__pwned") is not None and page.title() == "pwned"
        assert dialogs and not typeset(page) and any("mathjax" in url.lower() for url in refused)
        assert "$\\sqrt{d_k}$" in page.inner_text("body")
    finally:
        page.context.close()


def test_formgrader_renders_maths_from_the_local_server(graded, browser, tmp_path):
    from nbgrader.api import Gradebook

    instructor = graded[0]
    with Gradebook(f"sqlite:///{instructor}/gradebook.db") as gb:
        submission = gb.find_submission_notebook(LESSON, LESSON, "mallory").id
    token = "qkv-formgrader-test-token"
    with jupyter_lab(instructor, tmp_path, env(), token) as base:
        page, refused, _ = opened(browser, f"{base}/formgrader/submissions/{submission}/?token={token}",
                                  allowed=(base,))
        try:
            assert page.locator(".nbgrader_cell").count() > 5, page.content()[:2000]
            assert typeset(page), f"maths not rendered by formgrader offline (refused: {refused})"
            assert "$\\sqrt" not in page.inner_text("body")
            assert not [url for url in refused if "mathjax" in url.lower()], refused
        finally:
            page.context.close()


def test_the_table_of_contents_names_each_test_by_its_exercise(graded):
    page = (graded[0] / "feedback" / "mallory" / LESSON / f"{LESSON}.html").read_text()
    toc = page.split('<nav id="toc" aria-label="tests and answers">', 1)[1].split("</nav>", 1)[0]
    assert "Test cell" not in toc
    for exercise in ("hard_lookup", "softmax", "soft_lookup", "soft_lookup_by_temperature", "answer_why_separate"):
        assert f'<a href="#test_{exercise}">Test of <code>{exercise}</code></a>' in toc
    assert '<a href="#written_trophy">Written response <code>written_trophy</code></a>' in toc


def test_feedback_goes_back_through_the_exchange(graded):
    instructor, exchange, student_home = graded
    from nbgrader.utils import notebook_hash

    student = next(p.parts[-3] for p in pages(instructor, "feedback") if p.parts[-3] != "mallory")
    secret = (instructor / "submitted" / student / LESSON / "submission_secret.txt").read_text()
    assert (instructor / "feedback" / student / LESSON / "submission_secret.txt").read_text() == secret
    done = nbgrader("release_feedback", LESSON, f"--Exchange.root={exchange}", cwd=instructor)
    assert "not released through the exchange" in done.stderr and "mallory" in done.stderr, done.stderr[-2000:]
    released = exchange / "qkv" / "feedback" / f"{notebook_hash(secret=secret, notebook_id=LESSON)}.html"
    assert released.read_bytes() == (instructor / "feedback" / student / LESSON / f"{LESSON}.html").read_bytes()
    nbgrader("fetch_feedback", LESSON, "--course=qkv", f"--Exchange.root={exchange}", cwd=student_home)
    fetched = list((student_home / LESSON / "feedback").glob(f"*/{LESSON}.html"))
    assert len(fetched) == 1 and fetched[0].read_bytes() == released.read_bytes()


def test_a_hand_grade_rewrites_exactly_that_page(graded):
    """Last: it changes the class. A hand score and comment given after the pages were written (what formgrader
    does) reach the student's page with a plain `nbgrader generate_feedback`; the other page is left as it was."""
    from nbgrader.api import Gradebook

    instructor = graded[0]
    page = instructor / "feedback" / "mallory" / LESSON / f"{LESSON}.html"
    other = next(p for p in pages(instructor, "feedback") if p != page)
    other_before = (other.read_bytes(), other.stat().st_mtime_ns)
    with Gradebook(f"sqlite:///{instructor}/gradebook.db") as gb:
        grade = gb.find_grade("written_trophy", LESSON, LESSON, "mallory")
        grade.manual_score = 1.5
        gb.find_comment("written_trophy", LESSON, LESSON, "mallory").manual_comment = "Right, and well argued."
        gb.db.commit()
    assert "Right, and well argued." not in page.read_text()
    nbgrader("generate_feedback", LESSON, cwd=instructor)
    text = page.read_text()
    assert "Right, and well argued." in text and "Score: 1.5 / 2.0" in text
    assert (other.read_bytes(), other.stat().st_mtime_ns) == other_before
    nbgrader("generate_feedback", LESSON, cwd=instructor)  # nothing changed since: nothing written
    assert page.read_text() == text
    # make grade again, with nothing new to grade, is the other way an instructor refreshes the pages
    with Gradebook(f"sqlite:///{instructor}/gradebook.db") as gb:
        gb.find_grade("written_trophy", LESSON, LESSON, "mallory").manual_score = 2.0
        gb.db.commit()
    done = run([sys.executable, "-m", "qkv_autograde", LESSON, "--jobs", "1"], instructor)
    assert "graded 0 submission(s)" in done.stdout, done.stdout
    assert "Score: 2.0 / 2.0" in page.read_text()
    assert (other.read_bytes(), other.stat().st_mtime_ns) == other_before
