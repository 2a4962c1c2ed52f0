// The review queue from the keyboard: j/k move between rows, o or Enter opens, x ticks,
// a and r approve or reject the ticked rows (or the current one) through the confirmation page.
(function () {
  "use strict";
  // Keys that write text go to the field; a ticked checkbox or a pressed button keeps the focus but takes
  // no letters, so the shortcuts still work after a mouse click on one.
  var UNTYPED_INPUTS = ["checkbox", "radio", "button", "submit", "reset", "image"];
  function typing(event) {
    var target = event.target;
    var tag = target && target.tagName;
    if (tag === "INPUT") { return UNTYPED_INPUTS.indexOf((target.type || "text").toLowerCase()) === -1; }
    return tag === "TEXTAREA" || tag === "SELECT" || Boolean(target && target.isContentEditable);
  }
  function init() {
    var form = document.getElementById("bulk-form");
    if (!form) { return; }
    var rows = Array.prototype.slice.call(form.querySelectorAll("tr.queue-row"));
    var count = document.getElementById("bulk-count");
    var current = -1;

    function ticked() { return form.querySelectorAll("input.tick:checked"); }
    function updateCount() {
      var n = ticked().length;
      count.textContent = n ? n + (n === 1 ? " preview ticked." : " previews ticked.") : "Tick previews to decide several at once.";
    }
    function select(index) {
      if (!rows.length) { return; }
      index = Math.max(0, Math.min(rows.length - 1, index));
      if (current >= 0 && rows[current]) { rows[current].classList.remove("current"); rows[current].removeAttribute("aria-current"); }
      current = index;
      var row = rows[current];
      row.classList.add("current");
      row.setAttribute("aria-current", "true");
      var link = row.querySelector("a.row-link");
      if (link) { link.focus(); }
    }
    function decide(decision) {
      var box = current >= 0 ? rows[current].querySelector("input.tick") : null;
      if (!ticked().length && box) { box.checked = true; updateCount(); }
      if (!ticked().length) { return; }
      var button = form.querySelector('button[name="decision"][value="' + decision + '"]');
      if (decision === "reject") {
        var note = document.getElementById("bulk-note");
        if (!note.value) { note.focus(); count.textContent = "Write a note for the rejection, then press Reject."; return; }
      }
      if (button) { button.click(); }
    }
    form.addEventListener("change", updateCount);
    rows.forEach(function (row, index) {
      row.addEventListener("focusin", function () {
        if (current !== index) {
          if (current >= 0 && rows[current]) { rows[current].classList.remove("current"); rows[current].removeAttribute("aria-current"); }
          current = index; row.classList.add("current"); row.setAttribute("aria-current", "true");
        }
      });
    });
    document.addEventListener("keydown", function (event) {
      if (event.altKey || event.ctrlKey || event.metaKey || typing(event)) { return; }
      switch (event.key) {
        case "j": select(current + 1); event.preventDefault(); break;
        case "k": select(current - 1); event.preventDefault(); break;
        case "o":
          if (current >= 0) { window.location.href = rows[current].getAttribute("data-url"); event.preventDefault(); }
          break;
        case "x":
          if (current >= 0) {
            var box = rows[current].querySelector("input.tick");
            if (box) { box.checked = !box.checked; updateCount(); }
            event.preventDefault();
          }
          break;
        case "a": decide("approve"); event.preventDefault(); break;
        case "r": decide("reject"); event.preventDefault(); break;
        default: break;
      }
    });
    updateCount();
  }
  if (document.readyState === "loading") { document.addEventListener("DOMContentLoaded", init); } else { init(); }
})();
