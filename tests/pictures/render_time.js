// Prints how long a report page takes to load and draw in headless Chromium, and how long
// one zoom redraw takes: node render_time.js PAGE.html
"use strict";
const path = require("path");
const { withPage } = require("./browser");

withPage(900, async function (page, out) {
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
    (out.errors.length ? ", errors: " + out.errors.join("; ") : ""));
}).catch(function (e) { console.error(e); process.exit(1); });
