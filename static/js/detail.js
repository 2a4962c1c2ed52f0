// The review page from the keyboard: a focuses Approve (Enter confirms), r opens Reject and focuses
// its note, c opens the counter-proposal form. Nothing is decided without a second, deliberate key.
(function () {
  "use strict";
  function typing(event) {
    var tag = event.target && event.target.tagName;
    return tag === "INPUT" || tag === "TEXTAREA" || tag === "SELECT" || (event.target && event.target.isContentEditable);
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
      if (open(".counter-details", "input, select")) { event.preventDefault(); }
    }
  });
})();
