// The lagsched page: fetches api/status and api/history (same origin, Airflow's login cookie) and
// renders tables and hand-written SVG charts. No library, no CDN: the machines reach no internet.
// Every value from the server goes into the DOM as text (textContent), never as HTML.
(() => {
  "use strict";

  const REFRESH_MS = 10000;
  const MAX_CHARTS = 6;
  const SVG = "http://www.w3.org/2000/svg";
  const $ = (id) => document.getElementById(id);
  const query = new URLSearchParams(location.search);
  let cluster = query.get("cluster") || "";
  let chartTopic = query.get("topic") || "";
  let timer = null;
  let inFlight = false;

  // Same origin as Airflow's UI, so its colour mode is readable; else follow the system.
  function applyTheme() {
    let mode = null;
    try { mode = localStorage.getItem("chakra-ui-color-mode"); } catch (e) { mode = null; }
    if (mode !== "dark" && mode !== "light") {
      mode = window.matchMedia && matchMedia("(prefers-color-scheme: dark)").matches ? "dark" : "light";
    }
    document.documentElement.classList.toggle("dark", mode === "dark");
  }

  function el(tag, props, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(props || {})) {
      if (v === undefined || v === null) continue;
      if (k === "class") node.className = v;
      else if (k === "text") node.textContent = v;
      else node.setAttribute(k, v);
    }
    for (const c of children) node.append(c instanceof Node ? c : document.createTextNode(String(c)));
    return node;
  }

  function svg(tag, attrs, text) {
    const node = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
    if (text !== undefined) node.textContent = text;
    return node;
  }

  const fmtInt = (n) => (n === null || n === undefined ? "–" : Number(n).toLocaleString("en-US"));
  function fmtSecs(s) {
    if (s === null || s === undefined) return "–";
    if (s < 60) return `${s.toFixed(1)} s`;
    if (s < 3600) return `${(s / 60).toFixed(1)} min`;
    return `${(s / 3600).toFixed(1)} h`;
  }
  const fmtTime = (iso) => (iso ? new Date(iso).toLocaleTimeString() : "–");
  const fmtDateTime = (iso) => (iso ? new Date(iso).toLocaleString() : "–");
  function fmtAgo(iso) {
    if (!iso) return "never";
    const s = (Date.now() - new Date(iso).getTime()) / 1000;
    return s < 1 ? "just now" : `${fmtSecs(s)} ago`;
  }
  const hhmm = (t) => new Date(t * 1000).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });

  async function getJSON(url) {
    const r = await fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } });
    if (!r.ok) {
      let detail = "";
      try { detail = (await r.json()).detail || ""; } catch (e) { detail = ""; }
      if (r.status === 401 || r.status === 403) detail = `${detail} (log in to Airflow again)`;
      throw new Error(`${url.split("?")[0]}: HTTP ${r.status} ${detail}`);
    }
    return r.json();
  }

  function fillBody(table, rows, empty, columns) {
    const body = $(table).tBodies[0];
    body.replaceChildren();
    if (!rows.length) {
      body.append(el("tr", {}, el("td", { class: "empty", colspan: String(columns), text: empty })));
      return;
    }
    for (const r of rows) body.append(r);
  }

  const badge = (state) => el("span", { class: `badge ${state}`, text: state });
  const td = (text, cls, title) => el("td", { class: cls, text: text === undefined ? "" : String(text), title });

  function setQuery() {
    const q = new URLSearchParams();
    if (cluster) q.set("cluster", cluster);
    if (chartTopic) q.set("topic", chartTopic);
    const s = q.toString();
    history.replaceState(null, "", s ? `?${s}` : location.pathname);
  }

  function renderClusters(all, current) {
    const sel = $("cluster");
    const names = all.includes(current) ? all : [current, ...all];
    if ([...sel.options].map((o) => o.value).join("\n") !== names.join("\n")) {
      sel.replaceChildren(...names.map((n) => el("option", { value: n, text: n })));
    }
    sel.value = current;
  }

  function renderChartSelect(st) {
    const sel = $("chart-topic");
    const names = ["", ...st.topics.map((t) => t.name)];
    if ([...sel.options].map((o) => o.value).join("\n") !== names.join("\n")) {
      sel.replaceChildren(
        el("option", { value: "", text: `top ${MAX_CHARTS} by lag` }),
        ...st.topics.map((t) => el("option", { value: t.name, text: t.name })),
      );
    }
    if (chartTopic && !names.includes(chartTopic)) chartTopic = "";
    sel.value = chartTopic;
  }

  function renderSummary(st) {
    const totalLag = st.topics.reduce((a, t) => a + (t.lag || 0), 0);
    const worst = st.topics.reduce((a, t) => Math.max(a, t.time_lag_s || 0), 0);
    const cards = [
      ["topics", fmtInt(st.topics.length)],
      ["total lag", fmtInt(totalLag)],
      ["worst time lag", fmtSecs(worst)],
      ["live slots", fmtInt(st.live_slots)],
      ["stalled / stopped", fmtInt(st.stuck.length)],
      ["anomalies", fmtInt(st.anomalies.length)],
      ["dead letters", fmtInt(Object.values(st.dead_letters || {}).reduce((a, n) => a + n, 0))],
      ["late records", fmtInt(Object.values(st.late_records || {}).reduce((a, n) => a + n, 0))],
    ];
    $("summary").replaceChildren(
      ...cards.map(([k, v]) => el("div", { class: "card", "data-key": k }, el("div", { class: "v", text: v }), el("div", { class: "k", text: k }))),
    );
  }

  function slotLabel(st, slotId) {
    const s = st.slots.find((x) => x.slot_id === slotId);
    return s && s.name ? s.name : slotId.slice(0, 8);
  }

  function renderTopics(st) {
    const rows = st.topics.map((t) => {
      const ov = t.override ? `${t.override.linker_workers} until ${fmtTime(t.override.expires_at)}` : "";
      return el(
        "tr",
        { "data-topic": t.name },
        td(t.name),
        td(fmtInt(t.partitions), "num"),
        td(fmtInt(t.lag), "num", t.held_by_transaction ? `${fmtInt(t.held_by_transaction)} more offsets held by an open transaction for ${fmtSecs(t.transaction_open_s)}` : undefined),
        td(fmtInt(t.lost), "num"),
        td(fmtSecs(t.time_lag_s), "num"),
        td(t.ingress_rate.toFixed(1), "num"),
        td(t.consumption_rate.toFixed(1), "num"),
        td(fmtInt(t.linker_workers), "num"),
        td(t.owners.map((o) => slotLabel(st, o)).join(", ") || "none", undefined, t.owners.join(", ")),
        el("td", { title: t.state_reason || undefined }, badge(t.state)),
        td(ov, undefined, t.override ? t.override.reason : undefined),
        // Complete up to: its table's hourly events wait behind this (docs/completeness.md).
        el("td", { class: "watermark", title: t.watermark || "not known yet: a partition neither committed a record nor was read caught up", text: t.watermark ? fmtAgo(t.watermark) : "-" }),
        // Every figure of the row is as old as its measurement: say how old (the monitor runs every minute).
        el("td", { class: "age", title: t.measured_at || "never measured", text: fmtAgo(t.measured_at) }),
      );
    });
    fillBody("topics", rows, "no enabled topic in this cluster (is the topic sync DAG running?)", 13);
  }

  function renderStuck(st) {
    const rows = st.stuck.map((s) => el("tr", { "data-topic": s.topic }, td(s.topic), el("td", {}, badge(s.state)), td(s.reason)));
    // An open transaction holds every record behind it from read-committed consumers: more workers will not help.
    for (const o of st.open_transactions || []) {
      rows.push(el("tr", { "data-topic": o.topic, "data-held": String(o.held_by_transaction) }, td(o.topic), el("td", {}, badge("held")),
        td(`${fmtInt(o.held_by_transaction)} offsets behind an open transaction's last stable offset for ${fmtSecs(o.open_s)} or more: nothing past it is readable until its producer commits or aborts`)));
    }
    fillBody("stuck", rows, "none: every measured pipeline is moving", 3);
  }

  function renderOverrides(st) {
    const rows = st.overrides.map((o) =>
      el("tr", { "data-topic": o.topic }, td(o.topic), td(o.linker_workers, "num"), td(fmtDateTime(o.expires_at)), td(o.created_by || ""), td(o.reason || "")),
    );
    fillBody("overrides", rows, "no active override", 5);
  }

  function renderSlots(st) {
    $("slot-note").textContent = `live = heartbeat within ${st.slot_timeout_s} s; ${st.live_slots} live`;
    const rows = st.slots.map((s) => {
      const claims = el("td", {});
      for (const c of s.claims) {
        const pending = c.pending ? `, batch ${c.pending[0]}–${c.pending[1]} in flight` : "";
        claims.append(
          el("span", { class: "claim", "data-claim": `${c.topic}[${c.partition}]` },
            `${c.topic}[${c.partition}] @${c.committed_offset === null ? "none" : fmtInt(c.committed_offset)} until ${fmtTime(c.lease_expires_at)}${pending}`),
        );
      }
      if (!s.claims.length) claims.append(el("span", { class: "muted", text: "no claims in this cluster" }));
      return el("tr", { "data-slot": s.slot_id }, td(s.name || s.slot_id, undefined, s.slot_id), el("td", {}, badge(s.live ? "live" : "dead")),
        td(s.host || "–", "host"), td(fmtAgo(s.last_seen), undefined, s.last_seen || ""), td(s.claims.length, "num"), claims);
    });
    fillBody("slots", rows, "no live slot and no claimed partition (is the consume DAG running?)", 6);
  }

  function renderDecisions(st) {
    const rows = st.decisions.map((d) =>
      el("tr", { "data-decision": String(d.decision_id) }, td(fmtDateTime(d.decided_at)), td(d.topic), td(`${d.previous_linker_workers} → ${d.linker_workers}`, "num"), td(d.rule), td(d.reason)),
    );
    fillBody("decisions", rows, "no scaling decision recorded yet", 5);
  }

  function renderGaps(st) {
    const rows = st.retention_gaps.map((g) =>
      el("tr", {}, td(g.topic), td(g.partition, "num"), td(`${fmtInt(g.from_offset)}–${fmtInt(g.to_offset)}`), td(fmtInt(g.records), "num"), td(fmtDateTime(g.detected_at))),
    );
    fillBody("gaps", rows, "no records lost to retention", 5);
  }

  function renderAnomalies(st) {
    const rows = [
      ...st.anomalies.map((a) => el("tr", { "data-kind": a.kind }, td(a.kind), td(a.topic), td(a.partition === null ? "" : a.partition, "num"), td(a.detail),
        el("td", { class: "age", title: a.seen_at || "", text: a.seen_at ? fmtAgo(a.seen_at) : "now" }))),
      ...Object.entries(st.dead_letters || {}).map(([topic, n]) => el("tr", { "data-kind": "dead_letters" }, td("dead letters"), td(topic), td(""),
        td(`${fmtInt(n)} record(s) could not be decoded into the topic's typed table: see the dead-letter table`), td(""))),
      ...Object.entries(st.late_records || {}).map(([table, n]) => el("tr", { "data-kind": "late_records" }, td("late records"), td(table), td(""),
        td(`${fmtInt(n)} record(s) landed in hours already complete: their hours are restated (docs/completeness.md)`), td(""))),
      ...st.notes.map((n) => el("tr", { "data-kind": "note" }, td("note"), td(""), td(""), td(n), td(""))),
    ];
    fillBody("anomalies", rows, "none", 5);
  }

  // -- charts -------------------------------------------------------------------------------------

  function showTip(evt, lines) {
    const tip = $("tip");
    tip.replaceChildren(...lines.map((l, i) => el("div", { text: l, style: i === 0 ? "font-weight:600" : undefined })));
    tip.hidden = false;
    const x = Math.min(evt.clientX + 14, window.innerWidth - tip.offsetWidth - 8);
    const y = Math.min(evt.clientY + 14, window.innerHeight - tip.offsetHeight - 8);
    tip.style.left = `${Math.max(4, x)}px`;
    tip.style.top = `${Math.max(4, y)}px`;
  }
  const hideTip = () => { $("tip").hidden = true; };

  function workersAt(steps, t) {
    let w = null;
    for (const s of steps) if (s.t <= t) w = s; else break;
    return w;
  }

  function decisionText(d) {
    return [`${fmtDateTime(d.decided_at)}: linker_workers ${d.previous_linker_workers} → ${d.linker_workers}`, `rule ${d.rule} (${d.policy})`, d.reason];
  }

  // One chart: `key` of each history point (left axis), linker_workers as a step line (right axis),
  // a dot per decision whose <title> and tooltip give its reason.
  // `axis`: "count" (records: 1-2-5 steps) or "duration" (seconds: 15 s, 1 min, 5 min ... steps).
  function drawChart(h, key, cls, label, fmt, axis) {
    const W = 560, H = 170, m = { l: 56, r: 30, t: 10, b: 22 };
    const pts = h.points, steps = h.linker_workers_steps || [], decisions = (h.decisions || []).slice().sort((a, b) => a.t - b.t);
    const root = svg("svg", { viewBox: `0 0 ${W} ${H}`, class: "chart", "data-series": key, role: "img", "aria-label": `${label} of ${h.topic}` });
    if (!pts.length) {
      root.append(svg("text", { x: W / 2, y: H / 2, "text-anchor": "middle" }, "no measurements stored yet"));
      return root;
    }
    const ts = [...pts.map((p) => p.t), ...steps.map((s) => s.t)];
    let x0 = Math.min(...ts), x1 = Math.max(...ts);
    if (x1 - x0 < 1) { x0 -= 30; x1 += 30; }
    // Round ticks (ticks.js): the top of the axis is the first round value at or above the data.
    const top = Math.max(0, ...pts.map((p) => p[key]));
    const ticks = axis === "duration" ? lagschedTicks.timeTicks(top, 4) : lagschedTicks.valueTicks(top, 4, 1);
    const labels = axis === "duration" ? lagschedTicks.formatTimeTicks(ticks) : ticks.map(fmtInt);
    const vmax = ticks[ticks.length - 1];
    const wmax = Math.max(1, ...steps.map((s) => s.linker_workers)) + 1;
    const X = (t) => m.l + ((t - x0) / (x1 - x0)) * (W - m.l - m.r);
    const Y = (v) => H - m.b - (v / vmax) * (H - m.t - m.b);
    const YW = (w) => H - m.b - (w / wmax) * (H - m.t - m.b);

    ticks.forEach((v, i) => {
      root.append(svg("line", { class: "grid", x1: m.l, x2: W - m.r, y1: Y(v), y2: Y(v) }));
      root.append(svg("text", { class: "tick", x: m.l - 4, y: Y(v) + 3, "text-anchor": "end", "data-value": String(v) }, labels[i]));
    });
    const wstep = Math.max(1, Math.ceil(wmax / 4));
    for (let w = 0; w <= wmax; w += wstep) {
      root.append(svg("text", { x: W - m.r + 4, y: YW(w) + 3 }, String(w)));
    }
    for (let i = 0; i <= 3; i++) {
      const t = x0 + ((x1 - x0) * i) / 3;
      root.append(svg("text", { x: X(t), y: H - 6, "text-anchor": i === 0 ? "start" : i === 3 ? "end" : "middle" }, hhmm(t)));
    }
    root.append(svg("line", { class: "axis", x1: m.l, x2: W - m.r, y1: H - m.b, y2: H - m.b }));
    root.append(svg("path", { class: cls, d: pts.map((p, i) => `${i ? "L" : "M"}${X(p.t).toFixed(1)},${Y(p[key]).toFixed(1)}`).join("") }));
    if (steps.length) {
      let d = `M${X(steps[0].t).toFixed(1)},${YW(steps[0].linker_workers).toFixed(1)}`;
      for (const s of steps.slice(1)) d += `H${X(s.t).toFixed(1)}V${YW(s.linker_workers).toFixed(1)}`;
      root.append(svg("path", { class: "workers", d }));
    }
    const cursor = svg("line", { class: "cursor", y1: m.t, y2: H - m.b, visibility: "hidden" });
    root.append(cursor);
    const overlay = svg("rect", { x: m.l, y: m.t, width: W - m.l - m.r, height: H - m.t - m.b, fill: "transparent" });
    root.append(overlay);
    for (const d of decisions) {
      if (d.t < x0 || d.t > x1) continue;
      const c = svg("circle", { class: "decision", cx: X(d.t), cy: YW(d.linker_workers), r: 5, "data-decision": String(d.decision_id) });
      c.append(svg("title", {}, decisionText(d).join("\n")));
      c.addEventListener("mousemove", (e) => showTip(e, decisionText(d)));
      c.addEventListener("mouseleave", hideTip);
      root.append(c);
    }
    overlay.addEventListener("mousemove", (e) => {
      const box = root.getBoundingClientRect();
      const t = x0 + (((e.clientX - box.left) * (W / box.width) - m.l) / (W - m.l - m.r)) * (x1 - x0);
      let best = pts[0];
      for (const p of pts) if (Math.abs(p.t - t) < Math.abs(best.t - t)) best = p;
      cursor.setAttribute("x1", X(best.t)); cursor.setAttribute("x2", X(best.t)); cursor.setAttribute("visibility", "visible");
      const w = workersAt(steps, best.t);
      const last = decisions.filter((d) => d.t <= best.t).pop();
      const lines = [fmtDateTime(best.at), `${label}: ${fmt(best[key])}`, `linker_workers: ${w ? w.linker_workers : "?"}`];
      if (best.state !== "ok") lines.push(`state: ${best.state}`);
      if (last) lines.push(`last decision (${last.rule}): ${last.reason}`);
      showTip(e, lines);
    });
    overlay.addEventListener("mouseleave", () => { cursor.setAttribute("visibility", "hidden"); hideTip(); });
    return root;
  }

  async function renderCharts(st) {
    const chosen = chartTopic
      ? st.topics.filter((t) => t.name === chartTopic)
      : st.topics.slice().sort((a, b) => (b.lag || 0) - (a.lag || 0) || a.name.localeCompare(b.name)).slice(0, MAX_CHARTS);
    const histories = await Promise.all(
      chosen.map((t) => getJSON(`api/history?cluster=${encodeURIComponent(st.cluster)}&topic=${encodeURIComponent(t.name)}`)),
    );
    const cards = histories.map((h) => {
      const legend = el("div", { class: "legend" },
        el("i", { style: "background:var(--accent)" }), "lag",
        el("i", { style: "background:var(--time)" }), "time lag",
        el("i", { style: "background:var(--workers)" }), `linker_workers (now ${h.linker_workers ?? "?"})`);
      return el("div", { class: "chart-card", "data-topic": h.topic },
        el("h3", { text: h.topic }), legend,
        drawChart(h, "lag", "lag", "lag", fmtInt, "count"),
        drawChart(h, "time_lag_s", "timelag", "time lag", fmtSecs, "duration"));
    });
    if (!cards.length) cards.push(el("p", { class: "muted", text: "no topic to chart" }));
    $("charts").replaceChildren(...cards);
  }

  async function refresh() {
    if (inFlight) return;
    inFlight = true;
    try {
      const st = await getJSON(`api/status${cluster ? `?cluster=${encodeURIComponent(cluster)}` : ""}`);
      cluster = st.cluster;
      renderClusters(st.clusters, st.cluster);
      renderChartSelect(st);
      renderSummary(st);
      renderTopics(st);
      renderStuck(st);
      renderOverrides(st);
      renderSlots(st);
      renderDecisions(st);
      renderGaps(st);
      renderAnomalies(st);
      await renderCharts(st);
      $("updated").textContent = `updated ${new Date().toLocaleTimeString()}`;
      $("error").hidden = true;
      document.body.dataset.loaded = "1";
    } catch (e) {
      $("error").textContent = String((e && e.message) || e);
      $("error").hidden = false;
    } finally {
      inFlight = false;
    }
  }

  function schedule() {
    if (timer) clearInterval(timer);
    timer = $("auto").checked ? setInterval(refresh, REFRESH_MS) : null;
  }

  $("cluster").addEventListener("change", (e) => { cluster = e.target.value; chartTopic = ""; setQuery(); refresh(); });
  $("chart-topic").addEventListener("change", (e) => { chartTopic = e.target.value; setQuery(); refresh(); });
  $("auto").addEventListener("change", schedule);
  window.addEventListener("storage", applyTheme);
  applyTheme();
  refresh();
  schedule();
})();
