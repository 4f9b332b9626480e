// engramdb inspector: the only script (CSP script-src 'self'; no inline code).
// Progressive enhancement: every page works without it.
"use strict";
document.addEventListener("DOMContentLoaded", function () {
  // Time travel: the slider moves over the decision instants listed in #at-instants;
  // it fills the "as of" field and, when released, shows memory at that instant.
  var slider = document.getElementById("at-slider");
  if (slider) {
    var options = document.querySelectorAll("#at-instants option");
    var field = document.getElementById(slider.dataset.target);
    var label = document.getElementById("at-label");
    var show = function () {
      var option = options[Number(slider.value)];
      if (!option) { return; }
      field.value = option.value;
      label.textContent = option.textContent;
    };
    slider.addEventListener("input", show);
    slider.addEventListener("change", function () { show(); slider.form.submit(); });
  }
});
