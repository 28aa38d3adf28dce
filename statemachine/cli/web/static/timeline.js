// trial-replay: the timeline fits its window and zooms into a time range.
//
// Served by `trial-replay serve` as a file (its Content-Security-Policy allows no inline
// script) and inlined into the HTML file `trial-replay timeline -o x.html` writes (one file
// that works offline). Every element of the SVG placed on the x axis carries its axis value
// (data-t, or data-t0 and data-t1): this script lays them out again at the window's width
// (text keeps its size) for the range shown. Zoom with the buttons or by dragging across the
// plot; the range is kept in the address (#t=FROM,TO), so a reload (the live pages reload when
// the log changes) and a shared link show the same range. Text is only ever set with
// textContent: nothing from the log becomes markup.
(function () {
  "use strict";
  var NS = "http://www.w3.org/2000/svg";
  // Below this width the picture scales down instead (the legend needs it).
  var MIN_WIDTH = 880;
  // A driver-down stretch too short to see is drawn this wide (pixels), centred.
  var MIN_DOWN_W = 6;
  // The time axis' tick steps in seconds, as timeline_svg.py's TIME_STEPS.
  var TIME_STEPS = [0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 15,
    30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400];
  var MOST_TICKS = 8;

  function num(el, name) { return Number(el.getAttribute(name)); }

  function tickStep(span, byTime) {
    var i, step;
    if (!(span > 0)) { return 1; }
    if (byTime) {
      for (i = 0; i < TIME_STEPS.length; i++) {
        if (span / TIME_STEPS[i] <= MOST_TICKS) { return TIME_STEPS[i]; }
      }
      return 86400 * Math.ceil(span / 86400 / MOST_TICKS);
    }
    step = 1;
    while (span / step > MOST_TICKS) {
      step *= 2; if (span / step <= MOST_TICKS) { break; }
      step *= 2.5; if (span / step <= MOST_TICKS) { break; }
      step *= 2;
    }
    return step;
  }

  function tickLabel(value, byTime) {
    var whole, minutes, seconds, hours, rest;
    if (!byTime) { return String(Math.round(value)); }
    if (value === 0) { return "0"; }
    if (value < 1) { return Math.round(value * 1000) + " ms"; }
    if (value < 60) { return String(Number(value.toPrecision(6))) + " s"; }
    whole = Math.round(value);
    if (whole < 3600) {
      minutes = Math.floor(whole / 60); seconds = whole % 60;
      return minutes + " min" + (seconds ? " " + seconds + " s" : "");
    }
    hours = Math.floor(whole / 3600); rest = Math.floor((whole % 3600) / 60);
    return hours + " h" + (rest ? " " + rest + " min" : "");
  }

  function Timeline(svg) {
    this.svg = svg;
    this.byTime = svg.getAttribute("data-by-time") === "1";
    this.end = num(svg, "data-x-end") || 1;
    this.left = num(svg, "data-left");
    this.right = num(svg, "data-right");
    this.top = num(svg, "data-top");
    this.bottom = num(svg, "data-bottom");
    this.height = svg.viewBox.baseVal.height;
    this.from = 0;
    this.to = this.end;
    this.width = svg.viewBox.baseVal.width;
    this.scale = (this.width - this.left - this.right) / this.end;
    this.controls();
    this.dragging();
    this.readAddress();
  }

  Timeline.prototype.readAddress = function () {
    var match = /(?:^#|&)t=([0-9.eE+-]+),([0-9.eE+-]+)/.exec(location.hash);
    if (match) { this.show(Number(match[1]), Number(match[2]), false); }
  };

  Timeline.prototype.writeAddress = function () {
    var whole = this.from <= 0 && this.to >= this.end;
    var hash = whole ? "" : "#t=" + Number(this.from.toPrecision(6)) + "," +
      Number(this.to.toPrecision(6));
    if (hash !== location.hash && window.history && history.replaceState) {
      history.replaceState(null, "", location.pathname + location.search + hash);
    }
  };

  // Show [from, to] of the axis (clamped to the experiment; at least a millionth of it).
  Timeline.prototype.show = function (from, to, remember) {
    var least = this.end / 1e6, span;
    if (!(from === from) || !(to === to)) { return; }  // NaN from a hand-edited address
    if (to < from) { span = from; from = to; to = span; }
    span = Math.min(Math.max(to - from, least), this.end);
    from = Math.min(Math.max(from, 0), this.end - span);
    this.from = from;
    this.to = from + span;
    if (this.svg.isConnected) { this.layout(); }
    if (remember) { this.writeAddress(); }
  };

  Timeline.prototype.zoom = function (factor) {
    var middle = (this.from + this.to) / 2, half = (this.to - this.from) * factor / 2;
    this.show(middle - half, middle + half, true);
  };

  Timeline.prototype.pan = function (direction) {
    var shift = (this.to - this.from) / 2 * direction;
    this.show(this.from + shift, this.to + shift, true);
  };

  Timeline.prototype.controls = function () {
    var self = this, bar = document.createElement("div"), i, spec, button;
    var buttons = [
      ["Zoom in", "zoom in on the middle of the range shown", function () { self.zoom(0.5); }],
      ["Zoom out", "show twice the range", function () { self.zoom(2); }],
      ["\u25c0 Earlier", "move the range back by half its length",
        function () { self.pan(-1); }],
      ["Later \u25b6", "move the range on by half its length", function () { self.pan(1); }],
      ["Whole experiment", "show the whole experiment",
        function () { self.show(0, self.end, true); }]
    ];
    bar.className = "timeline-controls";
    for (i = 0; i < buttons.length; i++) {
      spec = buttons[i];
      button = document.createElement("button");
      button.type = "button";
      button.textContent = spec[0];
      button.title = spec[1];
      button.addEventListener("click", spec[2]);
      bar.appendChild(button);
    }
    this.window = document.createElement("span");
    this.window.className = "window";
    bar.appendChild(this.window);
    this.svg.parentNode.insertBefore(bar, this.svg);
  };

  // Axis value at a pointer position.
  Timeline.prototype.valueAt = function (clientX) {
    var box = this.svg.getBoundingClientRect();
    var x = (clientX - box.left) * this.width / box.width;
    return this.from + (x - this.left) / this.scale;
  };

  Timeline.prototype.dragging = function () {
    var self = this, start = null, band = document.createElementNS(NS, "rect");
    band.setAttribute("class", "selection");
    band.setAttribute("fill", "#1f5fbf");
    band.setAttribute("fill-opacity", "0.15");
    band.setAttribute("y", String(this.top - 2));
    band.setAttribute("height", String(this.bottom - this.top + 2));
    band.setAttribute("visibility", "hidden");
    this.svg.appendChild(band);
    function x(value) { return self.left + (value - self.from) * self.scale; }
    this.svg.addEventListener("mousedown", function (event) {
      var value = self.valueAt(event.clientX);
      if (event.button !== 0 || value < self.from || value > self.to) { return; }
      start = value;
      event.preventDefault();
    });
    window.addEventListener("mousemove", function (event) {
      var value;
      if (start === null) { return; }
      value = Math.min(Math.max(self.valueAt(event.clientX), self.from), self.to);
      band.setAttribute("x", String(Math.min(x(start), x(value))));
      band.setAttribute("width", String(Math.abs(x(value) - x(start))));
      band.setAttribute("visibility", "visible");
    });
    window.addEventListener("mouseup", function (event) {
      var value, pixels;
      if (start === null) { return; }
      value = Math.min(Math.max(self.valueAt(event.clientX), self.from), self.to);
      pixels = Math.abs(value - start) * self.scale;
      band.setAttribute("visibility", "hidden");
      if (pixels >= 4) { self.show(Math.min(start, value), Math.max(start, value), true); }
      start = null;
    });
  };

  Timeline.prototype.layout = function () {
    var svg = this.svg, self = this, i, el, x0, x1, middle, value, step, axis, line, text;
    var shown = svg.getBoundingClientRect().width;
    var width = Math.max(Math.round(shown) || this.width, MIN_WIDTH, this.left + 300);
    var plot = width - this.left - this.right;
    var scale = plot / (this.to - this.from);
    function x(t) { return self.left + (t - self.from) * scale; }
    function inside(px) { return px >= self.left - 0.5 && px <= self.left + plot + 0.5; }
    this.width = width;
    this.scale = scale;
    svg.setAttribute("viewBox", "0 0 " + width + " " + this.height);
    svg.querySelector("rect.background").setAttribute("width", String(width));
    svg.querySelector("clipPath#timeline-plot rect").setAttribute("width", String(plot));
    var spans = svg.querySelectorAll("rect[data-t0]");
    for (i = 0; i < spans.length; i++) {
      el = spans[i];
      x0 = x(num(el, "data-t0"));
      x1 = x(num(el, "data-t1"));
      if (el.getAttribute("class") === "driver-down") {
        if (x1 - x0 < MIN_DOWN_W) {
          middle = (x0 + x1) / 2; x0 = middle - MIN_DOWN_W / 2; x1 = middle + MIN_DOWN_W / 2;
        }
        x0 = Math.max(x0, this.left); x1 = Math.min(x1, this.left + plot);
        el.setAttribute("visibility", x1 > x0 ? "visible" : "hidden");
      }
      el.setAttribute("x", x0.toFixed(1));
      el.setAttribute("width", Math.max(x1 - x0, 1).toFixed(1));
    }
    var marks = svg.querySelectorAll("path.marker");
    for (i = 0; i < marks.length; i++) {
      el = marks[i];
      value = x(num(el, "data-t"));
      el.setAttribute("transform", "translate(" + value.toFixed(1) + "," +
        el.getAttribute("data-y") + ")");
      el.setAttribute("visibility", inside(value) ? "visible" : "hidden");
    }
    var lines = svg.querySelectorAll("line.epoch");
    for (i = 0; i < lines.length; i++) {
      el = lines[i];
      value = x(num(el, "data-t"));
      el.setAttribute("x1", value.toFixed(1));
      el.setAttribute("x2", value.toFixed(1));
      el.setAttribute("visibility", inside(value) ? "visible" : "hidden");
    }
    var labels = svg.querySelectorAll("text.epoch-label");
    for (i = 0; i < labels.length; i++) {
      el = labels[i];
      value = x(num(el, "data-t"));
      el.setAttribute("x", (value + 3).toFixed(1));
      el.setAttribute("visibility", inside(value) ? "visible" : "hidden");
    }
    var downs = svg.querySelectorAll("text.driver-down-label");
    for (i = 0; i < downs.length; i++) {
      el = downs[i];
      x0 = Math.max(x(num(el, "data-t0")), this.left);
      x1 = Math.min(x(num(el, "data-t1")), this.left + plot);
      middle = (x0 + x1) / 2;
      el.setAttribute("x", middle.toFixed(1));
      el.setAttribute("visibility", inside(middle) ? "visible" : "hidden");
    }
    axis = svg.querySelector("g.axis");
    while (axis.firstChild) { axis.removeChild(axis.firstChild); }
    step = tickStep(this.to - this.from, this.byTime);
    for (value = Math.ceil(this.from / step) * step; value <= this.to + step / 1e6;
         value += step) {
      line = document.createElementNS(NS, "line");
      line.setAttribute("x1", x(value).toFixed(1));
      line.setAttribute("x2", x(value).toFixed(1));
      line.setAttribute("y1", String(this.top - 30));
      line.setAttribute("y2", String(this.bottom));
      line.setAttribute("stroke", "#e3e3e3");
      axis.appendChild(line);
      text = document.createElementNS(NS, "text");
      text.setAttribute("x", x(value).toFixed(1));
      text.setAttribute("y", String(this.top - 36));
      text.setAttribute("fill", "#666");
      text.setAttribute("text-anchor", "middle");
      text.textContent = tickLabel(Number(value.toPrecision(12)), this.byTime);
      axis.appendChild(text);
    }
    this.window.textContent = (this.from <= 0 && this.to >= this.end)
      ? "Showing the whole experiment (" + tickLabel(this.end, this.byTime) +
        (this.byTime ? "" : " events") + "); drag across the timeline to zoom in."
      : "Showing " + tickLabel(this.from, this.byTime) + " to " +
        tickLabel(this.to, this.byTime) + " of " + tickLabel(this.end, this.byTime) +
        (this.byTime ? "" : " events") + ".";
  };

  var timelines = [];

  function layout() {
    for (var j = 0; j < timelines.length; j++) {
      if (timelines[j].svg.isConnected) { timelines[j].layout(); }
    }
  }

  // Lay out one timeline (also one put in the page later: the live experiment page swaps
  // its timeline in when the trials drawn change).
  function attach(svg) {
    var timeline = new Timeline(svg);
    timelines = timelines.filter(function (t) { return t.svg.isConnected; });
    timelines.push(timeline);
    timeline.layout();
    return timeline;
  }

  function start() {
    var svgs = document.querySelectorAll("svg.timeline"), i;
    for (i = 0; i < svgs.length; i++) { attach(svgs[i]); }
    window.addEventListener("resize", layout);
  }

  window.trialReplayTimeline = {attach: attach};

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
