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

// ---- Agents playground (console/agents.templ, console/agents.go) ----
// form[data-playground] streams the agent's answer: a same-origin POST of
// the form with Accept: text/event-stream, its body read as Server-Sent
// Events. Everything the agent or a source says goes in with textContent,
// never as HTML. Without this script the form posts and the page comes
// back with the whole answer.
(() => {
  const randomId = () => {
    const b = new Uint8Array(12);
    crypto.getRandomValues(b);
    return Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
  };

  // readSSE calls onData with the data of each event of a response body.
  const readSSE = async (body, onData) => {
    const reader = body.getReader();
    const dec = new TextDecoder();
    let buf = "";
    let data = [];
    const line = (l) => {
      if (l === "") {
        if (data.length) onData(data.join("\n"));
        data = [];
        return;
      }
      if (l.startsWith(":")) return; // a comment (keep-alive)
      const c = l.indexOf(":");
      const field = c < 0 ? l : l.slice(0, c);
      let value = c < 0 ? "" : l.slice(c + 1);
      if (value.startsWith(" ")) value = value.slice(1);
      if (field === "data") data.push(value);
    };
    for (;;) {
      const { value, done } = await reader.read();
      buf += done ? dec.decode() : dec.decode(value, { stream: true });
      for (;;) {
        const i = buf.search(/[\r\n]/);
        if (i < 0 || (buf[i] === "\r" && i === buf.length - 1 && !done)) break;
        line(buf.slice(0, i));
        buf = buf.slice(buf[i] === "\r" && buf[i + 1] === "\n" ? i + 2 : i + 1);
      }
      if (done) {
        if (buf !== "") line(buf);
        line("");
        return;
      }
    }
  };

  const el = (tag, cls, text) => {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  };

  const init = () => {
    const form = document.querySelector("form[data-playground]");
    if (!form) return;
    const log = document.getElementById(form.dataset.log);
    const sources = document.getElementById(form.dataset.sources);
    const status = form.querySelector("[data-testid=playground-status]");
    const conv = form.elements.namedItem("conversationId");
    const query = form.elements.namedItem("query");
    const button = form.querySelector("button[type=submit]");
    // One conversation per page load, kept across its turns.
    conv.value = "console-" + randomId();

    const addSource = (s) => {
      const li = el("li");
      const title = s.title || s.datasourceName || s.source || "source";
      if (/^https?:\/\//i.test(s.url || "")) {
        const a = el("a", "", title);
        a.href = s.url;
        a.rel = "noopener noreferrer";
        li.append(a);
      } else {
        li.append(el("strong", "", title));
      }
      li.append(el("span", "muted", " (score " + Number(s.score || 0).toFixed(3) + ") "));
      li.append(el("span", "", s.excerpt || ""));
      sources.append(li);
    };

    // Enter sends; Shift+Enter starts a new line.
    query.addEventListener("keydown", (ev) => {
      if (ev.key === "Enter" && !ev.shiftKey && !ev.isComposing) {
        ev.preventDefault();
        if (!button.disabled) form.requestSubmit();
      }
    });

    form.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      if (button.disabled) return;
      if (!query.value.trim()) {
        query.focus();
        return;
      }
      const body = new FormData(form);
      log.append(el("div", "user", query.value));
      const answer = el("div", "answer");
      answer.dataset.testid = "playground-answer";
      log.append(answer);
      sources.replaceChildren();
      query.value = "";
      button.disabled = true;
      status.textContent = "Thinking…";
      const fail = (msg) => {
        const e = el("div", "error", msg);
        e.setAttribute("role", "alert");
        e.dataset.testid = "playground-error";
        log.append(e);
      };
      try {
        const resp = await fetch(form.action, {
          method: "POST",
          body,
          credentials: "same-origin",
          headers: { Accept: "text/event-stream" },
        });
        const type = resp.headers.get("Content-Type") || "";
        if (!type.startsWith("text/event-stream")) {
          // An error page (session ended, role): show its message.
          const doc = new DOMParser().parseFromString(await resp.text(), "text/html");
          const msg = doc.querySelector("[data-testid=error]");
          fail(msg ? msg.textContent : "The request failed (" + resp.status + ").");
          return;
        }
        await readSSE(resp.body, (data) => {
          let e;
          try {
            e = JSON.parse(data);
          } catch (_) {
            return;
          }
          switch (e.type) {
            case "token":
              answer.textContent += e.value;
              log.scrollTop = log.scrollHeight;
              break;
            case "source":
              addSource(e.source || {});
              break;
            case "done":
              if (e.conversationId) conv.value = e.conversationId;
              status.textContent = [e.metadata && e.metadata.model, e.usage && e.usage.totalTokens + " tokens",
                e.metadata && e.metadata.latency + " ms"].filter(Boolean).join(" · ");
              break;
            case "error":
              fail(e.message || "The turn failed.");
              break;
          }
        });
      } catch (err) {
        fail("The connection failed: " + err.message);
      } finally {
        button.disabled = false;
        if (status.textContent === "Thinking…") status.textContent = "";
        query.focus();
      }
    });
  };
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
