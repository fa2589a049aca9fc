"""The book's rendering of an explorer: pre-computed states behind plain HTML controls."""

from __future__ import annotations

import base64
import hashlib
import html
import io
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import to_rgba
from matplotlib.figure import Figure
from matplotlib.layout_engine import ConstrainedLayoutEngine, TightLayoutEngine
from PIL import Image

#: Resolution of the frames, dots per inch: the book's column is about 800 pixels wide.
FRAME_DPI = 72
#: Widest frame, in pixels: about the book's column, so that wider figures get a lower dpi
#: instead of being scaled down by the browser after the page carried their pixels.
FRAME_MAX_WIDTH = 800
#: Colours of a frame's palette. Plots use few colours; 64 keep colour maps smooth
#: and make frames three to four times smaller than full-colour PNGs.
FRAME_COLORS = 64
#: Margin around a frame's content, inches: matplotlib's ``pad_inches`` of a tight box.
PAD_INCHES = 0.1


@dataclass(frozen=True)
class BookAxis:
    """One control of an explorer and the values of it that the book pre-renders.

    ``values`` default to every option, both checkbox states or every IntSlider step
    (float sliders must list them); ``applies`` False hides the control for a state.
    """

    control: Any
    values: Sequence[Any] | None = None
    label: str | None = None
    applies: Callable[[], bool] | None = None

    @property
    def kind(self) -> str:
        """``"select"``, ``"slider"`` or ``"checkbox"``: the HTML control the book uses."""
        # A SelectionSlider (options, and a slider's orientation) steps through its options
        # with Previous/Next in the book, as a slider does; a dropdown is a menu.
        if hasattr(self.control, "_options_labels") and hasattr(self.control, "orientation"):
            return "slider"
        if hasattr(self.control, "_options_labels"):
            return "select"
        if isinstance(self.control.value, bool):
            return "checkbox"
        return "slider"

    @property
    def title(self) -> str:
        """The label shown next to the control."""
        return self.label if self.label is not None else str(self.control.description)

    def current_values(self) -> list[Any]:
        """The values to pre-render, given the earlier axes as they are set now.

        Raises ValueError if a float slider has no ``values``, or a value is not one the
        control accepts (outside its range or options).
        """
        control = self.control
        if hasattr(control, "_options_values"):  # a dropdown, or a slider over options
            allowed = list(control._options_values)
            values = allowed if self.values is None else list(self.values)
            missing = [v for v in values if v not in allowed]
            if missing:
                raise ValueError(f"{self.title}: values {missing} are not among the options {allowed}")
            return values
        if self.kind == "checkbox":
            return [False, True] if self.values is None else list(self.values)
        if self.values is None:
            if isinstance(control.value, float):
                raise ValueError(f"{self.title}: a float slider needs the list of values the book shows")
            return list(range(control.min, control.max + 1, control.step))
        values = list(self.values)
        low, high = (10.0**control.min, 10.0**control.max) if hasattr(control, "base") else (control.min,
                                                                                              control.max)
        outside = [v for v in values if not low - 1e-9 <= v <= high + 1e-9]
        if outside:
            raise ValueError(f"{self.title}: values {outside} lie outside the slider's range {low:g}..{high:g}")
        return values

    def label_of(self, value: Any) -> str:
        """How the book writes ``value``: the option's label, or the slider's readout."""
        if hasattr(self.control, "_options_labels"):
            return str(self.control._options_labels[list(self.control._options_values).index(value)])
        if self.kind == "checkbox":
            return "on" if value else "off"
        fmt = getattr(self.control, "readout_format", "d") or "d"
        try:
            return format(value, fmt)
        except (TypeError, ValueError):
            return str(value)


def figure_data_uri(fig: Figure, dpi: int = FRAME_DPI, colors: int = FRAME_COLORS,
                    max_width: int = FRAME_MAX_WIDTH) -> str:
    """A figure as a ``data:image/png;base64,...`` URI of a palette PNG (``dpi``: dots/inch)."""
    dpi = min(dpi, max_width / fig.get_figwidth())
    # A figure with fixed margins (no layout engine, say chapter 8's tiles) often has a
    # tick label a pixel past its edge: drawing it once first would only add a draw.
    image = None if fig.get_layout_engine() is None else _drawn_once(fig, dpi)
    if image is None:
        png = io.BytesIO()
        fig.savefig(png, format="png", dpi=dpi, bbox_inches="tight", pad_inches=PAD_INCHES)
        image = Image.open(png).convert("RGB")
    image = image.quantize(colors=colors, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    buffer = io.BytesIO()
    image.save(buffer, format="png")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def _drawn_once(fig: Figure, dpi: float) -> Image.Image | None:
    """``fig`` drawn once at ``dpi``, cropped to its content plus :data:`PAD_INCHES`."""
    old_dpi, old_canvas = fig.dpi, fig.canvas
    canvas = FigureCanvasAgg(fig)
    try:
        fig.dpi = dpi
        canvas.draw()
        if not isinstance(fig.get_layout_engine(), (ConstrainedLayoutEngine, TightLayoutEngine)):
            # Laid out once or by hand: measuring the tight box costs a fraction of a second draw.
            box = fig.get_tightbbox(canvas.get_renderer())
            if box.x0 < 0 or box.y0 < 0 or box.x1 > fig.get_figwidth() or box.y1 > fig.get_figheight():
                return None
        pixels = np.asarray(canvas.buffer_rgba())[..., :3]
    finally:
        fig.dpi = old_dpi
        fig.set_canvas(old_canvas)
    face = np.round(np.asarray(to_rgba(fig.get_facecolor())[:3]) * 255).astype(pixels.dtype)
    rows, cols = np.nonzero((pixels != face).any(axis=2))
    if rows.size:
        pad = int(round(PAD_INCHES * dpi))
        height, width = pixels.shape[:2]
        pixels = pixels[max(rows.min() - pad, 0):min(rows.max() + 1 + pad, height),
                        max(cols.min() - pad, 0):min(cols.max() + 1 + pad, width)]
    return Image.fromarray(np.ascontiguousarray(pixels), mode="RGB")


def _control_html(uid: str, k: int, axis: Mapping[str, Any]) -> str:
    """The HTML of axis ``k``'s control, labelled for screen readers."""
    cid = f"{uid}-a{k}"
    label = f'<label for="{cid}">{html.escape(axis["label"])}</label>'
    if axis["kind"] == "select":
        options = "".join(f'<option value="{i}">{html.escape(text)}</option>'
                          for i, text in enumerate(axis["options"]))
        return f'<span class="ax-control" data-axis="{k}">{label} <select id="{cid}">{options}</select></span>'
    if axis["kind"] == "checkbox":
        return f'<span class="ax-control" data-axis="{k}"><input type="checkbox" id="{cid}"> {label}</span>'
    name = html.escape(axis["label"])
    return (
        f'<span class="ax-control" data-axis="{k}">'
        f'<button type="button" class="ax-prev" aria-label="Previous {name}">&#9664; Previous</button> '
        f'{label} <input type="range" id="{cid}" min="0" max="0" step="1" value="0"> '
        f'<output for="{cid}"></output> '
        f'<button type="button" class="ax-next" aria-label="Next {name}">Next &#9654;</button></span>'
    )


# One stylesheet and one script for every explorer; both are inline so that the
# page needs nothing from the network. Colours come from the book's theme
# variables where it has them, with fallbacks for a plain HTML viewer.
_STYLE = """
.attncourse-explorer{border:1px solid var(--pst-color-border,#ccc);border-radius:6px;padding:.6em;margin:1em 0}
.attncourse-explorer .ax-controls{display:flex;flex-wrap:wrap;gap:.4em 1.2em;align-items:center}
.attncourse-explorer .ax-control{display:inline-flex;gap:.3em;align-items:center}
.attncourse-explorer [hidden]{display:none!important}
.attncourse-explorer button{font:inherit;padding:.1em .6em;border:1px solid #767676;border-radius:4px;
 background:var(--pst-color-surface,#f3f4f5);color:var(--pst-color-text-base,#222);cursor:pointer}
.attncourse-explorer button:disabled{opacity:.5;cursor:default}
.attncourse-explorer select{font:inherit;max-width:36em}
.attncourse-explorer output{min-width:3em;font-variant-numeric:tabular-nums}
.attncourse-explorer .ax-caption{margin:.6em 0;line-height:1.45}
.attncourse-explorer img.ax-frame{max-width:100%;height:auto;display:block}
.attncourse-explorer .ax-note{font-size:.85em;opacity:.85}
"""

_SCRIPT = """
(function () {
  var root = document.getElementById("%(uid)s");
  var data = JSON.parse(root.querySelector("script.ax-data").textContent);
  var axes = data.axes, keys = Object.keys(data.states);
  var idx = data.initial.split("/");
  var spans = root.querySelectorAll(".ax-control");
  var avail = [];
  function available(k) {
    var seen = {}, out = [];
    keys.forEach(function (key) {
      var parts = key.split("/");
      for (var j = 0; j < k; j++) { if (parts[j] !== idx[j]) { return; } }
      if (!seen[parts[k]]) { seen[parts[k]] = true; out.push(parts[k]); }
    });
    if (out[0] !== "-") { out.sort(function (a, b) { return a - b; }); }
    return out;
  }
  function refresh(from) {
    for (var k = from; k < axes.length; k++) {
      var old = avail[k] || [], now = available(k), span = spans[k];
      if (now.indexOf(idx[k]) < 0) {
        var p = old.indexOf(idx[k]);
        idx[k] = now[Math.max(0, Math.min(p < 0 ? 0 : p, now.length - 1))];
      }
      avail[k] = now;
      span.hidden = now[0] === "-";
      var input = span.querySelector("select, input");
      if (axes[k].kind === "select") {
        Array.prototype.forEach.call(input.options, function (o) {
          var off = now.indexOf(o.value) < 0; o.hidden = off; o.disabled = off;
        });
        input.value = idx[k];
      } else if (axes[k].kind === "checkbox") {
        input.checked = idx[k] === "1"; input.disabled = now.length < 2;
      } else if (!span.hidden) {
        var at = now.indexOf(idx[k]);
        input.max = String(now.length - 1); input.value = String(at);
        input.setAttribute("aria-valuetext", axes[k].options[+idx[k]]);
        span.querySelector("output").textContent = axes[k].options[+idx[k]];
        span.querySelector(".ax-prev").disabled = at <= 0;
        span.querySelector(".ax-next").disabled = at >= now.length - 1;
      }
    }
    var state = data.states[idx.join("/")];
    var img = root.querySelector("img.ax-frame");
    img.src = data.frames[state[0]]; img.alt = state[2];
    root.querySelector(".ax-caption").innerHTML = state[1];
  }
  function choose(k, value) { idx[k] = value; refresh(k); }
  Array.prototype.forEach.call(spans, function (span, k) {
    var input = span.querySelector("select, input");
    if (axes[k].kind === "select") {
      input.addEventListener("change", function () { choose(k, input.value); });
    } else if (axes[k].kind === "checkbox") {
      input.addEventListener("change", function () { choose(k, input.checked ? "1" : "0"); });
    } else {
      input.addEventListener("input", function () { choose(k, avail[k][+input.value]); });
      [[".ax-prev", -1], [".ax-next", 1]].forEach(function (pair) {
        span.querySelector(pair[0]).addEventListener("click", function () {
          var at = avail[k].indexOf(idx[k]) + pair[1];
          if (at >= 0 && at < avail[k].length) { choose(k, avail[k][at]); }
        });
      });
    }
  });
  refresh(0);
})();
"""


def render_player(
    title: str,
    axes: Sequence[Mapping[str, Any]],
    states: Mapping[str, tuple[int, str, str]],
    frames: Sequence[str],
    initial: str,
    note: str = "",
) -> str:
    """The self-contained HTML of an explorer's book rendering; it loads nothing.

    ``axes``: one ``{"label", "kind", "options"}`` per control; ``states``: key (option
    indices joined by ``/``, ``-`` where an axis does not apply) -> (frame index, caption
    HTML, alternative text); ``frames``: data URIs. Raises ValueError if ``initial`` is
    not a state, or a key does not have one part per axis.
    """
    if initial not in states:
        raise ValueError(f"the initial state {initial!r} is not among the {len(states)} states")
    for key in states:
        if len(key.split("/")) != len(axes):
            raise ValueError(f"state key {key!r} does not have one part for each of the {len(axes)} axes")
    # The first state is also written into the HTML, so that it shows without JavaScript.
    first = states[initial]
    payload = {"axes": list(axes), "states": dict(states), "frames": list(frames), "initial": initial}
    blob = json.dumps(payload, separators=(",", ":"), sort_keys=True)
    uid = "ax-" + hashlib.sha1(blob.encode()).hexdigest()[:12]
    # "</" must not end the JSON's <script> early: escape it inside the JSON strings.
    blob = blob.replace("</", "<\\/")
    controls = "".join(_control_html(uid, k, axis) for k, axis in enumerate(axes))
    note_html = f'<div class="ax-note">{note}</div>' if note else ""
    return (
        f'<div class="attncourse-explorer" id="{uid}" role="group" aria-label="{html.escape(title)}">'
        f"<style>{_STYLE}</style>"
        f'<div class="ax-controls">{controls}</div>'
        f'<div class="ax-caption" aria-live="polite">{first[1]}</div>'
        f'<img class="ax-frame" alt="{html.escape(first[2])}" src="{frames[first[0]]}">'
        f"{note_html}"
        f'<script type="application/json" class="ax-data">{blob}</script>'
        f"<script>{_SCRIPT % {'uid': uid}}</script>"
        "</div>"
    )


__all__ = ["BookAxis", "figure_data_uri", "render_player"]
