// The confirmation page's "Confirm within": the words follow the clock (every 15 seconds, every second in
// the last two minutes) and say when the time has passed, as the server's deadline_words would.
(function () {
  "use strict";
  var words = document.getElementById("deadline-words");
  var expires = words && Date.parse(words.getAttribute("data-expires"));
  if (!words || isNaN(expires)) { return; }
  function plural(n, unit) { return n + "\u00a0" + unit + (n === 1 ? "" : "s"); }
  function said(left) {
    if (left <= 0) { return "the time to confirm has passed"; }
    if (left < 60000) { return "in less than a minute"; }
    var minutes = Math.floor(left / 60000);
    if (minutes < 60) { return "in " + plural(minutes, "minute"); }
    var hours = Math.floor(minutes / 60);
    var rest = minutes % 60;
    return "in " + plural(hours, "hour") + (rest ? ", " + plural(rest, "minute") : "");
  }
  function update() {
    var left = expires - Date.now();
    var text = said(left);
    if (words.textContent !== text) { words.textContent = text; }
    if (left > 0) { window.setTimeout(update, left < 120000 ? 1000 : 15000); }
  }
  update();
})();
