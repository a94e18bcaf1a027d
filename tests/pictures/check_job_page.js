// Opens a job's page (gpuspan report JOB_DIR --html) in headless Chromium (Debian's, driven
// by playwright-core) and prints what a person sees, as JSON, for the Rust test to judge:
//   node check_job_page.js PAGE.html SCREENSHOT_DIR
// Prints {errors, requests, lanes: [{rank, label, bars, worst, peaks, height}], tip, firstOom,
// epochs: [[cells...]], steps}.
"use strict";
const path = require("path");
const { withPage } = require("./browser");

const [page_, shots] = process.argv.slice(2);

withPage(700, async function (page, out) {
  await page.goto("file://" + path.resolve(page_));
  Object.assign(out, await page.evaluate(function () {
    const lanes = Array.from(document.querySelectorAll("#lanes .lane")).map(function (g) {
      const bars = Array.from(g.querySelectorAll("rect.bar"));
      return {
        rank: g.getAttribute("data-rank"),
        label: g.querySelector("text.lane-peak").textContent,
        bars: bars.length,
        worst: bars.filter(function (b) { return b.classList.contains("worst"); }).length,
        peaks: bars.map(function (b) { return Number(b.getAttribute("data-peak")); }),
        // Drawn height on screen, in CSS pixels, of the lane's highest bar.
        height: Math.max.apply(null, bars.map(function (b) { return b.getBoundingClientRect().height; })),
      };
    });
    const first = document.getElementById("first-oom");
    return {
      lanes: lanes,
      firstOom: first ? first.textContent : null,
      epochs: Array.from(document.querySelectorAll("#job-epochs tbody tr")).map(function (tr) {
        return Array.from(tr.cells).map(function (c) { return c.textContent; });
      }),
      steps: (document.getElementById("job-steps") || {}).textContent || null,
    };
  }));
  // What the browser shows when hovering the last rank's first bar.
  out.tip = await page.evaluate(function () {
    const lanes = document.querySelectorAll("#lanes .lane");
    const bar = lanes[lanes.length - 1].querySelector("rect.bar");
    return bar.querySelector("title").textContent;
  });
  await page.screenshot({ path: path.join(shots, "job-report.png"), fullPage: true });
}).then(function (out) {
  console.log(JSON.stringify(out));
}).catch(function (e) { console.error(e); process.exit(1); });
