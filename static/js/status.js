// A waiting request's page: ask for its status every 3 seconds at first, then less often (x1.5 up
// to a minute), and stop after a day or once nothing more will change by itself. When the state
// changes, the page reloads once to show it. Without JavaScript, a <noscript> refresh does the same.
(function () {
  "use strict";
  var box = document.getElementById("request-status");
  if (!box || !box.getAttribute("data-poll-url") || !window.fetch) { return; }
  var url = box.getAttribute("data-poll-url");
  var state = box.getAttribute("data-state");
  var delay = (parseFloat(box.getAttribute("data-poll-seconds")) || 3) * 1000;
  var maxDelay = 60000;
  var stopAt = Date.now() + 24 * 3600 * 1000;
  var failures = 0;
  function schedule() {
    if (Date.now() > stopAt || document.hidden && failures > 5) { return; }
    window.setTimeout(poll, delay);
    delay = Math.min(maxDelay, delay * 1.5);
  }
  function poll() {
    fetch(url, { credentials: "same-origin", headers: { "Accept": "application/json" }, cache: "no-store" })
      .then(function (response) {
        if (!response.ok) { throw new Error("status " + response.status); }
        return response.json();
      })
      .then(function (data) {
        failures = 0;
        if (data.state !== state || !data.waiting) {
          window.location.reload();
          return;
        }
        schedule();
      })
      .catch(function () { failures += 1; schedule(); });
  }
  schedule();
})();
