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
"""
import re

from nbconvert.exporters import HTMLExporter, TemplateExporter
from nbconvert.filters.highlight import Highlight2HTML
from nbconvert.filters.widgetsdatatypefilter import WidgetsDataTypeFilter

NO_ALT_TEXT = "No description has been provided for this image"  # nbconvert's words, so the pages match
# a <script> or <style> block, left as it is, or an <img> tag (attribute values may hold ">")
RAW_TEXT_OR_IMAGE = re.compile(r"(?P<raw><(script|style)\b.*?</\2\s*>)|<img\b(?:\"[^\"]*\"|'[^']*'|[^'\">])*>",
                               re.S | re.I)
QUOTED = re.compile(r"\"[^\"]*\"|'[^']*'")
ALT_ATTRIBUTE = re.compile(r"[\s/\"']alt(?=[\s=/>])", re.I)
LAB_AREAS = "jp-Notebook"  # what nbconvert's tabindex pass looks for


def describe_images(html):
    """`html` with alt="…" on each <img> that has no alt attribute (not inside <script> or <style>)."""
    return RAW_TEXT_OR_IMAGE.sub(lambda match: match.group(0) if match.group("raw") else _with_alt(match), html)


def _with_alt(match):
    tag = match.group(0)
    if ALT_ATTRIBUTE.search(QUOTED.sub('""', tag)):
        return tag
    closing = "/>" if tag.endswith("/>") else ">"
    return f'{tag[:-len(closing)].rstrip()} alt="{NO_ALT_TEXT}"{closing}'


class FeedbackExporter(HTMLExporter):
    """HTMLExporter without the BeautifulSoup round trip, for templates that do not need it."""

    def from_notebook_node(self, nb, resources=None, **kw):
        language = nb.metadata.get("language_info", {})
        self.register_filter("highlight_code", self.filters.get("highlight_code") or Highlight2HTML(
            pygments_lexer=language.get("pygments_lexer", language.get("name")), parent=self))
        resources = self._init_resources(resources)
        self.register_filter("filter_data_type", WidgetsDataTypeFilter(
            notebook_metadata=self._nb_metadata, parent=self, resources=resources))
        html, resources = TemplateExporter.from_notebook_node(self, nb, resources, **kw)
        if LAB_AREAS in html:
            return super().from_notebook_node(nb, resources, **kw)
        return describe_images(html), resources
