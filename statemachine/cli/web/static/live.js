// trial-replay serve: reload the page when the event log changes (served by the package; the
// Content-Security-Policy allows no inline script). Asks /api/version every data-poll-ms.
(function () {
  "use strict";
  var script = document.currentScript;
  var every = Number(script && script.dataset.pollMs) || 2000;
  var UNAVAILABLE = "unavailable";
  // A page saying the log is unavailable reloads as soon as it is back.
  var seen = document.body.dataset.state === UNAVAILABLE ? UNAVAILABLE : null;

  function say(text) {
    var live = document.getElementById("live");
    if (live) { live.textContent = text; }
  }

  function poll() {
    fetch("/api/version", {cache: "no-store"})
      .then(function (r) {
        return r.json().then(function (d) { return {ok: r.ok, data: d}; });
      })
      .then(function (answer) {
        if (!answer.ok) {
          // The log is missing, replaced or unreadable (503): say why, reload when it is back.
          seen = UNAVAILABLE;
          say("Live: the event log is unavailable: " + (answer.data.error || "no reason given"));
          return;
        }
        if (seen !== null && answer.data.version !== seen) { location.reload(); return; }
        seen = answer.data.version;
        say("Live: checked " + new Date().toLocaleTimeString() + "; reloads on new events.");
      })
      .catch(function () { say("Live: the server is not answering."); });
  }

  poll();
  setInterval(poll, every);
})();
