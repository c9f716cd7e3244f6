"""One self-contained HTML page: the template, plotly's JavaScript inlined once, each figure a
div drawn by it. Nothing is fetched when the page opens, so it works offline and from mail.

plotly.js is 4.8 MB as text: the page carries it gzipped and base85-encoded (1.8 MB), and a
few lines of script unpack it with the browser's own DecompressionStream before drawing each
figure from its JSON. A page without figures (a sweep that stored nothing) carries no library.
"""

import base64
import gzip
import json
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
# Every figure's look: a registered plotly template, put into each figure's JSON as it is
# written. Set on the figure instead, plotly validates the whole template again (20 ms a figure).
FIGURE_TEMPLATE = "plotly_white"
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


# RFC 1924's base85 alphabet with the three characters HTML treats specially (< > &) swapped
# for three it does not use, so the packed library sits in a script element as plain text.
_B85 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz!#$%&()*+-;<=>?@^_`{|}~"
_HTML_SAFE = str.maketrans("<>&", ",.:")
PACKED_ALPHABET = _B85.translate(_HTML_SAFE)
FIGURE_MARK = 'class="plot"'
TIME_FORMAT = "%Y-%m-%d %H:%M:%S UTC"  # every time a page shows, in UTC


@cache
def packed_plotly() -> str:
    """plotly.js gzipped, as base85 text in PACKED_ALPHABET (the page's script unpacks it)."""
    packed = gzip.compress(get_plotlyjs().encode(), compresslevel=9, mtime=0)
    return base64.b85encode(packed).decode("ascii").translate(_HTML_SAFE)


@cache
def _figure_template() -> dict[str, Any]:
    template: dict[str, Any] = pio.templates[FIGURE_TEMPLATE].to_plotly_json()
    return template


def figure_html(fig: go.Figure, div_id: str) -> str:
    """A figure as an empty div and its JSON, which the page draws once plotly.js is unpacked."""
    figure = fig.to_dict()
    figure["layout"]["template"] = _figure_template()
    spec = pio.to_json(figure, validate=False, remove_uids=True, engine="json")
    safe = spec.replace("</", "<\\/")  # JSON in a script element: never closes it
    return (
        f'<figure {FIGURE_MARK}><div id="{div_id}" class="plotly-graph-div"></div>'
        f'<script type="application/json" data-plot="{div_id}">{safe}</script></figure>'
    )


def render_table(
    header: list[str], rows: list[list[Any]], *, caption: str = "", css: str = ""
) -> str:
    """A table from cells that are plain text (escaped) or `Markup` (kept)."""
    return (
        _environment()
        .get_template("table.html.j2")
        .render(header=header, rows=rows, caption=caption, css=css)
    )


def has_figures(page: Page) -> bool:
    return any(FIGURE_MARK in block for s in page.sections for block in s.blocks)


def render_page(page: Page) -> str:
    figures = has_figures(page)
    return (
        _environment()
        .get_template(TEMPLATE)
        .render(
            page=page,
            plotly_packed=packed_plotly() if figures else "",
            alphabet=PACKED_ALPHABET,
            plot_config=json.dumps(PLOT_CONFIG),
            harness_version=harness_version(),
        )
    )


def write(page: Page, out: Path) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    tmp.write_text(render_page(page), encoding="utf-8")
    tmp.replace(out)
    return out
