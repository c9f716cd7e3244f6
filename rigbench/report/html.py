"""One self-contained HTML page: the template, plotly's JavaScript inlined once, each figure a
div drawn by it. Nothing is fetched when the page opens, so it works offline and from mail."""

from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import jinja2
import plotly.graph_objects as go
import plotly.io as pio
from plotly.offline import get_plotlyjs

from harness.version import harness_version

TEMPLATE = "template.html.j2"
PLOT_CONFIG = {"displaylogo": False, "responsive": True, "toImageButtonOptions": {"scale": 2}}


@dataclass
class Section:
    """A heading, an optional paragraph, HTML blocks (tables, figures) in order."""

    title: str
    anchor: str
    intro: str = ""
    blocks: list[str] = field(default_factory=list)


@dataclass
class Page:
    title: str
    subtitle: str
    status: str  # "ok", "warn" or "bad": the colour of the status badge
    status_text: str
    notes: list[str]  # what is missing or to be careful with, shown at the top
    sections: list[Section]


@cache
def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(Path(__file__).parent),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def figure_html(fig: go.Figure, div_id: str) -> str:
    """A figure as a div and the script that draws it (plotly.js comes once, in the head)."""
    html: str = pio.to_html(
        fig, full_html=False, include_plotlyjs=False, div_id=div_id, config=PLOT_CONFIG
    )
    return f'<figure class="plot">{html}</figure>'


def render_table(
    header: list[str], rows: list[list[Any]], *, caption: str = "", css: str = ""
) -> str:
    """A table from cells that are plain text (escaped) or `Markup` (kept)."""
    return (
        _environment()
        .get_template("table.html.j2")
        .render(header=header, rows=rows, caption=caption, css=css)
    )


def render_page(page: Page) -> str:
    return (
        _environment()
        .get_template(TEMPLATE)
        .render(
            page=page,
            plotly_js=jinja2.utils.markupsafe.Markup(get_plotlyjs()),
            harness_version=harness_version(),
        )
    )


def write(page: Page, out: Path) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    tmp.write_text(render_page(page), encoding="utf-8")
    tmp.replace(out)
    return out
