// rl view: draws a run's curves with Plotly (served from the plotly wheel) and keeps them
// current by polling the JSON route; overlays 2-4 runs on the compare page.
"use strict";
const rlView = (() => {
  const layout = (title, unit) => ({
    title: { text: title, font: { size: 14 } },
    margin: { l: 50, r: 10, t: 32, b: 36 },
    height: 260,
    xaxis: { title: { text: "step" } },
    yaxis: { title: { text: unit } },
    legend: { orientation: "h", y: -0.25, font: { size: 10 } },
    shapes: [],
    annotations: [],
  });

  function panelDiv(charts, index) {
    let div = document.getElementById("panel-" + index);
    if (!div) {
      div = document.createElement("div");
      div.id = "panel-" + index;
      div.className = "panel";
      charts.appendChild(div);
    }
    return div;
  }

  function markerShapes(markers) {
    const shapes = markers.map((m) => ({
      type: "line", x0: m.step, x1: m.step, yref: "paper", y0: 0, y1: 1,
      line: { dash: "dot", width: 1, color: "#c0392b" },
    }));
    const notes = markers.map((m) => ({
      x: m.step, yref: "paper", y: 1, text: "resume", showarrow: false,
      font: { size: 9, color: "#c0392b" }, hovertext: m.text,
    }));
    return [shapes, notes];
  }

  function draw(charts, panels, markers) {
    const [shapes, notes] = markerShapes(markers || []);
    panels.forEach((panel, i) => {
      const div = panelDiv(charts, i);
      div.dataset.title = panel.title;
      const traces = panel.traces.map((t) => ({
        x: t.x, y: t.y, name: t.name, type: "scatter", mode: t.x.length > 80 ? "lines" : "lines+markers",
        marker: { size: 4 },
      }));
      const look = layout(panel.title, panel.unit);
      look.shapes = shapes;
      look.annotations = notes;
      if (!traces.length) {
        look.annotations = [{ text: "not logged", showarrow: false, xref: "paper", yref: "paper", x: 0.5, y: 0.5 }];
      }
      Plotly.react(div, traces, look, { displaylogo: false, responsive: true });
    });
  }

  function setText(id, text) {
    const el = document.getElementById(id);
    if (el) el.textContent = text;
  }

  function num(v) {
    return v === null || v === undefined ? "-" : typeof v === "number" && !Number.isInteger(v) ? v.toFixed(3) : String(v);
  }

  async function fetchJSON(url) {
    const response = await fetch(url, { credentials: "same-origin" });
    const data = await response.json();
    if (!response.ok) throw new Error(data.error || response.statusText);
    return data;
  }

  async function refreshLogs(rid) {
    const logs = await fetchJSON(`/api/run/${rid}/logs`);
    document.querySelectorAll("pre.log").forEach((pre) => {
      const lines = logs[pre.dataset.log];
      if (lines) pre.textContent = lines.join("\n");
    });
  }

  function runPage(charts) {
    const rid = charts.dataset.run;
    const every = Number(charts.dataset.poll) || 2000;
    let key = "";
    async function tick() {
      try {
        const data = await fetchJSON(`/api/run/${rid}/curves?key=${encodeURIComponent(key)}`);
        if (!data.unchanged) {
          key = data.key;
          const any = data.panels.some((p) => p.traces.length);
          document.getElementById("no-metrics").hidden = any;
          draw(charts, data.panels, data.markers);
          const note = document.getElementById("sampled-note");
          note.hidden = data.sampled <= 1;
          note.textContent = `A long run: its curves are drawn from one record in ${Math.round(data.sampled)} (runs of consecutive records, the last 400 whole).`;
          setText("run-step", num(data.summary.step));
          setText("run-reward", num(data.summary.last5_reward));
          setText("run-status", data.summary.status);
          const waits = document.getElementById("run-waits");
          if (waits) waits.innerHTML = "";
          (data.waits || []).forEach((w) => {
            const li = document.createElement("li");
            li.textContent = w;
            waits.appendChild(li);
          });
          charts.dataset.key = key;
          refreshLogs(rid);
        }
      } catch (err) {
        setText("no-metrics", "could not refresh: " + err.message);
        document.getElementById("no-metrics").hidden = false;
      }
      setTimeout(tick, every);
    }
    tick();
  }

  function comparePage(charts) {
    const ids = charts.dataset.runs.split(",");
    const names = charts.dataset.names.split("\n");
    const every = Number(charts.dataset.poll) || 2000;
    async function tick() {
      try {
        const all = await Promise.all(ids.map((id) => fetchJSON(`/api/run/${id}/curves`)));
        const panels = all[0].panels.map((panel, i) => ({
          title: panel.title, unit: panel.unit,
          traces: all.flatMap((data, r) => data.panels[i].traces.map((t) => ({ ...t, name: `${names[r]}: ${t.name}` }))),
        }));
        draw(charts, panels, []);
      } catch (err) {
        charts.textContent = "could not load the curves: " + err.message;
      }
      setTimeout(tick, every * 2);
    }
    tick();
  }

  function compareSubmit(form) {
    const picked = [...form.querySelectorAll("input[name=pick]:checked")].map((b) => b.value);
    if (picked.length < 2 || picked.length > 4) {
      alert("tick 2 to 4 runs to compare");
      return false;
    }
    window.location.href = "/compare?runs=" + picked.join(",");
    return false;
  }

  return { runPage, comparePage, compareSubmit };
})();
