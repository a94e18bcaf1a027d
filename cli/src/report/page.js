"use strict";
(function () {
  const D = JSON.parse(document.getElementById("data").textContent);
  const canvas = document.getElementById("canvas");
  const tip = document.getElementById("tip");
  const ctx = canvas.getContext("2d");
  const NONE = 65535, LANE = 150, GAP = 22, TOP = 8, LEFT = 78, RIGHT = 12;
  const EPOCH_H = 18, STEP_H = 24, AXIS_H = 28;

  function bytesOf(b64) {
    const s = atob(b64), out = new Uint8Array(s.length);
    for (let i = 0; i < s.length; i++) out[i] = s.charCodeAt(i);
    return out.buffer;
  }

  // Each lane: a min/max pyramid built from the embedded finest level.
  const lanes = D.lanes.map(function (lane) {
    const pairs = new Uint16Array(bytesOf(lane.data));
    let lo = new Uint16Array(lane.n), hi = new Uint16Array(lane.n);
    for (let i = 0; i < lane.n; i++) { lo[i] = pairs[2 * i]; hi[i] = pairs[2 * i + 1]; }
    const levels = [{ width: lane.width, lo: lo, hi: hi }];
    while (lo.length > 64) {
      const n = Math.ceil(lo.length / 2), nlo = new Uint16Array(n), nhi = new Uint16Array(n);
      for (let i = 0; i < n; i++) {
        const a = 2 * i, b = Math.min(2 * i + 1, lo.length - 1);
        nlo[i] = Math.min(lo[a], lo[b]);
        const ha = hi[a] === NONE ? -1 : hi[a], hb = hi[b] === NONE ? -1 : hi[b];
        nhi[i] = Math.max(ha, hb) < 0 ? NONE : Math.max(ha, hb);
      }
      lo = nlo; hi = nhi;
      levels.push({ width: levels[levels.length - 1].width * 2, lo: lo, hi: hi });
    }
    // The axis starts at zero unless everything sits in the upper half: then it starts
    // just under the lowest value, so the swings of a busy device show.
    const top = Math.max(lane.top, 1);
    let low = Infinity;
    for (let i = 0; i < lo.length; i++) if (lo[i] !== NONE && lo[i] < low) low = lo[i];
    low = low === Infinity ? 0 : low * lane.scale;
    const ymin = low > top / 2 ? Math.max(0, low - 0.15 * (top - low) - top * 0.001) : 0;
    const high = lane.total && lane.total < top * 1.6 && ymin === 0 ? Math.max(lane.total, top) : top;
    const ymax = high + 0.1 * (high - ymin) + 1;
    // "#buckets" in the address draws from the buckets only, as a long run's page does.
    const samples = lane.samples && location.hash !== "#buckets" ? new Float64Array(bytesOf(lane.samples)) : null;
    return { label: lane.label, total: lane.total, scale: lane.scale, levels: levels, ymin: ymin, ymax: ymax, samples: samples };
  });

  const S = (function () {
    const n = D.steps.n, f = new Float64Array(bytesOf(D.steps.data));
    // Energy and power (f32), where the steps carry them; the throttled steps by position.
    const e = D.steps.energy ? new Float32Array(bytesOf(D.steps.energy)) : new Float32Array(2 * n).fill(NaN);
    const throttled = new Uint8Array(n);
    for (const i of D.steps.throttled || []) throttled[i] = 1;
    return { n: n, start: f.subarray(0, n), end: f.subarray(n, 2 * n), peak: f.subarray(2 * n, 3 * n), index: f.subarray(3 * n, 4 * n),
      energy: e.subarray(0, n), power: e.subarray(n, 2 * n), throttled: throttled };
  })();
  // Steps are shaded from green to red over the range of their peaks (no shading when
  // the peaks are within 1 % of each other).
  let stepLow = Infinity, stepTop = 0;
  for (let i = 0; i < S.n; i++) if (!isNaN(S.peak[i])) { stepTop = Math.max(stepTop, S.peak[i]); stepLow = Math.min(stepLow, S.peak[i]); }
  const stepRange = stepTop - stepLow > stepTop * 0.01 ? stepTop - stepLow : 0;

  const full = [0, Math.max(D.duration, 1e-3)];
  let view = full.slice(), W = 0, H = 0, drag = null;
  const laneY = function (i) { return TOP + i * (LANE + GAP) + 14; };
  const epochY = function () { return TOP + lanes.length * (LANE + GAP) + 4; };
  const stepY = function () { return epochY() + EPOCH_H + 4; };
  const axisY = function () { return stepY() + STEP_H + 6; };
  const plotW = function () { return W - LEFT - RIGHT; };
  const xOf = function (t) { return LEFT + (t - view[0]) / (view[1] - view[0]) * plotW(); };
  const tOf = function (x) { return view[0] + (x - LEFT) / plotW() * (view[1] - view[0]); };
  const yOf = function (lane, bytes) {
    const l = lanes[lane];
    return laneY(lane) + LANE - Math.max(0, bytes - l.ymin) / (l.ymax - l.ymin) * LANE;
  };

  function mib(b) { return (b / 1048576).toFixed(1) + " MiB"; }
  function clock(t) {
    const d = new Date(D.t0 + t);
    return d.toISOString().slice(11, 23) + " UTC";
  }
  function rel(t) {
    const a = Math.abs(t);
    if (a < 1e3) return t.toFixed(a < 10 ? 2 : 1) + " ms";
    if (a < 6e4) return (t / 1e3).toFixed(3) + " s";
    if (a < 3.6e6) return Math.floor(t / 6e4) + " min " + ((t % 6e4) / 1e3).toFixed(1) + " s";
    return Math.floor(t / 3.6e6) + " h " + Math.floor((t % 3.6e6) / 6e4) + " min";
  }

  // Per-pixel min and max of the exact samples (each value held until the next).
  function exactColumns(s, w, per) {
    const lo = new Float64Array(w).fill(NaN), hi = new Float64Array(w).fill(NaN), n = s.length / 2;
    let a = 0, b = n;
    while (a < b) { const m = (a + b) >> 1; if (s[2 * m] <= view[0]) a = m + 1; else b = m; }
    let i = a, held = a > 0 ? s[2 * (a - 1) + 1] : NaN;
    for (let x = 0; x < w; x++) {
      const end = view[0] + (x + 1) * per;
      let mn = held, mx = held;
      while (i < n && s[2 * i] < end) {
        held = s[2 * i + 1];
        if (!isNaN(held)) { mn = isNaN(mn) ? held : Math.min(mn, held); mx = isNaN(mx) ? held : Math.max(mx, held); }
        i++;
      }
      lo[x] = mn; hi[x] = mx;
    }
    return { lo: lo, hi: hi };
  }

  // Per-pixel min and max (in bytes) of one lane over the current view.
  function columns(li) {
    const lane = lanes[li], w = plotW(), per = (view[1] - view[0]) / w;
    if (lane.samples && per < lane.levels[0].width) return exactColumns(lane.samples, w, per);
    let level = lane.levels[0];
    for (const l of lane.levels) if (l.width <= per) level = l;
    const lo = new Float64Array(w).fill(NaN), hi = new Float64Array(w).fill(NaN);
    const n = level.lo.length;
    for (let x = 0; x < w; x++) {
      const a = view[0] + x * per, b = a + per;
      let i0 = Math.max(0, Math.floor(a / level.width)), i1 = Math.min(n - 1, Math.floor(b / level.width));
      let mn = Infinity, mx = -1;
      for (let i = i0; i <= i1; i++) {
        if (level.hi[i] === NONE) continue;
        if (level.lo[i] < mn) mn = level.lo[i];
        if (level.hi[i] > mx) mx = level.hi[i];
      }
      if (mx >= 0) { lo[x] = mn * lane.scale; hi[x] = mx * lane.scale; }
    }
    return { lo: lo, hi: hi };
  }

  function niceStep(span, target) {
    const raw = span / target, p = Math.pow(10, Math.floor(Math.log10(raw)));
    for (const m of [1, 2, 5, 10]) if (m * p >= raw) return m * p;
    return 10 * p;
  }

  function draw() {
    const dpr = window.devicePixelRatio || 1;
    W = Math.max(320, canvas.parentElement.clientWidth);
    H = axisY() + AXIS_H;
    canvas.width = Math.round(W * dpr); canvas.height = Math.round(H * dpr);
    canvas.style.height = H + "px";
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, W, H);
    ctx.font = "12px system-ui, sans-serif";
    lanes.forEach(function (lane, li) {
      const y0 = laneY(li);
      ctx.fillStyle = "#1f2328"; ctx.textAlign = "left";
      ctx.fillText(lane.label + (lane.total ? "  (" + mib(lane.total) + " installed)" : ""), LEFT, y0 - 4);
      ctx.fillStyle = "#f6f8fa"; ctx.fillRect(LEFT, y0, plotW(), LANE);
      ctx.strokeStyle = "#d1d9e0"; ctx.fillStyle = "#59636e"; ctx.textAlign = "right";
      const step = niceStep(lane.ymax - lane.ymin, 4);
      for (let v = Math.ceil(lane.ymin / step) * step; v <= lane.ymax; v += step) {
        const y = yOf(li, v);
        ctx.beginPath(); ctx.moveTo(LEFT, y + 0.5); ctx.lineTo(LEFT + plotW(), y + 0.5); ctx.stroke();
        ctx.fillText(v >= 1073741824 ? (v / 1073741824).toFixed(step < 107374182 ? 2 : 1) + " GiB" : mib(v), LEFT - 6, y + 4);
      }
      if (lane.total && lane.total <= lane.ymax) {
        const y = yOf(li, lane.total);
        ctx.strokeStyle = "#cf222e"; ctx.setLineDash([4, 3]);
        ctx.beginPath(); ctx.moveTo(LEFT, y); ctx.lineTo(LEFT + plotW(), y); ctx.stroke();
        ctx.setLineDash([]);
      }
      const c = columns(li), base = y0 + LANE;
      for (let x = 0; x < c.hi.length; x++) {
        if (isNaN(c.hi[x])) continue;
        const yh = Math.floor(Math.min(yOf(li, c.hi[x]), base - 1)), yl = Math.max(Math.ceil(yOf(li, c.lo[x])), yh + 2);
        ctx.fillStyle = "#b6d4f5"; ctx.fillRect(LEFT + x, yl, 1, base - yl);
        ctx.fillStyle = "#0969da"; ctx.fillRect(LEFT + x, yh, 1, yl - yh);
      }
    });
    // Bars and markers stay inside the plot.
    ctx.save();
    ctx.beginPath(); ctx.rect(LEFT, 0, plotW(), H); ctx.clip();
    // Epochs.
    const ey = epochY();
    ctx.textAlign = "center";
    D.epochs.forEach(function (e, i) {
      const x0 = Math.max(LEFT, xOf(e.start)), x1 = Math.min(LEFT + plotW(), xOf(e.end));
      if (x1 < LEFT || x0 > LEFT + plotW()) return;
      ctx.fillStyle = i % 2 ? "#8250df" : "#a475f9";
      ctx.fillRect(x0, ey, Math.max(1, x1 - x0 - 1), EPOCH_H);
      if (x1 - x0 > 60) { ctx.fillStyle = "#fff"; ctx.fillText("epoch " + e.epoch, (x0 + x1) / 2, ey + 13); }
    });
    // Steps, shaded by their peak.
    const sy = stepY();
    for (let i = 0; i < S.n; i++) {
      if (S.end[i] < view[0] || S.start[i] > view[1]) continue;
      const x0 = xOf(S.start[i]), x1 = xOf(S.end[i]);
      const f = isNaN(S.peak[i]) || stepRange === 0 ? 0 : (S.peak[i] - stepLow) / stepRange;
      ctx.fillStyle = "hsl(" + (140 - 140 * f) + ",65%," + (i % 2 ? 42 : 50) + "%)";
      ctx.fillRect(x0, sy, Math.max(1, x1 - x0 - (x1 - x0 > 4 ? 1 : 0)), STEP_H);
    }
    // Diagnosis markers.
    D.markers.forEach(function (m) {
      const x = xOf(m.t);
      if (x < LEFT || x > LEFT + plotW()) return;
      ctx.strokeStyle = "#cf222e"; ctx.lineWidth = 1.5;
      ctx.beginPath(); ctx.moveTo(x, TOP); ctx.lineTo(x, sy + STEP_H); ctx.stroke();
      ctx.lineWidth = 1; ctx.fillStyle = "#cf222e";
      ctx.beginPath(); ctx.moveTo(x - 5, TOP); ctx.lineTo(x + 5, TOP); ctx.lineTo(x, TOP + 8); ctx.fill();
    });
    ctx.restore();
    // Time axis.
    const ay = axisY();
    ctx.fillStyle = "#59636e"; ctx.strokeStyle = "#59636e"; ctx.textAlign = "center";
    const ts = niceStep(view[1] - view[0], Math.max(2, plotW() / 110));
    for (let t = Math.ceil(view[0] / ts) * ts; t <= view[1]; t += ts) {
      const x = xOf(t);
      ctx.beginPath(); ctx.moveTo(x, ay); ctx.lineTo(x, ay + 4); ctx.stroke();
      ctx.fillText(rel(t), x, ay + 16);
    }
    ctx.textAlign = "left";
    ctx.fillText("epochs", 4, ey + 13); ctx.fillText("steps", 4, sy + 16);
    if (D.steps.all > S.n) ctx.fillText("(" + S.n + " of " + D.steps.all + " steps: the highest peaks)", LEFT, sy + STEP_H + 26);
    if (drag && Math.abs(drag.x1 - drag.x0) > 2) {
      ctx.fillStyle = "rgba(9,105,218,0.15)";
      ctx.fillRect(Math.min(drag.x0, drag.x1), TOP, Math.abs(drag.x1 - drag.x0), sy + STEP_H - TOP);
    }
  }

  function zoom(t0, t1) {
    const min = 0.01;
    if (t1 - t0 < min) { const c = (t0 + t1) / 2; t0 = c - min / 2; t1 = c + min / 2; }
    view = [Math.max(full[0], t0), Math.min(full[1], t1)];
    draw();
  }

  // The step under x: among the steps that cover the pixel, the one with the highest peak.
  function stepAt(x) {
    const a = tOf(x - 0.5), b = tOf(x + 0.5);
    let best = -1;
    let lo = 0, hi = S.n;
    while (lo < hi) { const m = (lo + hi) >> 1; if (S.start[m] < b) lo = m + 1; else hi = m; }
    for (let i = lo - 1; i >= 0 && i >= lo - 4096; i--) {
      if (S.end[i] < a) continue;
      if (best < 0 || S.peak[i] > S.peak[best]) best = i;
    }
    return best;
  }

  function stepText(i) {
    const p = S.peak[i];
    return "step " + S.index[i] + "\nstart " + rel(S.start[i]) + "  (" + clock(S.start[i]) + ")\nend   " +
      rel(S.end[i]) + "  (" + clock(S.end[i]) + ")\nduration " + rel(S.end[i] - S.start[i]) +
      "\npeak " + (isNaN(p) ? "-" : p.toFixed(0) + " B (" + mib(p) + ")") + energyText(S.energy[i], S.power[i]) +
      (S.throttled[i] > 0 ? "\nthrottled (gpu.throttled)" : "");
  }

  // "energy 28.0 J (280 W)"; a negative figure is an estimate from power readings.
  function energyText(j, w) {
    if (isNaN(j)) return "";
    const a = Math.abs(j);
    const text = a < 1e3 ? a.toFixed(1) + " J" : a < 1e6 ? (a / 1e3).toFixed(2) + " kJ" : (a / 3.6e6).toFixed(2) + " kWh";
    return "\nenergy " + (j < 0 ? "~" : "") + text + (isNaN(w) ? "" : " (" + (w >= 100 ? w.toFixed(0) : w.toFixed(1)) + " W)");
  }

  function tipText(x, y) {
    for (const m of D.markers) {
      if (Math.abs(xOf(m.t) - x) <= 4 && y < stepY() + STEP_H) {
        return m.name + " on " + m.span + " at " + rel(m.t) + "\n" + m.attributes.map(function (kv) { return kv[0] + " = " + kv[1]; }).join("\n");
      }
    }
    if (x < LEFT || x > LEFT + plotW()) return null;
    const sy = stepY();
    if (y >= sy && y <= sy + STEP_H) { const i = stepAt(x); return i < 0 ? null : stepText(i); }
    const ey = epochY();
    if (y >= ey && y <= ey + EPOCH_H) {
      const t = tOf(x);
      for (const e of D.epochs) if (e.start <= t && t <= e.end) {
        return "epoch " + e.epoch + "\nstart " + rel(e.start) + "\nend   " + rel(e.end) +
          (e.memory ? "\nGPU start " + mib(e.memory[0]) + "\nGPU peak  " + e.memory[1] + " B (" + mib(e.memory[1]) + ")\nGPU end   " + mib(e.memory[2]) : "") +
          (e.energy == null ? "" : energyText(e.energy, e.power == null ? NaN : e.power));
      }
      return null;
    }
    for (let li = 0; li < lanes.length; li++) {
      const y0 = laneY(li);
      if (y >= y0 && y <= y0 + LANE) {
        const c = columns(li), px = Math.floor(x - LEFT);
        if (isNaN(c.hi[px])) return lanes[li].label + "\n" + rel(tOf(x)) + ": not read";
        return lanes[li].label + "\n" + rel(tOf(x)) + "  (" + clock(tOf(x)) + ")\nmax " + mib(c.hi[px]) + "\nmin " + mib(c.lo[px]);
      }
    }
    return null;
  }

  canvas.addEventListener("wheel", function (ev) {
    ev.preventDefault();
    const t = tOf(ev.offsetX), f = ev.deltaY < 0 ? 1 / 1.5 : 1.5;
    zoom(t - (t - view[0]) * f, t + (view[1] - t) * f);
  }, { passive: false });
  canvas.addEventListener("mousedown", function (ev) { drag = { x0: ev.offsetX, x1: ev.offsetX }; });
  canvas.addEventListener("mousemove", function (ev) {
    if (drag) { drag.x1 = ev.offsetX; draw(); }
    const text = tipText(ev.offsetX, ev.offsetY);
    if (!text) { tip.hidden = true; return; }
    tip.textContent = text; tip.hidden = false;
    const left = Math.min(ev.offsetX + 14, W - tip.offsetWidth - 4);
    tip.style.left = Math.max(0, left) + "px"; tip.style.top = (ev.offsetY + 14) + "px";
  });
  canvas.addEventListener("mouseleave", function () { tip.hidden = true; });
  window.addEventListener("mouseup", function () {
    if (!drag) return;
    const d = drag; drag = null;
    if (Math.abs(d.x1 - d.x0) > 3) zoom(tOf(Math.min(d.x0, d.x1)), tOf(Math.max(d.x0, d.x1)));
    else draw();
  });
  canvas.addEventListener("dblclick", function () { zoom(full[0], full[1]); });
  document.getElementById("reset").addEventListener("click", function () { zoom(full[0], full[1]); });
  window.addEventListener("resize", draw);
  draw();

  // For scripts that check the page (and people at the console).
  window.gpuspan = {
    view: function () { return view.slice(); },
    zoom: zoom,
    columns: function (li) { const c = columns(li); return { lo: Array.from(c.lo), hi: Array.from(c.hi) }; },
    xOf: xOf, yOf: yOf, laneY: laneY, lane: LANE, left: LEFT, plotWidth: plotW,
    steps: function () { return { n: S.n, start: Array.from(S.start), end: Array.from(S.end), peak: Array.from(S.peak), index: Array.from(S.index), energy: Array.from(S.energy), power: Array.from(S.power), throttled: Array.from(S.throttled) }; },
    stepText: stepText,
    stepY: function () { return stepY() + STEP_H / 2; },
    ready: true,
  };
})();
