// Weir web UI: the optional auto-refresh and confirmations of destructive
// actions. The pages work without it.
(function () {
  "use strict";
  var box = document.getElementById("autorefresh");
  if (box) {
    var timer = null;
    var arm = function () {
      clearTimeout(timer);
      if (box.checked) {
        timer = setTimeout(function () { location.reload(); }, 5000);
      }
    };
    box.checked = localStorage.getItem("weir-autorefresh") === "1";
    box.addEventListener("change", function () {
      localStorage.setItem("weir-autorefresh", box.checked ? "1" : "0");
      arm();
    });
    arm();
  }
  document.querySelectorAll("form[data-confirm]").forEach(function (form) {
    form.addEventListener("submit", function (e) {
      if (!confirm(form.getAttribute("data-confirm"))) {
        e.preventDefault();
      }
    });
  });
})();
