import json
import re

import plotly.graph_objects as go
import plotly.io as pio

from rigbench.report.html import FIGURE_TEMPLATE, figure_html


def test_a_written_figure_carries_the_report_template_and_its_own_layout() -> None:
    fig = go.Figure(go.Scatter(x=[1, 2], y=[3, 4]))
    fig.update_layout(title={"text": "a </script> title"}, height=300)
    html = figure_html(fig, "plot-1")
    found = re.search(r'data-plot="plot-1">(.*)</script></figure>$', html)
    assert found is not None, html[:200]
    assert "</script>" not in found.group(1)  # the title's closing tag is escaped
    spec = json.loads(found.group(1))
    assert spec["layout"]["template"] == pio.templates[FIGURE_TEMPLATE].to_plotly_json()
    assert spec["layout"]["template"]["layout"]["plot_bgcolor"] == "white"
    assert (spec["layout"]["title"]["text"], spec["layout"]["height"]) == ("a </script> title", 300)
    assert spec["data"][0]["y"] == [3, 4]
    assert "uid" not in spec["data"][0]
    assert fig.layout.template.layout.plot_bgcolor != "white"  # the figure itself is unchanged
