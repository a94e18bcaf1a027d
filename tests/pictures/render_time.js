// Prints how long a report page takes to load and draw in headless Chromium, and how long
// one zoom redraw takes: node render_time.js PAGE.html
"use strict";
const fs = require("fs");
const os = require("os");
const path = require("path");
const { chromium } = require("playwright-core");

(async function () {
  const profile = fs.mkdtempSync(path.join(os.tmpdir(), "gpuspan-chromium-"));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    headless: true,
    viewport: { width: 1400, height: 900 },
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
  try {
    const page = context.pages()[0] || await context.newPage();
    const errors = [];
    page.on("pageerror", function (e) { errors.push(String(e)); });
    const started = Date.now();
    await page.goto("file://" + path.resolve(process.argv[2]));
    await page.waitForFunction(function () { return window.gpuspan && window.gpuspan.ready; }, null, { timeout: 60000 });
    const load = Date.now() - started;
    const zoom = await page.evaluate(function () {
      const t = performance.now(), v = window.gpuspan.view();
      window.gpuspan.zoom(v[0] + (v[1] - v[0]) * 0.4, v[0] + (v[1] - v[0]) * 0.41);
      return performance.now() - t;
    });
    console.log("load and draw " + load + " ms, one zoom " + zoom.toFixed(0) + " ms" +
      (errors.length ? ", errors: " + errors.join("; ") : ""));
  } finally {
    await context.close();
    fs.rmSync(profile, { recursive: true, force: true });
  }
})().catch(function (e) { console.error(e); process.exit(1); });
