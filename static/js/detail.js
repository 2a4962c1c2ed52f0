// The review page from the keyboard: a focuses Approve (Enter confirms), r opens Reject and focuses
// its note, c opens the counter-proposal form. Nothing is decided without a second, deliberate key.
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
  function open(selector, focusSelector) {
    var details = document.querySelector(selector);
    if (!details) { return false; }
    details.open = true;
    var target = details.querySelector(focusSelector);
    if (target) { target.focus(); }
    return true;
  }
  document.addEventListener("keydown", function (event) {
    if (event.altKey || event.ctrlKey || event.metaKey || typing(event)) { return; }
    if (event.key === "a") {
      var approve = document.getElementById("approve-button");
      if (approve) {
        approve.focus();
        approve.textContent = "Press Enter to approve";
        approve.addEventListener("blur", function () { approve.textContent = "Approve"; }, { once: true });
        event.preventDefault();
      }
    } else if (event.key === "r") {
      if (open(".reject-details", "textarea")) { event.preventDefault(); }
    } else if (event.key === "c") {
      if (open(".counter-details", ".field input:not([type=hidden]), .field select, .field textarea")) { event.preventDefault(); }
    }
  });
})();
