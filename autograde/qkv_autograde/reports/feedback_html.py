"""The HTML exporter of the course's feedback pages (`c.GenerateFeedback.exporter_class` in nbgrader_config.py).

nbconvert's HTMLExporter renders the page and then runs it through BeautifulSoup for two accessibility touches:
an `alt` text on every image that has none, and `tabindex` on the input and output areas of JupyterLab-style
templates. For a feedback page that pass is most of the cost (parse, CSS select and re-serialization: 55% of a
page's CPU time, measured with py-spy on lesson 01), while nbgrader's feedback template is the classic one, which
has no such areas. This exporter renders with the same template and filters and gives images the same alt text
directly in the rendered page, outside <script> and <style>; a page parsed and re-serialized by BeautifulSoup is
then exactly what HTMLExporter writes (tests/test_feedback_html.py). A JupyterLab-style template gets the stock
exporter, tabindex and all.

Both routes use it: `nbgrader generate_feedback` reads the same config as `make grade`, so their pages stay
byte-identical (tests/test_class_grading.py).

Everything in a graded notebook but the template is the student's: the answer cells, any markdown cell they
edited or added, and every output (their kernel produced it, and can choose its mimetypes and metadata). The
instructor opens these pages, so the exporter makes student content inert before it is written
(tests/test_feedback_pages.py loads real pages in chromium): only outputs of the mimetypes a page shows as data
are kept (no JavaScript, widget views or state, PDF, mermaid), output metadata is reduced to numeric image sizes
(nbconvert writes `width=` unquoted), and the HTML of outputs, raw cells and rendered markdown goes through one
allowlist (bleach, which nbconvert's own SanitizeHTML uses): no scripts, event handlers, javascript: URLs,
iframes, objects, forms or styles; figures, tables, text, markdown and maths stay. Markdown is cleaned after it
is rendered, so code and maths in it keep their `<` and `&`.

A page is self-contained, so that it reads the same on a student's machine as on the instructor's (issue 35: the
LMS's bulk feedback upload, lms_feedback.py): its maths are MathML, converted from the TeX when the page is written
(latex2mathml, pure Python, pinned in environment.yml), which chromium, Firefox and Safari draw natively (MathML
Core) with no script, no server and no network. The page loads no MathJax (templates/qkv_feedback/mathjax.html.j2):
a page that did pointed into the instructor's environment (a file: URL of its .venv) and showed raw TeX anywhere
else. The MathML goes through the same allowlist as the rest of the student's HTML (MathML elements and their
presentation attributes only): latex2mathml copies `\\text{...}` and `\\href`'s target into its output as they are.
"""
import collections
import copy
import html
import json
import os
import re

import bleach
from bleach.css_sanitizer import CSSSanitizer
from jinja2 import BytecodeCache, FileSystemLoader, pass_context
from latex2mathml.converter import convert as latex_to_mathml
from nbconvert.exporters import HTMLExporter, TemplateExporter
from nbconvert.filters.markdown_mistune import IPythonRenderer, MarkdownWithMath
from nbconvert.filters.highlight import Highlight2HTML
from nbconvert.filters.widgetsdatatypefilter import WidgetsDataTypeFilter
from traitlets import default

NO_ALT_TEXT = "No description has been provided for this image"  # nbconvert's words, so the pages match
# a <script> or <style> block, left as it is, or an <img> tag (attribute values may hold ">")
RAW_TEXT_OR_IMAGE = re.compile(r"(?P<raw><(script|style)\b.*?</\2\s*>)|<img\b(?:\"[^\"]*\"|'[^']*'|[^'\">])*>",
                               re.S | re.I)
HEADING_TAG = re.compile(r"<(/?)h([1-5])([\s>])", re.I)
QUOTED = re.compile(r"\"[^\"]*\"|'[^']*'")
ALT_ATTRIBUTE = re.compile(r"[\s/\"']alt(?=[\s=/>])", re.I)
LAB_AREAS = "jp-Notebook"  # what nbconvert's tabindex pass looks for
# the course's templates: qkv_feedback (nbgrader's feedback page with the tests named in its table of contents, and
# no MathJax: its maths are MathML) and formgrade/mathjax.html.j2 (formgrader's MathJax from the Jupyter server,
# offline); nbgrader_config.py selects them
TEMPLATES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "templates")
LONGEST_FORMULA = 4000  # characters of TeX converted to MathML; a longer formula is shown as its TeX
# bootstrap's icon font, in the CSS nbgrader's feedback template inlines: its files are ../fonts/..., next to nothing
# a page is sent with, and no feedback page shows an icon
ICON_FONT = re.compile(r"@font-face\s*\{\s*font-family:\s*['\"]Glyphicons Halflings['\"][^}]*\}")

# What student HTML may contain: what markdown renders to (nbconvert's mistune renderer: headings with anchors,
# highlighted code, tables with aligned cells, the lessons' <details>), pandas tables, and inline formatting.
STUDENT_TAGS = frozenset({
    "a", "abbr", "b", "blockquote", "br", "caption", "cite", "code", "col", "colgroup", "dd", "del", "details",
    "div", "dl", "dt", "em", "figcaption", "figure", "h1", "h2", "h3", "h4", "h5", "h6", "hr", "i", "img", "ins",
    "kbd", "li", "mark", "ol", "p", "pre", "q", "s", "samp", "small", "span", "strong", "sub", "summary", "sup",
    "table", "tbody", "td", "tfoot", "th", "thead", "tr", "u", "ul", "var"})
# MathML's presentation elements (what latex2mathml writes, and MathML Core) and their layout attributes: no href,
# no colours, no events; a formula a student writes in HTML gets the same
MATHML_TAGS = frozenset({
    "math", "mrow", "mi", "mn", "mo", "ms", "mtext", "mspace", "msup", "msub", "msubsup", "mfrac", "msqrt",
    "mroot", "mover", "munder", "munderover", "mmultiscripts", "mprescripts", "none", "mtable", "mtr", "mtd",
    "mstyle", "mpadded", "mphantom", "menclose", "merror", "semantics", "annotation"})
MATHML_ATTRIBUTES = frozenset({
    "display", "displaystyle", "scriptlevel", "mathvariant", "mathsize", "stretchy", "fence", "separator", "form",
    "lspace", "rspace", "minsize", "maxsize", "largeop", "movablelimits", "symmetric", "accent", "accentunder",
    "width", "height", "depth", "voffset", "linebreak", "linethickness", "notation", "columnalign", "rowalign",
    "columnspan", "rowspan", "columnlines", "rowlines", "columnspacing", "rowspacing", "frame", "encoding"})
COMMON_ATTRIBUTES = ("class", "id", "title", "style", "align")
PICTURE = re.compile(r"data:image/(png|jpeg|gif|webp|svg\+xml)[;,]", re.I)
# browsers ignore ASCII whitespace and control characters anywhere in a URL's scheme ("java\nscript:")
IGNORED_IN_SCHEME = re.compile(r"[\x00-\x20]+")
# elements whose content is not text to show: dropped whole (bleach would leave their content as text)
NOT_TEXT = re.compile(r"<(script|style|template|textarea|title|noscript|noembed|noframes|xmp|iframe|object)\b"
                      r".*?(?:</\1\s*>|\Z)", re.S | re.I)
# the output mimetypes a page shows as data, never as code (widget views fall back to their text/plain note)
SHOWN_MIMETYPES = frozenset({"text/plain", "text/html", "text/markdown", "text/latex", "image/png", "image/jpeg",
                             "image/svg+xml"})  # SVG is written as a base64 <img>, where scripts never run


def _allowed_attribute(tag, name, value):
    if tag in MATHML_TAGS:
        return name in MATHML_ATTRIBUTES
    if name in COMMON_ATTRIBUTES:
        return True
    if tag == "a" and name == "href":  # bleach then checks the scheme: http(s), mailto, or relative
        return not IGNORED_IN_SCHEME.sub("", value).lower().startswith("data:")
    if tag == "img" and name == "src":
        scheme = IGNORED_IN_SCHEME.sub("", value)
        return bool(PICTURE.match(scheme)) or ":" not in scheme.split("/", 1)[0]  # a picture, or a relative path
    return (tag, name) in {("a", "name"), ("img", "alt"), ("img", "width"), ("img", "height"), ("ol", "start"),
                           ("td", "colspan"), ("td", "rowspan"), ("th", "colspan"), ("th", "rowspan"), ("th", "scope"),
                           ("table", "border"), ("details", "open")}


STUDENT_HTML = bleach.Cleaner(tags=STUDENT_TAGS | MATHML_TAGS, attributes=_allowed_attribute,
                              protocols=["http", "https", "mailto", "data"], strip=True, strip_comments=True,
                              css_sanitizer=CSSSanitizer())


def inert_html(html):
    """`html` from a student with nothing a browser would run: only STUDENT_TAGS and their plain attributes."""
    return STUDENT_HTML.clean(NOT_TEXT.sub("", str(html)))


def tex_as_mathml(tex, display):
    """TeX (what sits between `$`s, without them) as a MathML formula, block or inline; TeX that latex2mathml cannot
    convert, or longer than LONGEST_FORMULA, as escaped code. Not yet cleaned: markdown2html cleans the whole cell."""
    if len(tex) <= LONGEST_FORMULA:
        try:
            formula = latex_to_mathml(tex, display="block" if display else "inline")
            # in HTML a <math> element is MathML without the namespace: the page names no URL
            return formula.replace(' xmlns="http://www.w3.org/1998/Math/MathML"', "", 1)
        except Exception:  # noqa: BLE001 -- any TeX a student writes: a parse error, a recursion too deep
            pass
    return f'<code class="tex">{html.escape(tex)}</code>'


class MathMLRenderer(IPythonRenderer):
    """nbconvert's markdown renderer, with each formula written as MathML rather than as TeX for MathJax."""

    def block_math(self, body):
        return tex_as_mathml(body, display=True)

    def inline_math(self, body):
        return tex_as_mathml(body, display=False)

    def latex_environment(self, name, body):
        return tex_as_mathml(f"\\begin{{{name}}}{body}\\end{{{name}}}", display=True)


def inert_notebook(nb):
    """A copy of graded notebook `nb` whose outputs and raw cells cannot run anything in the page."""
    nb = copy.deepcopy(nb)
    nb.metadata.pop("widgets", None)  # widget state: nbconvert would load a widget manager to render it
    for cell in nb.cells:
        if cell.cell_type == "raw":
            cell.source = inert_html(cell.source)  # nbconvert writes a raw cell's source into the page as it is
        for output in cell.get("outputs", ()):
            if "data" in output:
                output["data"] = _formula_as_markdown({kind: inert_html(value) if kind == "text/html" else value
                                                       for kind, value in output["data"].items()
                                                       if kind in SHOWN_MIMETYPES})
            if "metadata" in output:
                output["metadata"] = _image_sizes(output["metadata"])
        if "execution_count" in cell and not isinstance(cell.execution_count, int):
            cell.execution_count = None  # the prompt is written unescaped
    return nb


def _formula_as_markdown(data):
    """An output shown as a formula (text/latex, `IPython.display.Math`) is shown through markdown instead, where its
    TeX becomes MathML (the template would write the TeX for MathJax)."""
    if "text/latex" in data and "text/markdown" not in data:
        data = dict(data, **{"text/markdown": data["text/latex"]})
        del data["text/latex"]
    return data


def _image_sizes(metadata):
    """An output's metadata reduced to the numeric sizes of its pictures (nbconvert writes them unquoted)."""
    return {kind: {key: value for key, value in sizes.items()
                   if key in ("width", "height") and type(value) in (int, float)}
            for kind, sizes in metadata.items() if kind in ("image/png", "image/jpeg") and isinstance(sizes, dict)}


def one_level_down(html):
    """Headings h1-h5 one level lower (h6 stays): the page's one h1 is its score (issue 44: one h1, first)."""
    return HEADING_TAG.sub(lambda m: f"<{m.group(1)}h{int(m.group(2)) + 1}{m.group(3)}", html)


def describe_images(html):
    """`html` with alt="…" on each <img> that has no alt attribute (not inside <script> or <style>)."""
    return RAW_TEXT_OR_IMAGE.sub(lambda match: match.group(0) if match.group("raw") else _with_alt(match), html)


def without_icon_font(html):
    """The page without bootstrap's @font-face for its icons, which only names files outside the page."""
    return ICON_FONT.sub("", html)


def _with_alt(match):
    tag = match.group(0)
    if ALT_ATTRIBUTE.search(QUOTED.sub('""', tag)):
        return tag
    closing = "/>" if tag.endswith("/>") else ">"
    return f'{tag[:-len(closing)].rstrip()} alt="{NO_ALT_TEXT}"{closing}'


class Remembered:
    """The last `size` results of a pure function of text (issue 45): a class's pages share the lesson's markdown and
    every cell the students did not change, which were rendered, turned into MathML, sanitized and highlighted
    again for every page. Only what the result depends on is the key, so a page is the same byte for byte."""

    def __init__(self, size=4096):
        self.size, self.results = size, collections.OrderedDict()

    def get(self, key, compute):
        if key in self.results:
            self.results.move_to_end(key)
            return self.results[key]
        result = self.results[key] = compute()
        if len(self.results) > self.size:
            self.results.popitem(last=False)
        return result


class CompiledTemplates(BytecodeCache):
    """The templates compiled once per process, not once per nbgrader app (each feedback share makes a new one):
    jinja checks each template's source against the checksum it was compiled from before it reuses it."""

    def __init__(self):
        self.compiled = {}

    def load_bytecode(self, bucket):
        if bucket.key in self.compiled:
            bucket.bytecode_from_string(self.compiled[bucket.key])

    def dump_bytecode(self, bucket):
        self.compiled[bucket.key] = bucket.bytecode_to_string()


def _key(value):
    return json.dumps(value, sort_keys=True, default=repr)


class RememberedHighlight:
    """nbconvert's code highlighting filter, its results remembered (Remembered)."""

    def __init__(self, highlight, remembered):
        self.highlight, self.remembered = highlight, remembered

    def __call__(self, source, language=None, metadata=None):
        return self.remembered.get(("highlight", self.highlight.pygments_lexer, _key(
            self.highlight.extra_formatter_options), source, language, _key(metadata)),
            lambda: self.highlight(source, language, metadata))


class FeedbackExporter(HTMLExporter):
    """HTMLExporter without the BeautifulSoup round trip, for templates that do not need it, and with student
    content made inert."""

    @default("extra_loaders")
    def _basedirs_by_folder(self):
        # a template extends another by its folder name ('feedback/index.html.j2'), as nbconvert's own templates do
        # with theirs: nbconvert searches inside each template folder only
        return [FileSystemLoader(self.extra_template_basedirs)]

    remembered = Remembered()  # one per process: what a class's pages have in common
    compiled_templates = CompiledTemplates()

    def _create_environment(self):
        environment = super()._create_environment()
        environment.bytecode_cache = self.compiled_templates
        return environment

    @pass_context
    def markdown2html(self, context, source):
        """HTMLExporter's markdown filter (its renderer's settings) with formulas as MathML, then made inert."""
        attachments = context.get("cell", {}).get("attachments", {})
        path = context.get("resources", {}).get("metadata", {}).get("path", "")

        def rendered():
            renderer = MathMLRenderer(
                escape=False, attachments=attachments, embed_images=self.embed_images, path=path,
                anchor_link_text=self.anchor_link_text, exclude_anchor_links=self.exclude_anchor_links,
                **self.lexer_options)
            return one_level_down(inert_html(MarkdownWithMath(renderer=renderer).render(source)))
        if self.embed_images:  # the page then holds files read from disk: nothing remembered
            return rendered()
        # not `path`, each student's own folder: the renderer reads it only to embed images (issue 45: with it in
        # the key, no markdown cell was ever remembered from one student's page to the next)
        return self.remembered.get(("markdown", source, _key(attachments), self.anchor_link_text,
                                    self.exclude_anchor_links, _key(self.lexer_options)), rendered)

    def from_notebook_node(self, nb, resources=None, **kw):
        nb = inert_notebook(nb)
        language = nb.metadata.get("language_info", {})
        self.register_filter("highlight_code", self.filters.get("highlight_code") or RememberedHighlight(Highlight2HTML(
            pygments_lexer=language.get("pygments_lexer", language.get("name")), parent=self), self.remembered))
        resources = self._init_resources(resources)
        self.register_filter("filter_data_type", WidgetsDataTypeFilter(
            notebook_metadata=self._nb_metadata, parent=self, resources=resources))
        html, resources = TemplateExporter.from_notebook_node(self, nb, resources, **kw)
        if LAB_AREAS in html:
            return super().from_notebook_node(nb, resources, **kw)
        return describe_images(without_icon_font(html)), resources


class ReserializedFeedbackExporter(FeedbackExporter):
    """The same page as nbconvert's HTMLExporter writes it, BeautifulSoup pass included (same template, filters and
    inert content): what FeedbackExporter's pages are compared with in tests/test_class_grading.py."""

    def from_notebook_node(self, nb, resources=None, **kw):
        html, resources = HTMLExporter.from_notebook_node(self, inert_notebook(nb), resources, **kw)
        return without_icon_font(html), resources
