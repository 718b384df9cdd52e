// Shared by the pages: the API key (from #key=... once, then localStorage) and fetch.
"use strict";
const IR = (() => {
  const keyInput = document.getElementById("key");
  const fromHash = new URLSearchParams(location.hash.slice(1)).get("key");
  if (fromHash) {
    localStorage.setItem("intentrank-key", fromHash);
    history.replaceState(null, "", location.pathname);
  }
  keyInput.value = localStorage.getItem("intentrank-key") || "";
  keyInput.addEventListener("change", () => localStorage.setItem("intentrank-key", keyInput.value));

  async function api(path, body, raw) {
    const opts = {method: body === undefined ? "GET" : "POST", headers: {}};
    if (keyInput.value) opts.headers["Authorization"] = "Bearer " + keyInput.value;
    if (body !== undefined) {
      opts.headers["Content-Type"] = "application/json";
      opts.body = JSON.stringify(body);
    }
    const res = await fetch(path, opts);
    if (!res.ok) {
      let msg = res.status + " " + res.statusText;
      try { msg = res.status + ": " + (await res.json()).error; } catch (e) { /* not JSON */ }
      if (res.status === 503) msg += " (server busy; retry in " + (res.headers.get("Retry-After") || "a few") + " s)";
      throw new Error(msg);
    }
    return raw ? res.text() : res.json();
  }

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") node.className = v; else if (k === "text") node.textContent = v;
      else node.setAttribute(k, v);
    }
    for (const c of children) node.append(c);
    return node;
  }
  return {api, el, keyInput};
})();
