// The reports page: the server's experiment reports, each shown in a sandboxed frame.
"use strict";
(() => {
  const {api, el} = IR;
  const frame = document.getElementById("report-frame");
  const status = document.getElementById("status");
  let url = null;

  async function show(name, link) {
    try {
      const html = await api("/reports/" + encodeURIComponent(name), undefined, true);
      if (url) URL.revokeObjectURL(url);
      url = URL.createObjectURL(new Blob([html], {type: "text/html"}));
      frame.src = url;
      document.querySelectorAll("#report-list a").forEach((a) => a.classList.remove("current"));
      link.classList.add("current");
      status.textContent = name;
    } catch (e) { status.textContent = e.message; }
  }

  async function load() {
    try {
      const reports = await api("/reports");
      document.getElementById("report-list").replaceChildren(...reports.map((r) => {
        const link = el("a", {href: "#" + r.name, text: r.name});
        link.addEventListener("click", (ev) => { ev.preventDefault(); show(r.name, link); });
        return el("li", {}, link, el("span", {class: "muted", text: ` ${(r.bytes / 1024).toFixed(0)} KiB`}));
      }));
      status.textContent = reports.length ? `${reports.length} reports` : "no reports configured";
    } catch (e) { status.textContent = "cannot list reports: " + e.message; }
  }
  IR.keyInput.addEventListener("change", load);
  load();
})();
