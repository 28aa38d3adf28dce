// trial-replay serve: the experiment page's trial table, and its live updates (served by the
// package; the Content-Security-Policy allows no inline script).
//
// Filters, sort and page live in the address (?status=ERROR&sort=failures&desc=1&page=2):
// the server renders that table on a load, and this script asks /api/e/EXP/trials for
// another one when a filter, a sort header, a status count or a pager link is used, swaps in
// the counts, the table and the timeline the answer carries (HTML the server escaped, as the
// page itself), and writes the address (a reload or a shared link shows the same table).
// Every data-poll-ms it asks /api/e/EXP/changes?since=POSITION which trials changed after
// the last position seen; when some did, the same table is fetched again and patched in
// place: no reload, the scroll position stays.
(function () {
  "use strict";
  var script = document.currentScript;
  var every = Number(script && script.dataset.pollMs) || 2000;
  var main = document.querySelector("main");
  var experiment = main && main.dataset.experiment;
  if (!experiment) { return; }
  var position = Number(main.dataset.position) || 0;
  var base = "/e/" + encodeURIComponent(experiment);
  var api = "/api/e/" + encodeURIComponent(experiment);
  var loading = false;

  function say(text) {
    var live = document.getElementById("live");
    if (live) { live.textContent = text; }
  }

  function getJSON(url) {
    return fetch(url, {cache: "no-store"}).then(function (r) {
      return r.json().then(function (d) { return {ok: r.ok, status: r.status, data: d}; });
    });
  }

  function swap(id, markup) {
    var el = document.getElementById(id);
    if (el) { el.innerHTML = markup; }
    return el;
  }

  function form() { return document.getElementById("filters"); }

  // The filter fields show what the address asks.
  function syncForm(search) {
    var params = new URLSearchParams(search), f = form(), names, i, field;
    if (!f) { return; }
    names = ["status", "error", "restore", "node", "q", "sort", "desc"];
    for (i = 0; i < names.length; i++) {
      field = f.elements.namedItem(names[i]);
      if (!field) { continue; }
      field.value = params.get(names[i]) || (names[i] === "sort" ? "trial" : "");
      if (field.tagName === "SELECT" && field.selectedIndex < 0) { field.selectedIndex = 0; }
    }
  }

  function mark(changed) {
    var rows = document.querySelectorAll("#trial-rows tr"), i;
    for (i = 0; i < rows.length; i++) {
      if (changed.indexOf(rows[i].dataset.trialId) >= 0) { rows[i].classList.add("changed"); }
    }
  }

  // Fetch the table for `search` and swap it in; `push`: a new address (else the same one).
  function load(search, push, changed) {
    var x = window.scrollX, y = window.scrollY;
    loading = true;
    return getJSON(api + "/trials" + search).then(function (answer) {
      var data = answer.data, svg, where;
      if (!answer.ok) {
        say("Could not show that table: " + (data.error || "no reason given"));
        return;
      }
      swap("status-counts", data.html.counts);
      swap("trial-table", data.html.table);
      svg = swap("timeline", data.html.timeline);
      svg = svg && svg.querySelector("svg.timeline");
      if (svg && window.trialReplayTimeline) { window.trialReplayTimeline.attach(svg); }
      mark(changed || []);
      position = Math.max(position, data.position);
      where = base + data.query + location.hash;
      if (push) {
        history.pushState(null, "", where);
      } else if (location.pathname + location.search + location.hash !== where) {
        history.replaceState(null, "", where);
      }
      syncForm(data.query);
      window.scrollTo(x, y);
    }).catch(function () {
      say("Live: the server is not answering.");
    }).then(function () { loading = false; });
  }

  function fromForm(event) {
    var f = form(), params = new URLSearchParams(), data, pair, it;
    event.preventDefault();
    data = new FormData(f);
    it = data.entries();
    for (pair = it.next(); !pair.done; pair = it.next()) {
      if (pair.value[1] && !(pair.value[0] === "sort" && pair.value[1] === "trial")) {
        params.append(pair.value[0], pair.value[1]);
      }
    }
    load(params.toString() ? "?" + params.toString() : "", true);
  }

  // A link to another table of this experiment (a count, a sort header, a pager link,
  // "clear") is answered here, without leaving the page.
  function onClick(event) {
    var link = event.target.closest && event.target.closest("a"), url;
    if (!link || event.button !== 0 || event.ctrlKey || event.metaKey || event.shiftKey) {
      return;
    }
    if (!link.closest("#status-counts, #trial-table thead, .pager, #filters")) { return; }
    url = new URL(link.href, location.href);
    if (url.pathname !== location.pathname) { return; }
    event.preventDefault();
    load(url.search, true);
  }

  function poll() {
    if (loading) { return; }
    getJSON(api + "/changes?since=" + position).then(function (answer) {
      var data = answer.data;
      if (!answer.ok) {
        say("Live: the event log is unavailable: " + (data.error || "no reason given"));
        return;
      }
      if (data.changed.length && data.position > position) {
        position = data.position;
        say("Live: " + (data.more ? "over " : "") + data.changed.length +
            " trial(s) changed; updated " + new Date().toLocaleTimeString() + ".");
        load(location.search, false, data.changed);
        return;
      }
      position = Math.max(position, data.position);
      say("Live: checked " + new Date().toLocaleTimeString() + " (event position " +
          position + "); the table updates itself.");
    }).catch(function () { say("Live: the server is not answering."); });
  }

  function start() {
    var f = form(), i, selects;
    if (f) {
      f.addEventListener("submit", fromForm);
      selects = f.querySelectorAll("select");
      for (i = 0; i < selects.length; i++) { selects[i].addEventListener("change", fromForm); }
    }
    document.addEventListener("click", onClick);
    // Back and forward: the address is the table's; ask for it again.
    window.addEventListener("popstate", function () { load(location.search, false); });
    poll();
    setInterval(poll, every);
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
