// Opens a gpuspan report page in headless Chromium (Debian's, driven by playwright-core)
// and prints what a person would see, as JSON, for the Rust test to judge:
//   node check_page.js PAGE.html EXPECT.json SCREENSHOT_DIR
// EXPECT.json: {"spikeMs": time of the spike from the page's origin, "step": ml.step of the
// step holding it}. Prints {errors, full, zoomed, tip, ...}, and bucketsFull and
// bucketsZoomed for the page drawn from its min/max buckets only (as a long run's is).
"use strict";
const fs = require("fs");
const path = require("path");
const { withPage } = require("./browser");

const [page_, expectFile, shots] = process.argv.slice(2);
const expect = JSON.parse(fs.readFileSync(expectFile, "utf8"));

// Per-pixel max around the spike, the lowest and typical column maxima in view, and how
// many of the pixels just under the spike's top are painted in the chart's blue (#0969da,
// or its blend at an edge) rather than the background or the light fill under the minimum.
async function look(page) {
  return page.evaluate(function (spikeMs) {
    const g = window.gpuspan, c = g.columns(0), x = Math.floor(g.xOf(spikeMs) - g.left);
    let peak = -1;
    for (let i = Math.max(0, x - 2); i <= Math.min(c.hi.length - 1, x + 2); i++) peak = Math.max(peak, c.hi[i]);
    const sorted = c.hi.filter(function (v) { return !isNaN(v); }).sort(function (a, b) { return a - b; });
    const canvas = document.getElementById("canvas"), dpr = window.devicePixelRatio || 1;
    const ctx = canvas.getContext("2d");
    let blue = 0;
    for (let dx = -2; dx <= 2; dx++) {
      const px = ctx.getImageData(Math.round((g.left + x + dx + 0.5) * dpr), Math.floor((Math.floor(g.yOf(0, peak)) + 1) * dpr), 1, 1).data;
      if (px[2] - px[0] > 100) blue++;
    }
    return { peak: peak, low: sorted[0], median: sorted[Math.floor(sorted.length / 2)], x: x, width: c.hi.length, bluePixels: blue, view: g.view() };
  }, expect.spikeMs);
}

withPage(700, async function (page, out) {
  const started = Date.now();
  await page.goto("file://" + path.resolve(page_));
  await page.waitForFunction(function () { return window.gpuspan && window.gpuspan.ready; }, null, { timeout: 20000 });
  out.renderMs = Date.now() - started;
  out.full = await look(page);
  await page.screenshot({ path: path.join(shots, "report-full.png"), fullPage: true });

  // Zoom with the wheel around the spike, as a person would.
  const box = await page.locator("#canvas").boundingBox();
  const at = await page.evaluate(function (t) { return window.gpuspan.xOf(t); }, expect.spikeMs);
  const y = box.y + 80;
  await page.mouse.move(box.x + at, y);
  for (let i = 0; i < 8; i++) {
    await page.mouse.wheel(0, -200);
    await page.waitForTimeout(30);
  }
  out.zoomed = await look(page);

  // Hover the step that holds the spike.
  const target = await page.evaluate(function (step) {
    const g = window.gpuspan, s = g.steps();
    const i = s.index.indexOf(step);
    return { x: (g.xOf(s.start[i]) + g.xOf(s.end[i])) / 2, y: g.stepY(), peak: s.peak[i] };
  }, expect.step);
  await page.mouse.move(box.x + target.x, box.y + target.y);
  await page.waitForTimeout(50);
  out.tip = await page.evaluate(function () {
    const t = document.getElementById("tip");
    return t.hidden ? null : t.textContent;
  });
  await page.screenshot({ path: path.join(shots, "report-zoomed.png"), fullPage: true });

  // The same from the buckets only.
  await page.goto("file://" + path.resolve(page_) + "#buckets");
  await page.reload();
  await page.waitForFunction(function () { return window.gpuspan && window.gpuspan.ready; }, null, { timeout: 20000 });
  out.bucketsFull = await look(page);
  await page.mouse.move(box.x + at, y);
  for (let i = 0; i < 8; i++) {
    await page.mouse.wheel(0, -200);
    await page.waitForTimeout(30);
  }
  out.bucketsZoomed = await look(page);
}).then(function (out) {
  console.log(JSON.stringify(out));
}).catch(function (e) { console.error(e); process.exit(1); });
