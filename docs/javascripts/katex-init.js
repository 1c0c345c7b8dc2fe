// Render the formulas that pymdownx.arithmatex (generic mode) leaves as \( ... \) and \[ ... \] in
// <span class="arithmatex"> / <div class="arithmatex">, with the vendored KaTeX (docs/assets/katex).
// document$ is Material's page observable: it fires on the first load and on instant navigation.
function renderMath(root) {
  root.querySelectorAll(".arithmatex").forEach(function (el) {
    renderMathInElement(el, {
      delimiters: [
        { left: "\\(", right: "\\)", display: false },
        { left: "\\[", right: "\\]", display: true },
      ],
      throwOnError: false,
    });
  });
}
if (typeof document$ !== "undefined") {
  document$.subscribe(function () { renderMath(document.body); });
} else {
  document.addEventListener("DOMContentLoaded", function () { renderMath(document.body); });
}
