"""Tables a lesson shows: a real HTML table in the notebook (a screen reader moves along its rows and columns and
reads each cell with its header), aligned text in a terminal (issue 44).

    table(["d_k", "raw variance"], [[1, "1.02"], [2, "2.01"]], caption="measured variance")

Cells are shown as given (format numbers before: the lesson chooses the digits); each is escaped.
"""
import html


class Table:
    """Header and rows of cells; the notebook shows `_repr_html_`, a terminal `__repr__`."""

    def __init__(self, header, rows, caption=None, row_headers=True):
        self.header = [str(h) for h in header]
        self.rows = [[str(cell) for cell in row] for row in rows]
        if any(len(row) != len(self.header) for row in self.rows):
            raise ValueError(f"every row needs {len(self.header)} cells, one per header: "
                             f"{[len(row) for row in self.rows]}")
        self.caption = caption
        self.row_headers = row_headers  # the first cell of a row names it (<th scope=row>)

    def _repr_html_(self):
        head = "".join(f'<th scope="col">{html.escape(h)}</th>' for h in self.header)
        body = "".join(
            "<tr>" + "".join(f'<th scope="row">{html.escape(c)}</th>' if j == 0 and self.row_headers
                             else f"<td>{html.escape(c)}</td>" for j, c in enumerate(row)) + "</tr>"
            for row in self.rows)
        caption = f"<caption>{html.escape(self.caption)}</caption>" if self.caption else ""
        return (f'<table class="qkv-table">{caption}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>')

    def __repr__(self):
        widths = [max(len(r[j]) for r in [self.header, *self.rows]) for j in range(len(self.header))]
        lines = ["  ".join(c.rjust(w) for c, w in zip(row, widths)) for row in [self.header, *self.rows]]
        return "\n".join(([self.caption] if self.caption else []) + lines)


def table(header, rows, caption=None, row_headers=True):
    """Show a table below the cell (IPython's display; printed as text outside a notebook); returns nothing."""
    show(Table(header, rows, caption, row_headers))


def show(shown):
    """Show a Table below the cell, or print its text where IPython is missing; returns nothing."""
    try:
        from IPython.display import display
    except ImportError:
        print(repr(shown))
        return
    display(shown)
