"""Item analysis of one lesson: what a course team looks at after each assignment (`items-<lesson>.html`).

Per test cell (an nbgrader grade cell of type code), across the class's submissions in the gradebook:
- pass share: the share of students with full points on it;
- the most common hints: the first line of the failure message (the `Hint` a check raised, or the error's
  name and message) in the autograded notebooks of the students who did not get full points;
- discrimination: the correlation between the item's score and the rest of the student's total (total minus
  the item). Near 0: the item does not separate students who do well from those who do not; negative: students
  who do well elsewhere fail it more often, which usually means the item or its hint is wrong.
Flags: passed by fewer than 10% (nearly everyone fails) or more than 95% (nearly everyone passes), and negative
discrimination; flags need at least two submissions. A histogram of total scores and a chart of the pass shares
are embedded in the page as PNGs.

Scores come from nbgrader's Gradebook (manual grades included), hints from
<course_root>/autograded/<student>/<lesson>/<notebook>.ipynb, so the page is the same whatever ran the grading.
"""
import base64
import collections
import html
import io
import math
import os
import re

import nbformat
import numpy as np
from nbgrader.api import (BaseCell, Grade, Gradebook, MissingEntry, Notebook, SubmittedAssignment,
                          SubmittedNotebook)

from qkv_autograde.reports import similarity, variant_rows

FAILS = 0.10          # passed by fewer than this share: nearly everyone fails
PASSES = 0.95         # passed by more than this share: nearly everyone passes
MIN_FOR_FLAGS = 2     # one submission says nothing about an item
HINTS_SHOWN = 3
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def discrimination(item, total):
    """Correlation of the item's scores with the rest of the total (total - item); None when undefined."""
    item, rest = np.asarray(item, float), np.asarray(total, float) - np.asarray(item, float)
    if len(item) < 2 or np.ptp(item) == 0 or np.ptp(rest) == 0:
        return None
    return float(np.corrcoef(item, rest)[0, 1])


def first_line(output):
    """The failure message's first line: the Hint itself, other errors with their name."""
    text = ANSI.sub("", str(output.get("evalue", ""))).strip()
    line = text.splitlines()[0].strip() if text else ""
    name = output.get("ename", "")
    if name and name != "Hint":
        return f"{name}: {line}" if line else name
    return line or "(a failure with no message)"


def _failure_lines(course_root, lesson, student, notebook, autograded="autograded"):
    """{grade_id: first line of its error output} in one autograded notebook; {} when it cannot be read."""
    path = os.path.join(course_root, autograded, student, lesson, f"{notebook}.ipynb")
    try:
        nb = nbformat.read(path, as_version=4)
    except Exception:  # a missing or unreadable notebook has no hints to count, and must not stop the page
        return {}, []
    found, order = {}, []
    for cell in nb.cells:
        grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if not grade_id:
            continue
        order.append(grade_id)
        errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
        if errors:
            found[grade_id] = first_line(errors[0])
    return found, order


def submitted_totals(gb, assignment):
    """[(student, total score)] of the assignment's submissions, as rows: the class's submissions, notebooks and
    grades as gradebook objects took about 60 MB for a class of 1,000 (issue 45)."""
    return gb.db.query(SubmittedAssignment.student_id, SubmittedAssignment.score).filter(
        SubmittedAssignment.assignment_id == assignment.id).all()


def submitted_grades(gb, assignment):
    """[(student, notebook, grade cell, score)] of every grade of the assignment's submissions, as rows."""
    return (gb.db.query(SubmittedAssignment.student_id, Notebook.name, BaseCell.name, Grade.score)
            .join(SubmittedNotebook, Grade.notebook_id == SubmittedNotebook.id)
            .join(SubmittedAssignment, SubmittedNotebook.assignment_id == SubmittedAssignment.id)
            .join(Notebook, SubmittedNotebook.notebook_id == Notebook.id)
            .join(BaseCell, Grade.cell_id == BaseCell.id)
            .filter(SubmittedAssignment.assignment_id == assignment.id)
            .yield_per(1000))


def analyse(course_root, db_url, lesson):
    """The numbers of the page: {"lesson", "students", "totals", "max_total", "items": [...], "missing"}."""
    result = {"lesson": lesson, "students": [], "totals": [], "max_total": 0.0, "items": [], "missing": False,
              "similarities": []}
    if db_url.startswith("sqlite:///") and not os.path.exists(db_url[len("sqlite:///"):]):
        result["missing"] = True  # opening it would create an empty gradebook
        return result
    with Gradebook(db_url) as gb:
        try:
            assignment = gb.find_assignment(lesson)
        except MissingEntry:
            result["missing"] = True
            return result
        cells = [(notebook.name, cell.name, float(cell.max_score or 0)) for notebook in assignment.notebooks
                 for cell in notebook.grade_cells if cell.cell_type == "code"]
        result["max_total"] = float(assignment.max_score or 0)
        for student, total in sorted(submitted_totals(gb, assignment)):
            result["students"].append(student)
            result["totals"].append(float(total or 0))
        scores = {(student, notebook, name): float(score or 0)
                  for student, notebook, name, score in submitted_grades(gb, assignment)}
    students, totals = result["students"], result["totals"]
    lines, order = {}, {}
    for student in students:
        for notebook in sorted({c[0] for c in cells}):
            lines[(student, notebook)], seen = _failure_lines(course_root, lesson, student, notebook)
            if seen and notebook not in order:
                order[notebook] = seen
    position = {(nb, name): i for nb, names in order.items() for i, name in enumerate(names)}
    cells.sort(key=lambda c: (c[0], position.get((c[0], c[1]), math.inf), c[1]))
    for notebook, name, max_score in cells:
        item = [scores.get((s, notebook, name), 0.0) for s in students]
        passed = [score >= max_score - 1e-9 for score in item]
        failed = [s for s, ok in zip(students, passed) if not ok]
        hints = collections.Counter(lines[(s, notebook)][name] for s in failed if name in lines[(s, notebook)])
        share = sum(passed) / len(students) if students else None
        r = discrimination(item, totals)
        flags = []
        if len(students) >= MIN_FOR_FLAGS:
            if share < FAILS:
                flags.append("nearly everyone fails")
            if share > PASSES:
                flags.append("nearly everyone passes")
            if r is not None and r < 0:
                flags.append("negative discrimination")
        result["items"].append({
            "notebook": notebook, "name": name, "max_score": max_score, "scores": item, "passed": sum(passed),
            "pass_share": share, "mean": float(np.mean(item)) if item else None, "discrimination": r,
            "hints": hints.most_common(HINTS_SHOWN), "failures_without_hint": len(failed) - sum(hints.values()),
            "flags": flags})
    groups = variant_rows.answer_groups(course_root, lesson)  # self-checks with variants: comparable answers
    for item in result["items"]:
        question = item["name"].removeprefix("test_answer_")
        if question in groups:
            item["hints"], item["failures_without_hint"] = groups[question].most_common(), 0
    try:  # the class's similarity distribution (similarity.py); a failure of its own leaves the rest of the page
        result["similarities"] = similarity.class_report(course_root, lesson)[1]
    except Exception:
        pass
    return result


# ------------------------------------------------------------------------------------------------ the page

def _png(figure):
    """The figure as an <img> whose alt text says what it shows, numbers included (issue 44: qkv.figure_text)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from qkv.figure_text import describe

    FigureCanvasAgg(figure)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100, bbox_inches="tight")
    return (f'<img src="data:image/png;base64,{base64.b64encode(buffer.getvalue()).decode()}" '
            f'alt="{html.escape(describe(figure))}">')


def histogram_png(totals, max_total):
    from matplotlib.figure import Figure

    figure = Figure(figsize=(6, 3))
    axes = figure.add_subplot()
    top = max(max_total, max(totals, default=0), 1)
    edges = np.arange(0, math.floor(top) + 2) - 0.5 if top <= 60 else np.linspace(0, top, 31)
    axes.hist(totals, bins=edges, color="#4c72b0", edgecolor="white")
    axes.set_xlabel(f"total score (out of {max_total:g})")
    axes.set_ylabel("students")
    axes.set_title(f"total scores, {len(totals)} submissions")
    axes.yaxis.get_major_locator().set_params(integer=True)
    return _png(figure)


def pass_share_png(items):
    from matplotlib.figure import Figure

    figure = Figure(figsize=(6, 0.6 + 0.3 * max(len(items), 1)))
    axes = figure.add_subplot()
    labels = [item["name"] for item in items]
    shares = [100 * (item["pass_share"] or 0) for item in items]
    # flagged items in vermillion and hatched, the others plain blue: never colour alone (issue 44, qkv.colours)
    from qkv.colours import series_style, text_colour_on

    styles = [series_style(5 if item["flags"] else 0) for item in items]
    axes.barh(range(len(items)), shares, color=[s["color"] for s in styles], hatch=[s["hatch"] for s in styles],
              edgecolor="black", linewidth=0.6)
    axes.set_yticks(range(len(items)), labels)
    axes.invert_yaxis()
    axes.set_xlim(0, 100)
    for row, share in enumerate(shares):  # a 0% bar is invisible without its number
        inside = share > 88
        axes.text(share - 1 if inside else share + 1, row, f"{share:.0f}%", va="center",
                  ha="right" if inside else "left", color=text_colour_on(styles[row]["color"]) if inside else "black",
                  fontsize=8)
    for line in (100 * FAILS, 100 * PASSES):
        axes.axvline(line, color="grey", linestyle=":", linewidth=1)
    axes.set_xlabel("students with full points (%); flagged items hatched")
    axes.set_title("share of students with full points, by test cell")
    return _png(figure)


def similarity_png(similarities):
    from matplotlib.figure import Figure

    figure = Figure(figsize=(6, 3))
    axes = figure.add_subplot()
    # each value once, weighted by its number of pairs: n(n - 1)/2 values, most of them 0, are never listed
    runs = similarity.PairSimilarities.of_any(similarities).runs()
    axes.hist([value for value, _ in runs], bins=np.linspace(0, 1, 21), weights=[pairs for _, pairs in runs],
              color="#4c72b0", edgecolor="white")
    axes.set_yscale("symlog")
    axes.axvline(similarity.PAIR_SHARE, color="grey", linestyle=":", linewidth=1)
    axes.set_xlabel("share of the smaller answer set held by both (uncommon code only)")
    axes.set_ylabel("pairs of students")
    axes.set_title(f"similarity of every pair, {len(similarities)} pairs")
    return _png(figure)


def _similarity_section(similarities):
    if not similarities:
        return ""
    fence = similarity.far_out_fence(similarities)
    return f"""<h2>Similarity between students</h2>
<p>For every pair of students, the share of the smaller one's answer fingerprints that both hold, counting only code
that at most {similarity.common_limit(round((1 + (1 + 8 * len(similarities)) ** 0.5) / 2))} students of the class
wrote (what many write is no evidence) and nothing the release gives. The class's norm: {100 * fence:.0f}% (upper
quartile plus three interquartile ranges); pairs above it and above {100 * similarity.PAIR_SHARE:.0f}% (dotted) are
named in the anomaly report as `{similarity.CLASSMATE}`.</p>
{similarity_png(similarities)}"""


def _shown(value, digits=2):
    return "—" if value is None else f"{value:.{digits}f}"


def render(result):
    lesson, items, n = result["lesson"], result["items"], len(result["students"])
    title = f"qkv item analysis: {html.escape(lesson)}"
    head = f"""<!doctype html><html lang=en><meta charset=utf-8><title>{title}</title>
<style>body{{font-family:sans-serif;max-width:70em}} td,th{{vertical-align:top;padding:4px 8px;text-align:left}}
tr.flag{{background:#fff3cd}} td.num{{text-align:right}} ul{{margin:0;padding-left:1.2em}}</style>
<main><h1>{title}</h1>"""
    if result["missing"]:
        return head + f"<p>The gradebook has no assignment named {html.escape(lesson)} (or there is no gradebook "\
                      f"yet): grade it first.</p></main>"
    if not n:
        return head + "<p>No submissions graded yet: nothing to analyse.</p></main>"
    totals = np.asarray(result["totals"])
    flagged = sum(bool(item["flags"]) for item in items)
    rows = []
    for item in items:
        hints = "".join(f"<li>{count}× {html.escape(line)}</li>" for line, count in item["hints"])
        if item["failures_without_hint"]:
            hints += f"<li>{item['failures_without_hint']}× (no failure message found)</li>"
        rows.append(
            f"<tr{' class=flag' if item['flags'] else ''}><td>{html.escape(item['notebook'])}</td>"
            f"<td>{html.escape(item['name'])}</td><td class=num>{item['max_score']:g}</td>"
            f"<td class=num>{item['passed']}/{n} ({100 * item['pass_share']:.0f}%)</td>"
            f"<td class=num>{_shown(item['mean'])}</td><td class=num>{_shown(item['discrimination'])}</td>"
            f"<td><ul>{hints}</ul></td><td>{html.escape(', '.join(item['flags']))}</td></tr>")
    few = (f"<p><b>Only {n} submission{'s' if n != 1 else ''}:</b> the shares and correlations mean little yet.</p>"
           if n < 10 else "")
    return head + f"""
<p>{n} submissions; total score mean {totals.mean():.2f}, median {np.median(totals):g} out of
{result['max_total']:g}. {len(items)} test cells, {flagged} flagged.</p>{few}
<p><b>pass</b>: students with full points on the cell. <b>discrimination</b>: correlation of the cell's score
with the rest of the total (total minus the cell); near 0 the cell does not separate students who do well from
those who do not, negative usually means the test or its hint is wrong (— when every student scored the same).
<b>hints</b>: the commonest first lines of the failure messages, among students without full points.
Flagged: passed by fewer than {100 * FAILS:.0f}% or more than {100 * PASSES:.0f}%, or negative discrimination.</p>
{histogram_png(result['totals'], result['max_total'])}
{pass_share_png(items)}
{_similarity_section(result.get("similarities"))}
<table><tr><th scope=col>notebook</th><th scope=col>test cell</th><th scope=col>points</th><th scope=col>pass</th>
<th scope=col>mean</th><th scope=col>discrimination</th><th scope=col>commonest hints among failures
(a self-check with variants: every answer, by canonical option or kind)</th>
<th scope=col>flags</th></tr>{''.join(rows)}</table></main>"""


def write(course_root, db_url, lesson):
    """Write <course_root>/items-<lesson>.html and return its path."""
    path = os.path.join(course_root, f"items-{lesson}.html")
    page = render(analyse(course_root, db_url, lesson))
    with open(path, "w", encoding="utf-8") as f:
        f.write(page)
    return path
