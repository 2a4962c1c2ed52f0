// Times in the viewer's own timezone, with the zone shown. The server writes each time in UTC,
// labelled "UTC" (what stays without JavaScript); this rewrites every <time datetime data-localtime>.
(function () {
  "use strict";
  function zoneName(date) {
    try {
      var parts = new Intl.DateTimeFormat(undefined, { timeZoneName: "short" }).formatToParts(date);
      for (var i = 0; i < parts.length; i++) {
        if (parts[i].type === "timeZoneName") { return parts[i].value; }
      }
    } catch (e) { /* old browsers: no zone name */ }
    return "";
  }
  function localise(root) {
    var nodes = (root || document).querySelectorAll("time[datetime][data-localtime]");
    var format = new Intl.DateTimeFormat(undefined, {
      year: "numeric", month: "short", day: "numeric", hour: "2-digit", minute: "2-digit"
    });
    for (var i = 0; i < nodes.length; i++) {
      var node = nodes[i];
      var date = new Date(node.getAttribute("datetime"));
      if (isNaN(date.getTime())) { continue; }
      node.textContent = format.format(date) + " " + zoneName(date);
      node.title = node.getAttribute("datetime") + " (UTC)";
      node.setAttribute("data-localised", "");
    }
  }
  window.localiseTimes = localise;
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", function () { localise(document); });
  } else {
    localise(document);
  }
})();
