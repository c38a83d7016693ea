// Parley console: small progressive enhancements. Every flow works without
// this file (plain form posts); no inline script anywhere (CSP).
"use strict";

// Forms with data-confirm ask first.
document.addEventListener("submit", (ev) => {
  const f = ev.target.closest("form[data-confirm]");
  if (f && !window.confirm(f.dataset.confirm)) ev.preventDefault();
}, true);

// Buttons with data-copy copy the text of the element they name.
document.addEventListener("click", async (ev) => {
  const b = ev.target.closest("[data-copy]");
  if (!b) return;
  const el = document.querySelector(b.dataset.copy);
  if (!el) return;
  try {
    await navigator.clipboard.writeText(el.textContent.trim());
    b.textContent = "Copied";
  } catch (_) {
    const r = document.createRange();
    r.selectNodeContents(el);
    const s = window.getSelection();
    s.removeAllRanges();
    s.addRange(r);
    b.textContent = "Selected: press Ctrl+C";
  }
});
