// faultfinder dashboard: live updates over server-sent events, and the forms that post
// to the JSON API. Run data only ever reaches the page as server-rendered, escaped HTML
// or through textContent; this script never builds markup from data.
"use strict";

(() => {
  const body = document.body;
  const runId = body.dataset.runId || "";
  const statusBadge = document.getElementById("live-status");
  const EVENT_KINDS = ["spans", "run.status", "attribution", "run.changed", "reset"];
  const THROTTLE_MS = 400;

  let timer = null;
  let refreshing = false;
  let again = false;

  function showConnection(text, on) {
    if (!statusBadge) return;
    statusBadge.textContent = text;
    statusBadge.classList.toggle("on", on);
    statusBadge.classList.toggle("off", !on);
  }

  function localTimes(root) {
    for (const element of root.querySelectorAll("time[datetime]")) {
      const when = new Date(element.dateTime);
      if (!Number.isNaN(when.getTime())) {
        element.title = element.textContent;
        element.textContent = when.toLocaleString(undefined, { dateStyle: "short", timeStyle: "medium" });
      }
    }
  }

  // Re-render the page's live regions from a fresh copy of the same page. Details the
  // reader opened stay open.
  async function refresh() {
    if (refreshing) {
      again = true;
      return;
    }
    refreshing = true;
    try {
      const response = await fetch(location.href, {
        credentials: "same-origin",
        headers: { accept: "text/html" },
      });
      if (!response.ok) return;
      const fresh = new DOMParser().parseFromString(await response.text(), "text/html");
      for (const region of document.querySelectorAll("[data-live][id]")) {
        const replacement = fresh.getElementById(region.id);
        if (!replacement) continue;
        const open = new Set(
          Array.from(region.querySelectorAll("details[open][id]"), (element) => element.id),
        );
        const node = document.importNode(replacement, true);
        for (const details of node.querySelectorAll("details[id]")) {
          if (open.has(details.id)) details.open = true;
        }
        localTimes(node);
        region.replaceWith(node);
      }
      body.dataset.refreshes = String(Number(body.dataset.refreshes || "0") + 1);
    } catch (error) {
      showConnection("offline", false);
    } finally {
      refreshing = false;
      if (again) {
        again = false;
        schedule();
      }
    }
  }

  function schedule() {
    if (timer !== null) return;
    timer = setTimeout(() => {
      timer = null;
      refresh();
    }, THROTTLE_MS);
  }

  function concernsThisPage(event) {
    if (!runId || event.type === "reset") return true;
    try {
      const data = JSON.parse(event.data);
      if (Array.isArray(data.runs)) {
        // A big batch is announced without its run ids: it may concern this run.
        return data.runs.includes(runId) || (data.runs.length === 0 && data.run_count > 0);
      }
      return data.run_id === runId;
    } catch (error) {
      return true;
    }
  }

  function listen() {
    if (!("EventSource" in window) || !document.querySelector("[data-live]")) return;
    const source = new EventSource("/ui/events");
    source.onopen = () => showConnection("live", true);
    source.onerror = () => showConnection("reconnecting…", false);
    for (const kind of EVENT_KINDS) {
      source.addEventListener(kind, (event) => {
        if (concernsThisPage(event)) schedule();
      });
    }
  }

  function formPayload(form) {
    const payload = {};
    for (const [name, value] of new FormData(form)) {
      if (typeof value !== "string" || value.trim() === "") continue;
      const field = form.elements.namedItem(name);
      payload[name] = field && field.type === "number" ? Number(value) : value.trim();
    }
    return payload;
  }

  function problemText(answer, response) {
    if (answer && typeof answer.detail === "string") {
      const extra = Array.isArray(answer.extra)
        ? answer.extra.map((item) => item.message || "").filter(Boolean).join("; ")
        : "";
      return extra ? `${answer.detail}: ${extra}` : answer.detail;
    }
    return `${response.status} ${response.statusText}`;
  }

  document.addEventListener("submit", async (event) => {
    const form = event.target.closest("form[data-api]");
    if (!form) return;
    event.preventDefault();
    const result = form.querySelector("[data-result]");
    const button = form.querySelector("button[type=submit]");
    if (button) button.disabled = true;
    try {
      const response = await fetch(form.dataset.api, {
        method: "POST",
        credentials: "same-origin",
        headers: { "content-type": "application/json", accept: "application/json" },
        body: JSON.stringify(formPayload(form)),
      });
      const answer = await response.json().catch(() => null);
      if (result) {
        result.classList.toggle("ok", response.ok);
        result.classList.toggle("error", !response.ok);
        if (response.ok) {
          const id = answer && answer.id !== undefined ? ` #${answer.id}` : "";
          result.textContent = `${form.dataset.done || "Done"}${id}.`;
        } else {
          result.textContent = problemText(answer, response);
        }
      }
      if (response.ok) refresh();
    } catch (error) {
      if (result) {
        result.classList.add("error");
        result.textContent = `Request failed: ${error}`;
      }
    } finally {
      if (button) button.disabled = false;
    }
  });

  document.addEventListener("click", (event) => {
    const button = event.target.closest("button[data-label-step]");
    if (!button) return;
    const form = document.getElementById("label-form");
    if (!form) return;
    form.elements.namedItem("step").value = button.dataset.labelStep;
    form.elements.namedItem("agent").value = button.dataset.labelAgent;
    form.scrollIntoView({ behavior: "smooth", block: "center" });
    form.elements.namedItem("reason").focus({ preventScroll: true });
  });

  // A step and the phrase its evidence cites: the step's closed parts opened, the
  // phrase (else the step) scrolled to the middle of the window and flashed.
  function showStep(index, smooth) {
    const step = document.getElementById(`step-${index}`);
    if (!step) return false;
    const phrase = document.getElementById(`mark-${index}`);
    const target = phrase || step;
    for (let node = target.parentElement; node && node !== step.parentElement; node = node.parentElement) {
      if (node.tagName === "DETAILS") node.open = true;
    }
    for (const other of document.querySelectorAll("li.step.focused")) other.classList.remove("focused");
    step.classList.add("focused");
    target.scrollIntoView({ behavior: smooth ? "smooth" : "auto", block: "center" });
    if (phrase) {
      phrase.classList.remove("flash");
      void phrase.offsetWidth; // restart the animation
      phrase.classList.add("flash");
    }
    body.dataset.shownStep = String(index);
    return true;
  }

  document.addEventListener("click", (event) => {
    const link = event.target.closest("a[href^='#step-']");
    if (!link) return;
    const index = link.getAttribute("href").slice("#step-".length);
    if (showStep(index, true)) {
      event.preventDefault();
      history.replaceState(null, "", `#step-${index}`);
    }
  });

  // On a run page, the blamed step (or the step the address names) is in view at once.
  function showOnLoad() {
    const named = /^#step-(\d+)$/.exec(location.hash);
    if (named) {
      showStep(named[1], false);
      return;
    }
    const culprit = document.querySelector("li.step.culprit");
    if (culprit && !location.hash) showStep(culprit.dataset.index, false);
  }

  document.addEventListener("change", (event) => {
    const select = event.target.closest("select[data-autosubmit]");
    if (select && select.form) select.form.requestSubmit();
  });

  localTimes(document);
  showOnLoad();
  listen();
})();
