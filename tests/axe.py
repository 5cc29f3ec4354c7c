"""axe-core in chromium: the WCAG 2.1 A and AA violations of a page, split into the course's and upstream ones.

axe-core is the npm package pinned in .ci/axe (installed by `make browser`, .ci/install-axe); its script is read
from there and injected into the page, never fetched. Each failing element is one violation; an element belongs to
the course unless it lies inside one of `upstream` (CSS selectors of what JupyterLab, nbconvert or nbgrader write:
their toolbars, prompts, panels), which are reported apart. Rules as the issue measured them: axe's wcag2a, wcag2aa,
wcag21a, wcag21aa tags, plus the page structure a screen reader navigates by (one main landmark, a level-one
heading, headings in order), which axe tags best-practice.
"""
import contextlib
import os
import pathlib

AXE = pathlib.Path(__file__).resolve().parents[1] / ".ci" / "axe" / "node_modules" / "axe-core" / "axe.min.js"
WCAG_21_AA = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]
STRUCTURE = ["landmark-one-main", "page-has-heading-one", "heading-order", "landmark-no-duplicate-main"]

RUN = """async ([tags, rules]) => {
  const options = {runOnly: {type: 'tag', values: tags}, resultTypes: ['violations']};
  const wcag = await axe.run(document, options);
  const structure = await axe.run(document, {runOnly: {type: 'rule', values: rules}, resultTypes: ['violations']});
  const inside = {};
  return [...wcag.violations, ...structure.violations].flatMap(v => v.nodes.map(n => ({
    rule: v.id, impact: v.impact, target: n.target.join(' '), html: n.html.slice(0, 300),
    summary: n.failureSummary.slice(0, 300)})));
}"""
OWNER = """([targets, upstream, areas]) => targets.map(t => {
  let element = null;
  try { element = document.querySelector(t); } catch (e) { return 'course'; }
  if (!element) return 'course';
  if (areas.length) return areas.some(s => element.closest(s)) ? 'course' : 'upstream';
  return upstream.some(s => element.closest(s)) ? 'upstream' : 'course';
})"""


def available():
    return AXE.exists()


def violations(page, upstream=(), course_areas=()):
    """{"course": [...], "upstream": [...]}: each a dict rule, impact, target, html, summary. With `course_areas`
    (JupyterLab: the outputs and rendered markdown), only elements inside them are the course's."""
    page.add_script_tag(content=AXE.read_text())
    found = page.evaluate(RUN, [WCAG_21_AA, STRUCTURE])
    owners = page.evaluate(OWNER, [[v["target"] for v in found], list(upstream), list(course_areas)]) if found else []
    split = {"course": [], "upstream": []}
    for violation, owner in zip(found, owners):
        split[owner].append(violation)
    return split


def counted(found):
    """"color-contrast 3, image-alt 1": how many of each rule."""
    counts = {}
    for v in found:
        counts[v["rule"]] = counts.get(v["rule"], 0) + 1
    return ", ".join(f"{rule} {n}" for rule, n in sorted(counts.items())) or "none"


def listed(found):
    return "\n".join(f"  {v['rule']} ({v['impact']}): {v['target']}: {v['html'][:160]}" for v in found)


CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"]
# in an exported lesson: nbconvert's prompts and the lab theme's code colours
EXPORT_UPSTREAM = [".jp-InputPrompt", ".jp-OutputPrompt", ".jp-InputArea-editor"]


def skip_reason():
    """Why a module of axe tests skips here (None: it runs). Under CI a missing chromium fails instead."""
    if not os.path.exists(CHROMIUM) and not os.environ.get("CI"):
        return f"{CHROMIUM} is not installed (run .ci/install-browser); under CI this test fails instead"
    return None


@contextlib.contextmanager
def chromium():
    """Headless chromium with axe-core at hand, or a failure naming what `make browser` would install."""
    import pytest
    from playwright.sync_api import sync_playwright
    if not os.path.exists(CHROMIUM):
        pytest.fail(f"{CHROMIUM} is missing and CI is set: .ci/install-browser installs it", pytrace=False)
    if not available():
        pytest.fail(f"{AXE} is missing: `make browser` installs it (.ci/install-axe)", pytrace=False)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


def audited(browser, path, upstream=()):
    """axe's violations of the page at `path`, opened offline (only file: URLs load)."""
    context = browser.new_context()
    context.route("**/*", lambda route: route.continue_() if route.request.url.startswith("file:") else route.abort())
    try:
        page = context.new_page()
        page.goto(pathlib.Path(path).as_uri(), wait_until="load")
        return violations(page, upstream)
    finally:
        context.close()


def assert_none_of_the_courses(found, page):
    print(f"{page}: {len(found['course'])} violations the course owns ({counted(found['course'])}), "
          f"{len(found['upstream'])} upstream ({counted(found['upstream'])})")
    assert not found["course"], f"{page}: WCAG 2.1 AA violations the course owns:\n{listed(found['course'])}"


def exported_lesson(nb, path):
    """Write `nb` exported with nbconvert's lab template (as a student exports a lesson) to `path`; its text."""
    from nbconvert import HTMLExporter
    page, _ = HTMLExporter(template_name="lab").from_notebook_node(nb)
    pathlib.Path(path).write_text(page)
    return page
