// Sort and filter the variants table. Inlined into index.html; allowed by the page's CSP hash.
(function () {
  "use strict";
  var table = document.getElementById("variants");
  if (!table) return;
  var body = table.tBodies[0];
  var rows = Array.prototype.slice.call(body.rows);
  var text = document.getElementById("f-text");
  var verdict = document.getElementById("f-verdict");
  var tag = document.getElementById("f-tag");
  var shown = document.getElementById("f-shown");
  rows.forEach(function (r) { r._tags = JSON.parse(r.getAttribute("data-tags") || "[]"); });

  function apply() {
    var q = text.value.trim().toLowerCase(), v = verdict.value, g = tag.value, n = 0;
    rows.forEach(function (r) {
      var ok = (!q || r.getAttribute("data-text").indexOf(q) !== -1) &&
               (!v || r.getAttribute("data-verdict") === v) &&
               (!g || r._tags.indexOf(g) !== -1);
      r.hidden = !ok;
      if (ok) n++;
    });
    shown.textContent = String(n);
  }

  function fromHash() {
    var m = /(?:^#|&)verdict=([a-z]+)/.exec(location.hash);
    if (m) { verdict.value = m[1]; apply(); }
  }

  [text, verdict, tag].forEach(function (el) { el.addEventListener("input", apply); });
  window.addEventListener("hashchange", fromHash);

  table.tHead.addEventListener("click", function (e) {
    var th = e.target.closest("th");
    if (!th) return;
    var col = th.cellIndex, numeric = th.getAttribute("data-type") === "num";
    var dir = th.getAttribute("aria-sort") === "ascending" ? -1 : 1;
    Array.prototype.forEach.call(th.parentNode.cells, function (h) { h.removeAttribute("aria-sort"); });
    th.setAttribute("aria-sort", dir > 0 ? "ascending" : "descending");
    function key(r) {
      var c = r.cells[col], k = c.getAttribute("data-sort");
      if (k === null) k = c.textContent;
      if (!numeric) return k.toLowerCase();
      var x = parseFloat(k);
      return isNaN(x) ? -Infinity : x;
    }
    rows.sort(function (a, b) { var x = key(a), y = key(b); return (x < y ? -1 : x > y ? 1 : 0) * dir; });
    rows.forEach(function (r) { body.appendChild(r); });
  });

  fromHash();
  apply();
})();
