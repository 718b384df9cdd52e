// The search page: pick index + pipeline, ask (or continue a conversation), see ranked
// passages with highlighted query terms, every stage's score and rank change, the trace as
// a timeline, and an answer with clickable citations.
"use strict";
(() => {
  const {api, el} = IR;
  const $ = (id) => document.getElementById(id);
  const STOP = new Set("a an and are as at be by do does for from has have how in is it its of on or over that the this to was what when where which who why with".split(" "));
  let pipelines = [];

  function setStatus(text, cls) { $("status").textContent = text; $("status").className = cls || ""; }

  async function load() {
    try {
      const info = await api("/pipelines");
      $("index").replaceChildren(...info.indexes.map((i) =>
        el("option", {value: i.name, text: `${i.name} (${i.documents} docs)`})));
      pipelines = info.pipelines.filter((p) => p.kind === "search" && p.allowed);
      $("pipeline").replaceChildren(...pipelines.map((p) =>
        el("option", {value: p.name, text: p.name + (p.answers ? " (answers)" : ""), title: p.description})));
      $("pipeline").value = info.default_pipeline;
      $("top-k").max = info.limits.max_top_k;
      updateAnswerButton();
      setStatus(`${pipelines.length} pipelines ready`);
    } catch (e) { setStatus("cannot load pipelines: " + e.message + " (is the API key set?)", "error"); }
  }

  function updateAnswerButton() {
    const p = pipelines.find((x) => x.name === $("pipeline").value);
    $("answer-btn").disabled = !(p && p.answers);
  }

  function parseTurns(text) {
    const turns = [];
    for (const line of text.split("\n")) {
      const m = line.match(/^\s*([QA]):\s*(.*)$/i);
      if (!m) continue;
      if (m[1].toUpperCase() === "Q") turns.push({question: m[2], answer: ""});
      else if (turns.length) turns[turns.length - 1].answer = m[2];
    }
    return turns;
  }

  function request() {
    const body = {index: $("index").value, pipeline: $("pipeline").value,
                  top_k: Number($("top-k").value) || 10};
    const question = $("question").value;
    if ($("filter").value.trim()) body.filter = $("filter").value.trim();
    if ($("conv-mode").checked) body.conversation = {turns: parseTurns($("turns").value), question};
    else body.query = question;
    return body;
  }

  function terms(text) {
    return [...new Set(text.toLowerCase().match(/[\p{L}\p{N}]+/gu) || [])]
      .filter((t) => t.length > 2 && !STOP.has(t));
  }

  // Text with the query terms wrapped in <mark>, built from text nodes (never innerHTML).
  function highlighted(text, words) {
    const out = document.createDocumentFragment();
    if (!words.length) { out.append(text); return out; }
    const esc = words.map((w) => w.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"));
    const re = new RegExp(`(?<![\\p{L}\\p{N}])(${esc.join("|")})(?![\\p{L}\\p{N}])`, "giu");
    let last = 0;
    for (const m of text.matchAll(re)) {
      out.append(text.slice(last, m.index), el("mark", {text: m[0]}));
      last = m.index + m[0].length;
    }
    out.append(text.slice(last));
    return out;
  }

  function stageTable(r, order) {
    const rows = [];
    let prev = null;
    for (const stage of order) {
      if (!(stage in r.stage_scores)) continue;
      const rank = r.stage_ranks[stage];
      let change = "";
      if (prev !== null && rank !== undefined) {
        const d = prev - rank;
        change = d > 0 ? `▲${d}` : d < 0 ? `▼${-d}` : "=";
      }
      rows.push(el("tr", {}, el("td", {text: stage}), el("td", {text: r.stage_scores[stage].toFixed(4)}),
                   el("td", {text: rank === undefined ? "" : `#${rank}`}),
                   el("td", {class: change.startsWith("▲") ? "up" : change.startsWith("▼") ? "down" : "", text: change})));
      if (rank !== undefined) prev = rank;
    }
    return el("table", {class: "stages"}, el("tr", {}, ...["stage", "score", "rank", "change"].map((h) => el("th", {text: h}))), ...rows);
  }

  function renderResults(res) {
    const words = terms(res.query + " " + res.searched);
    const order = res.stages.map((s) => s.stage);
    if (res.results.some((r) => "input" in r.stage_scores)) order.unshift("input");
    $("searched").textContent = res.searched !== res.query ? `searched: “${res.searched}”` : "";
    $("results").replaceChildren(...res.results.map((r) => el("li", {class: "result", id: "doc-" + r.doc_id, "data-doc": r.doc_id},
      el("div", {class: "head"}, el("span", {class: "rank", text: `#${r.rank}`}), el("span", {class: "doc-id", text: r.source || r.doc_id, title: r.doc_id}),
         el("strong", {}, highlighted(r.title || "", words)), el("span", {class: "score", text: r.score.toFixed(4)})),
      el("p", {class: "text"}, highlighted(r.text, words)),
      el("details", {}, el("summary", {text: "stage scores"}), stageTable(r, order)))));
    $("results-box").hidden = false;
  }

  // Stages as a timeline: top-level stages one after another, a stage's sub-stages
  // (path ids below it, e.g. rrf/bm25 under rrf) one after another from its start.
  function renderTrace(res) {
    const total = Math.max(res.seconds, ...res.stages.map((s) => s.seconds), 1e-6);
    const byId = Object.fromEntries(res.stages.map((s) => [s.stage, s]));
    const parentOf = (id) => {
      let p = id;
      while (p.includes("/")) { p = p.slice(0, p.lastIndexOf("/")); if (p in byId) return p; }
      return null;
    };
    const children = {}, tops = [];
    for (const s of res.stages) {
      const p = parentOf(s.stage);
      if (p) (children[p] = children[p] || []).push(s); else tops.push(s);
    }
    const rows = [];
    const place = (s, begin, depth) => {
      const bar = el("div", {class: "bar" + (s.fallbacks ? " fallback" : "")});
      bar.style.marginLeft = (100 * begin / total).toFixed(2) + "%";
      bar.style.width = Math.max(0.5, 100 * s.seconds / total).toFixed(2) + "%";
      const extra = [s.llm_calls ? `${s.llm_calls} LLM calls` : "", s.cache_hits ? `${s.cache_hits} cache hits` : "",
                     s.fallbacks ? `${s.fallbacks} fallbacks` : ""].filter(Boolean).join(", ");
      const name = el("div", {class: "name", text: s.stage});
      name.style.paddingLeft = depth + "em";
      rows.push(el("div", {class: "trace-row"}, name, el("div", {class: "track"}, bar),
                   el("div", {class: "secs", text: `${(1000 * s.seconds).toFixed(1)} ms ${extra}`})));
      let at = begin;
      for (const c of children[s.stage] || []) { place(c, at, depth + 1); at += c.seconds; }
    };
    let cursor = 0;
    for (const s of tops) { place(s, cursor, 0); cursor += s.seconds; }
    $("timeline").replaceChildren(...rows, el("p", {class: "muted",
      text: `total ${(1000 * res.seconds).toFixed(1)} ms in the pipeline · ${res.fallbacks} fallbacks · request ${res.request_id}`}));
    $("trace-box").hidden = false;
  }

  function showCitation(n, docId) {
    const target = document.getElementById("doc-" + docId) || document.getElementById("cite-" + n);
    document.querySelectorAll(".flash").forEach((x) => x.classList.remove("flash"));
    if (target) { target.classList.add("flash"); target.scrollIntoView({block: "center"}); }
  }

  function renderAnswer(res) {
    const a = res.answer;
    const byN = Object.fromEntries(a.citations.map((c) => [c.n, c]));
    const frag = document.createDocumentFragment();
    let last = 0;
    for (const m of a.text.matchAll(/\[(\d+)\]/g)) {
      frag.append(a.text.slice(last, m.index));
      const c = byN[Number(m[1])];
      if (c) {
        const link = el("a", {href: "#cite-" + c.n, class: "cite", text: m[0], "data-n": c.n});
        link.addEventListener("click", (ev) => { ev.preventDefault(); showCitation(c.n, c.doc_id); });
        frag.append(link);
      } else frag.append(m[0]);
      last = m.index + m[0].length;
    }
    frag.append(a.text.slice(last));
    $("answer-text").replaceChildren(frag);
    $("answer-fallback").hidden = !a.fallback;
    $("answer-fallback").textContent = a.fallback ? `fallback: ${a.fallback}` : "";
    $("citations").replaceChildren(...a.citations.map((c) => el("li", {id: "cite-" + c.n, value: c.n},
      el("span", {class: "doc-id", text: c.source || c.doc_id, title: c.doc_id}), " ",
      el("strong", {text: c.title || ""}), " ",
      el("span", {class: "support", text: (c.support || c.text).slice(0, 300)}))),
      ...(a.unsupported || []).map((s) => el("li", {class: "unsupported", text: "unsupported: " + s})));
    $("answer").hidden = false;
  }

  async function run(endpoint) {
    setStatus("running…");
    $("answer").hidden = true;
    try {
      const res = await api(endpoint, request());
      renderResults(res);
      renderTrace(res);
      if (res.answer) renderAnswer(res);
      setStatus(`${res.results.length} results from ${res.pipeline} in ${(1000 * res.seconds).toFixed(0)} ms`, "ok");
    } catch (e) { setStatus(e.message, "error"); }
  }

  $("search-form").addEventListener("submit", (ev) => { ev.preventDefault(); run("/search"); });
  $("answer-btn").addEventListener("click", () => { if ($("search-form").reportValidity()) run("/answer"); });
  $("pipeline").addEventListener("change", updateAnswerButton);
  $("conv-mode").addEventListener("change", () => { $("turns-box").hidden = !$("conv-mode").checked; });
  IR.keyInput.addEventListener("change", load);
  load();
})();
